// ParticipantImpl (participant_impl.h): the rank's metrics (docs/observability.md). MetricsScope
// times a public call and publishes the gauges after it; MetricsGauges reads them off the
// state under mu_ (counters kept as the transaction goes: no pass over the parameters).
#include <algorithm>

#include "src/txn/participant_impl.h"

namespace wtx::participant_internal {

MetricsScope::MetricsScope(const ParticipantImpl* p, std::optional<metrics::RankPhase> phase)
    : p_(p) {
  if (phase) timer_.emplace(p->rank_metrics(), *phase);
}

MetricsScope::~MetricsScope() {
  timer_.reset();  // the phase ends with the call, before publishing
  p_->PublishMetrics();
}

std::string ParticipantImpl::HeldReason() const {
  if (crashed_) return "crashed";
  if (active_) {
    // Recovered with a yes vote and no outcome: the decision is not known here.
    if (active_->interrupted && active_->prepared && active_->vote_yes) return "in_doubt";
    return "updating";
  }
  if (moved_count_ > 0) return "storage_moved";
  if (!loaded_) return "not_loaded";
  if (!state_.version) return "never_committed";
  if (DirtyLocked()) return "dirty";
  if (!StaleDerived().empty()) return "stale_derived";
  if (hold_) return "held";
  return Serving() ? "" : "dirty";
}

metrics::RankGauges ParticipantImpl::MetricsGauges() const {
  metrics::RankGauges g;
  g.serving = Serving();
  g.dirty = DirtyLocked() || crashed_;
  g.held_reason = g.serving ? "" : HeldReason();
  g.version = state_.version;
  if (state_.version && state_.committed_tx) g.label = *state_.committed_tx;
  g.step = state_.step;
  g.lineage = state_.lineage;
  if (!active_) return g;
  const ActiveTx& tx = *active_;
  g.tx_start_seconds = static_cast<double>(tx.t_begin) / 1e6;
  if (tx.req.kind == TxKind::kDelta) {
    const size_t sources = std::max(tx.sources.size(), tx.patches.size());
    g.coverage = sources ? tx.sources_patched / static_cast<double>(sources) : 0;
  } else if (tx.required_elements > 0) {
    g.coverage =
        static_cast<double>(tx.covered_elements) / static_cast<double>(tx.required_elements);
  }
  g.coverage = std::clamp(g.coverage, 0.0, 1.0);
  return g;
}

void ParticipantImpl::PublishMetrics() const {
  if (!metrics_) return;  // Init failed before the metrics existed
  metrics::RankGauges g;
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    g = MetricsGauges();
    if (active_) {
      bytes = active_->bytes - metrics_bytes_reported_;
      metrics_bytes_reported_ = active_->bytes;
    }
  }
  metrics_->BytesWritten(static_cast<uint64_t>(std::max<int64_t>(bytes, 0)));
  metrics_->Publish(g);
}

}  // namespace wtx::participant_internal
