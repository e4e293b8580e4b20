// ParticipantImpl (participant_impl.h): derived state and the checks prepare runs locally.
// Refresh marks derived state current; StaleDerived names what a write made stale;
// CollectMissing lists the coverage gaps of the active transaction; LocalChecks turns coverage,
// unlanded reservations, staleness and kernel identity into the vote.
#include "src/txn/participant_impl.h"

#include <algorithm>

namespace wtx::participant_internal {

Result<std::vector<std::string>> ParticipantImpl::Refresh(std::string_view name) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kDerived);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  std::vector<uint32_t> targets;
  if (name == "*") {
    for (const auto& s : StaleDerived()) targets.push_back(*manifest_->FindDerived(s.name));
  } else {
    auto d = manifest_->FindDerived(name);
    if (!d) {
      return Err(ErrorCode::kUnknownParam, "unknown derived state '" + std::string(name) + "'");
    }
    targets.push_back(*d);
  }
  std::vector<std::string> names;
  for (uint32_t d : targets) {
    derived_epoch_[d] = ++epoch_;
    derived_restored_[d].clear();
    names.push_back(manifest_->derived()[d].name);
  }
  if (active_ && !names.empty()) {
    pending_.emplace_back(RefreshRecord{active_->req.tx, names, options_.env.clock->NowMicros()});
  }
  return names;
}

std::vector<StaleDerivedState> ParticipantImpl::StaleDerived() const {
  std::vector<StaleDerivedState> out;
  const auto& derived = manifest_->derived();
  for (uint32_t d = 0; d < derived.size(); ++d) {
    StaleDerivedState s;
    for (const auto& src : derived[d].sources) {
      uint32_t p = *manifest_->FindParam(src);
      const auto& restored = derived_restored_[d];
      if (param_epoch_[p] > derived_epoch_[d] ||
          std::find(restored.begin(), restored.end(), src) != restored.end()) {
        s.written_sources.push_back(src);
      }
    }
    if (!s.written_sources.empty()) {
      s.name = derived[d].name;
      s.phase = derived[d].phase;
      out.push_back(std::move(s));
    }
  }
  return out;
}

void ParticipantImpl::CollectMissing(Vote* vote) const {
  const ActiveTx& tx = *active_;
  // Nothing is cut: every {param, shard} with a gap is named. A shard with many gap boxes is
  // one piece (their bounding box, with the count), so the vote stays bounded by the manifest.
  auto add = [&](MissingPiece m) {
    vote->missing_total += static_cast<size_t>(m.boxes);
    vote->missing.push_back(std::move(m));
  };
  const auto& params = manifest_->params();
  if (tx.req.kind == TxKind::kDelta) {
    for (const auto& src : tx.req.sources) {
      const auto& refs = manifest_->ShardsOfSource(src);
      if (refs.empty()) continue;
      auto it = tx.patches.find(src);
      if (it != tx.patches.end() && it->second.by_piece) {
        // Pieces: each shard's source box less the pieces' boxes is what is missing.
        for (const ShardRef& ref : refs) {
          const ParamSpec& p = params[ref.param];
          const ShardSpec& s = p.shards[ref.shard];
          for (const Box& g : SubtractBoxes(s.source_box, it->second.boxes)) {
            add({p.name, s.id, LiveBoxOfSourcePart(s, g), src, {}, 0, 1, NumElements(g)});
          }
        }
        continue;
      }
      std::vector<int> missing_parts;
      int parts = 0;
      if (it == tx.patches.end() || it->second.parts == 0) {
        missing_parts.push_back(0);
      } else {
        parts = it->second.parts;
        for (int k = 0; k < parts; ++k) {
          if (!it->second.got[k]) missing_parts.push_back(k);
        }
      }
      if (missing_parts.empty()) continue;
      for (const ShardRef& ref : refs) {
        const ParamSpec& p = params[ref.param];
        const ShardSpec& s = p.shards[ref.shard];
        add({p.name, s.id, s.box, src, missing_parts, parts, 1, NumElements(s.box)});
      }
    }
    return;
  }
  for (uint32_t pi = 0; pi < params.size(); ++pi) {
    if (tx.req.kind == TxKind::kPartial && !tx.in_scope[pi]) continue;
    const CoverageSet* cov = tx.coverage[pi].get();
    if (cov && cov->complete()) continue;
    const ParamSpec& p = params[pi];
    for (const ShardSpec& s : p.shards) {
      // Padding rows have no source and keep what the engine put there: never required.
      if (s.padding || BoxIsEmpty(s.box)) continue;
      if (!cov || cov->covered() == 0) {
        add({p.name, s.id, s.box, s.source, {}, 0, 1, NumElements(s.box)});
        continue;
      }
      std::vector<Box> gaps;
      ForEachFlatRun(p.shape, s.box, [&](int64_t b, int64_t len) {
        cov->ForEachGap(b, len, [&](int64_t gb, int64_t gl) {
          FlatIntervalToBoxes(p.shape, gb, gb + gl, &gaps);
        });
      });
      gaps = MergeAdjacentBoxes(std::move(gaps));
      if (gaps.empty()) continue;
      if (static_cast<int64_t>(gaps.size()) <= kMaxMissingBoxesPerShard) {
        for (auto& g : gaps) {
          const int64_t n = NumElements(g);
          add({p.name, s.id, std::move(g), s.source, {}, 0, 1, n});
        }
        continue;
      }
      Box bound = gaps[0];
      int64_t elements = 0;
      for (const Box& g : gaps) {
        elements += NumElements(g);
        for (size_t d = 0; d < bound.size(); ++d) {
          bound[d].begin = std::min(bound[d].begin, g[d].begin);
          bound[d].end = std::max(bound[d].end, g[d].end);
        }
      }
      add({p.name,
           s.id,
           std::move(bound),
           s.source,
           {},
           0,
           static_cast<int64_t>(gaps.size()),
           elements});
    }
  }
}

void ParticipantImpl::LocalChecks(Vote* vote) const {
  const ActiveTx& tx = *active_;
  if (!tx.failed_read.empty()) vote->errors.push_back(ErrorCode::kBadWrite);
  CollectMissing(vote);
  std::string unlanded;
  for (const auto& [key, landing] : tx.landings) {
    if (!landing.landed) unlanded += (unlanded.empty() ? "" : ", ") + landing.name;
  }
  if (vote->missing_total > 0 || !unlanded.empty()) {
    vote->errors.push_back(ErrorCode::kCoverageIncomplete);
  }
  vote->stale = StaleDerived();
  if (!vote->stale.empty()) vote->errors.push_back(ErrorCode::kStaleDerived);
  if (kernel_identity_ != tx.kernel_identity_at_begin) {
    vote->errors.push_back(ErrorCode::kKernelIdentityChanged);
  }
  vote->yes = vote->errors.empty();
  if (vote->yes) return;
  vote->error = vote->errors.front();
  std::string msg = "rank " + Rank() + ":";
  if (!tx.failed_read.empty()) msg += " a read failed (" + tx.failed_read + ");";
  if (vote->missing_total) msg += " " + std::to_string(vote->missing_total) + " piece(s) missing;";
  if (!unlanded.empty()) msg += " reserved but never landed: " + unlanded + ";";
  if (!vote->stale.empty()) msg += " " + std::to_string(vote->stale.size()) + " stale derived;";
  if (kernel_identity_ != tx.kernel_identity_at_begin) {
    msg += " kernel identity changed from '" + tx.kernel_identity_at_begin + "' to '" +
           kernel_identity_ + "';";
  }
  msg.pop_back();
  vote->message = msg;
}

}  // namespace wtx::participant_internal
