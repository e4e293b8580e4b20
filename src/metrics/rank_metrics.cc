// RankMetrics (rank_metrics.h).
#include "src/metrics/rank_metrics.h"

#include <map>

#include "src/metrics/metrics_hub.h"

namespace wtx::metrics {
namespace {

// How many live RankMetrics publish each label set (see the header: the last one removes).
std::mutex& UsersMu() {
  static std::mutex mu;
  return mu;
}
std::map<Labels, int>& Users() {
  static auto* users = new std::map<Labels, int>();
  return *users;
}

}  // namespace

std::string_view RankPhaseName(RankPhase p) {
  switch (p) {
    case RankPhase::kBegin:
      return "begin";
    case RankPhase::kWrite:
      return "write";
    case RankPhase::kLanded:
      return "landed";
    case RankPhase::kDerived:
      return "derived";
    case RankPhase::kPrepare:
      return "prepare";
    case RankPhase::kCommit:
      return "commit";
    case RankPhase::kRestore:
      return "restore";
    case RankPhase::kVerify:
      return "verify";
  }
  return "unknown";
}

static Labels BaseLabels(int rank, Labels extra) {
  extra["role"] = "rank";
  extra["rank"] = std::to_string(rank);
  return extra;
}

RankMetrics::RankMetrics(int rank, Labels extra) : base_(BaseLabels(rank, std::move(extra))) {
  std::lock_guard<std::mutex> l(UsersMu());
  ++Users()[base_];
}

RankMetrics::~RankMetrics() {
  bool last = false;
  {
    std::lock_guard<std::mutex> l(UsersMu());
    last = --Users()[base_] == 0;
    if (last) Users().erase(base_);
  }
  std::lock_guard<std::mutex> l(mu_);
  if (last && published_) RemoveGauges();
}

void RankMetrics::Phase(RankPhase p, double seconds) {
  MetricsHub::Get().Observe(Series::kPhaseDuration, With("phase", RankPhaseName(p)), seconds);
}

void RankMetrics::BytesWritten(uint64_t bytes) {
  if (bytes == 0) return;
  MetricsHub::Get().Add(Series::kBytesWritten, base_, static_cast<double>(bytes));
}

void RankMetrics::Ended(std::string_view kind, std::string_view outcome) {
  Labels l = With("kind", kind);
  l["outcome"] = std::string(outcome);
  MetricsHub::Get().Add(Series::kTransactions, l, 1);
}

void RankMetrics::CausedAbort(std::string_view code) {
  MetricsHub::Get().Add(Series::kAborts, With("code", code), 1);
}

void RankMetrics::JournalSync(double seconds) {
  MetricsHub::Get().Observe(Series::kJournalSync, base_, seconds);
}

void RankMetrics::Publish(const RankGauges& g) {
  std::lock_guard<std::mutex> l(mu_);
  if (published_ && g == last_) return;
  MetricsHub& hub = MetricsHub::Get();
  const bool first = !published_;
  if (first || g.serving != last_.serving) hub.Set(Series::kServing, base_, g.serving ? 1 : 0);
  if (first || g.dirty != last_.dirty) hub.Set(Series::kDirty, base_, g.dirty ? 1 : 0);
  if (first || g.coverage != last_.coverage) hub.Set(Series::kCoverage, base_, g.coverage);
  if (first || g.tx_start_seconds != last_.tx_start_seconds) {
    hub.Set(Series::kTransactionStart, base_, g.tx_start_seconds);
  }
  if (first || g.held_reason != last_.held_reason) {
    if (!first && !last_.held_reason.empty()) {
      hub.Remove(Series::kHeld, With("reason", last_.held_reason));
    }
    if (!g.held_reason.empty()) hub.Set(Series::kHeld, With("reason", g.held_reason), 1);
  }
  if (first || g.version != last_.version || g.label != last_.label) {
    if (!first && last_.version) {
      hub.Remove(Series::kVersion, VersionLabels(*last_.version, last_.label));
    }
    if (g.version) hub.Set(Series::kVersion, VersionLabels(*g.version, g.label), 1);
  }
  if (first || g.step != last_.step || g.lineage != last_.lineage) {
    if (!first && last_.step && g.lineage != last_.lineage) {
      hub.Remove(Series::kCommittedStep, With("lineage", last_.lineage));
    }
    if (g.step) {
      hub.Set(Series::kCommittedStep, With("lineage", g.lineage), static_cast<double>(*g.step));
    } else if (!first && last_.step) {
      hub.Remove(Series::kCommittedStep, With("lineage", last_.lineage));
    }
  }
  last_ = g;
  published_ = true;
}

void RankMetrics::RemoveGauges() {
  MetricsHub& hub = MetricsHub::Get();
  for (Series s :
       {Series::kServing, Series::kDirty, Series::kCoverage, Series::kTransactionStart}) {
    hub.Remove(s, base_);
  }
  if (!last_.held_reason.empty()) hub.Remove(Series::kHeld, With("reason", last_.held_reason));
  if (last_.version) hub.Remove(Series::kVersion, VersionLabels(*last_.version, last_.label));
  if (last_.step) hub.Remove(Series::kCommittedStep, With("lineage", last_.lineage));
}

}  // namespace wtx::metrics
