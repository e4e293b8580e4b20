// ParticipantImpl (participant_impl.h): the vote and the decision. CheckPrepare and Prepare
// (local checks, verify all, the rank digest and the synced PREPARED record), the digests
// (DigestLocked from the hash caches, RecomputeDigest from every live byte), Decide (the dirty
// rule, restore on abort, the OUTCOME record) and ResolveInDoubt.
#include "src/txn/participant_impl.h"

namespace wtx::participant_internal {

namespace {

// The PREPARED record's list of what is missing: every {param, shard}, grouped by parameter
// (and by source for a delta's missing parts) so that a manifest of ~10^5 shards stays a
// record of a few MB at most.
std::vector<MissingGroup> MissingGroups(const std::vector<MissingPiece>& missing) {
  std::vector<MissingGroup> out;
  for (const MissingPiece& m : missing) {
    const bool delta = !m.missing_parts.empty();
    MissingGroup* group = out.empty() ? nullptr : &out.back();
    if (group && (group->param != m.param || (delta && group->source.value_or("") != m.source))) {
      group = nullptr;
    }
    if (!group) {
      MissingGroup g;
      g.param = m.param;
      if (delta) {
        g.source = m.source;
        g.missing_parts.assign(m.missing_parts.begin(), m.missing_parts.end());
        g.parts = m.parts;
      }
      out.push_back(std::move(g));
      group = &out.back();
    }
    if (group->shards.empty() || group->shards.back() != m.shard) group->shards.push_back(m.shard);
  }
  return out;
}

}  // namespace

Result<Vote> ParticipantImpl::CheckPrepare(std::string_view txid) const {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (!active_ || active_->req.tx != txid) {
    return Err(ErrorCode::kNoTx,
               "rank " + Rank() + ": transaction '" + std::string(txid) + "' is not active");
  }
  Vote vote;
  vote.rank = options_.rank;
  vote.tx = std::string(txid);
  vote.wrote = active_->wrote;
  if (active_->prepared) {  // decided already: the vote that was cast
    vote.yes = active_->vote_yes;
    return vote;
  }
  LocalChecks(&vote);
  return vote;
}

Result<ParticipantImpl::RankDigests> ParticipantImpl::DigestLocked() {
  DrainLandingHashes();
  const auto& params = manifest_->params();
  std::vector<uint64_t> live(params.size());
  for (uint32_t i = 0; i < params.size(); ++i) {
    if (host_memory_) {
      live[i] = hash_[i].Digest(memory_->Param(i));
      continue;
    }
    auto d = hash_[i].Digest([&](size_t first, size_t count, uint64_t* out) {
      return memory_->ChunkDigests(i, first, count, out);
    });
    if (!d.ok()) return MemoryFailed(d.status());
    live[i] = d.value();
  }
  RankDigests out;
  out.served = ServedRankDigest(*manifest_, live);
  // A processed parameter's checkpoint digest: of the bytes this transaction declared, else
  // the committed version's.
  std::vector<uint64_t> checkpoint = live;
  bool any_processed = false;
  for (uint32_t i = 0; i < params.size(); ++i) {
    if (!params[i].served) continue;
    any_processed = true;
    if (params[i].served_only()) {  // nothing is sent for it: zeros, as the trainer counts it
      checkpoint[i] = ZeroImageDigest(i);
      continue;
    }
    const CheckpointImageDigest* declared = nullptr;
    const uint64_t* adopted = nullptr;
    if (active_) {
      auto it = active_->checkpoint.find(i);
      if (it != active_->checkpoint.end() && it->second.complete()) declared = &it->second;
      auto a = active_->adopted.find(i);
      if (a != active_->adopted.end()) adopted = &a->second;
    }
    if (declared) {
      checkpoint[i] = declared->Digest();
    } else if (adopted) {
      checkpoint[i] = *adopted;
    } else if (checkpoint_digest_[i]) {
      checkpoint[i] = *checkpoint_digest_[i];
    } else {
      return Err(ErrorCode::kCoverageIncomplete,
                 "rank " + Rank() + ": the checkpoint digest of processed parameter '" +
                     params[i].name +
                     "' is not known (not declared in this transaction, and none committed in "
                     "this process or stored in the journal): a full update must declare it");
    }
    out.processed.emplace_back(i, checkpoint[i]);
  }
  out.checkpoint = any_processed ? RankDigest(*manifest_, checkpoint) : out.served;
  return out;
}

uint64_t ParticipantImpl::ZeroImageDigest(uint32_t param) const {
  const size_t bytes = static_cast<size_t>(manifest_->params()[param].num_bytes());
  static const std::vector<uint8_t> kZeros(kHashChunkBytes, 0);
  static const uint64_t kZeroChunk = ChunkDigest(kZeros.data(), kZeros.size());
  std::vector<uint64_t> chunks(bytes / kHashChunkBytes, kZeroChunk);
  if (bytes % kHashChunkBytes != 0) {
    chunks.push_back(ChunkDigest(kZeros.data(), bytes % kHashChunkBytes));
  }
  return ParamDigestFromChunks(chunks);
}

Result<std::string> ParticipantImpl::RecomputeDigest() {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckIdentityLocked(all_params_));
  const auto& params = manifest_->params();
  std::vector<uint64_t> digests(params.size());
  for (uint32_t i = 0; i < params.size(); ++i) {
    if (host_memory_) {
      digests[i] = ParamDigest(memory_->Param(i));
      continue;
    }
    // No caches: every chunk from the live bytes.
    const size_t chunks = (memory_->Size(i) + kHashChunkBytes - 1) / kHashChunkBytes;
    std::vector<uint64_t> c(chunks);
    Status s = memory_->ChunkDigests(i, 0, chunks, c.data());
    if (!s.ok()) return Status::IOError("rank " + Rank() + ": live memory: " + s.ToString());
    digests[i] = ParamDigestFromChunks(c);
  }
  return ServedRankDigest(*manifest_, digests);
}

Result<Vote> ParticipantImpl::Prepare(std::string_view txid) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kPrepare);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  Vote vote;
  vote.rank = options_.rank;
  vote.tx = std::string(txid);
  if (!active_ || active_->req.tx != txid) {
    vote.error = ErrorCode::kNoTx;
    vote.errors = {ErrorCode::kNoTx};
    vote.message = "rank " + Rank() + ": transaction '" + std::string(txid) + "' is not active";
    return vote;
  }
  ActiveTx& tx = *active_;
  if (tx.prepared) {  // a repeated prepare gets the same answer
    vote.yes = tx.vote_yes;
    vote.wrote = tx.wrote;
    if (tx.vote_yes && state_.active) {
      vote.digest = state_.active->digest.value_or("");
      vote.served_digest = state_.active->served_digest.value_or(vote.digest);
    }
    return vote;
  }
  const int64_t t0 = options_.env.clock->NowMicros();
  vote.wrote = tx.wrote;
  LocalChecks(&vote);
  WTX_RETURN_IF_ERROR(CheckPieceDigests(&vote));
  // The version describes every parameter's bytes: each must still be where wtx is bound.
  if (Status moved = CheckIdentityLocked(all_params_); !moved.ok()) {
    if (moved.code() != ErrorCode::kStorageMoved) return moved;
    vote.errors.insert(vote.errors.begin(), ErrorCode::kStorageMoved);
    vote.error = ErrorCode::kStorageMoved;
    vote.yes = false;
    vote.message = moved.message();
  }
  // Served-only tensors (MLA's absorbed matrices) are the engine's own work in a transaction
  // that wrote: declared changed, and rehashed whole for the served digest.
  if (tx.wrote) {
    for (uint32_t i = 0; i < manifest_->params().size(); ++i) {
      if (manifest_->params()[i].served_only()) TouchBytes(i, 0, memory_->Size(i));
    }
  }
  VerifyReport verified;
  if (tx.req.verify == VerifyMode::kAll && !tx.interrupted) {
    // Every chunk from live memory; the undeclared ones compared with the committed version
    // when the rank was clean, loaded and committed at begin (otherwise nothing to compare).
    const bool comparable = !tx.dirty_at_begin && loaded_ && committed_chunks_known_;
    WTX_RETURN_IF_ERROR(
        VerifyLiveLocked(&tx, comparable ? &committed_chunks_ : nullptr, &verified));
    // A difference from the committed version, or a chunk changed after its write or landing
    // was declared (detectable on a dirty base too).
    if (verified.chunks_differing > 0) {
      vote.errors.insert(vote.errors.begin(), ErrorCode::kUndeclaredWrite);
      vote.error = ErrorCode::kUndeclaredWrite;
      vote.yes = false;
      // One "rank N:" prefix for both findings.
      const std::string prefix = "rank " + Rank() + ":";
      std::string rest = vote.message;
      if (rest.rfind(prefix, 0) == 0) rest = rest.substr(prefix.size());
      vote.message = verified.message + (rest.empty() ? "" : ";" + rest);
      WTX_RETURN_IF_ERROR(LogUndeclared(verified));
      tx.undeclared = true;
    }
  }
  std::optional<RankDigests> digests;
  if (vote.yes) {
    // A processed parameter whose checkpoint digest is unknown here (a reattached rank whose
    // journal predates them) votes no, naming it.
    auto d = DigestLocked();
    if (!d.ok() && d.status().code() != ErrorCode::kCoverageIncomplete) return d.status();
    if (!d.ok()) {
      vote.yes = false;
      vote.error = ErrorCode::kCoverageIncomplete;
      vote.errors.insert(vote.errors.begin(), ErrorCode::kCoverageIncomplete);
      vote.message = d.status().message();
    } else {
      digests = std::move(d).value();
    }
  }
  if (vote.yes) {
    vote.digest = digests->checkpoint;
    vote.served_digest = digests->served;
    // The chunk digests behind this yes, for Reattach after a restart (same batch as PREPARED).
    const auto& params = manifest_->params();
    ChunksRecord chunks;
    chunks.tx = tx.req.tx;
    chunks.chunk_bytes = static_cast<int64_t>(kHashChunkBytes);
    for (uint32_t i = 0; i < params.size(); ++i) {
      auto d = hash_[i].chunk_digests();
      chunks.counts.push_back(static_cast<int64_t>(d.size()));
      for (uint64_t v : d) {
        for (int b = 0; b < 8; ++b) chunks.digests.push_back(static_cast<uint8_t>(v >> (8 * b)));
      }
    }
    for (const auto& [param, digest] : digests->processed) {
      chunks.checkpoint_params.push_back(param);
      for (int b = 0; b < 8; ++b) {
        chunks.checkpoint_digests.push_back(static_cast<uint8_t>(digest >> (8 * b)));
      }
    }
    chunks.ts = options_.env.clock->NowMicros();
    pending_.emplace_back(std::move(chunks));
  }
  const int64_t t1 = options_.env.clock->NowMicros();
  if (CrashAt("before_prepare_logged")) {
    return Err(ErrorCode::kCrashed, "rank " + Rank() + " crashed before logging PREPARED");
  }
  PreparedRecord rec;
  rec.tx = tx.req.tx;
  rec.yes = vote.yes;
  if (vote.yes) {
    rec.digest = vote.digest;
    if (vote.served_digest != vote.digest) rec.served_digest = vote.served_digest;
  }
  for (auto e : vote.errors) rec.errors.emplace_back(ErrorCodeName(e));
  rec.message = vote.message;
  rec.coverage = PreparedCoverage{static_cast<int64_t>(tx.shards_touched.size()),
                                  tx.pieces,
                                  tx.rows,
                                  tx.elements,
                                  tx.bytes,
                                  tx.patched,
                                  static_cast<int64_t>(vote.missing_total)};
  rec.missing = MissingGroups(vote.missing);
  rec.has_timings = true;
  rec.first_write_us = tx.t_first_write ? tx.t_first_write - tx.t_begin : 0;
  rec.writes_us = tx.t_last_write ? tx.t_last_write - tx.t_first_write : 0;
  rec.prepare_us = t1 - t0;
  rec.ts = t1;
  // Synced before voting yes: a yes vote is a promise that survives a crash.
  Status s = Log(std::move(rec), vote.yes);
  if (!s.ok()) return s;
  tx.prepared = true;
  tx.vote_yes = vote.yes;
  if (!vote.yes) tx.no_vote_code = std::string(ErrorCodeName(vote.error));
  if (CrashAt("after_prepare_logged")) {
    return Err(ErrorCode::kCrashed, "rank " + Rank() + " crashed after logging PREPARED");
  }
  return vote;
}

Status ParticipantImpl::Decide(std::string_view txid, Decision decision,
                               const DecidedVersion& version) {
  MetricsScope metrics_scope(this, std::nullopt);  // the phase is known at the end (EndMetrics)
  const auto t0 = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (!active_ || active_->req.tx != txid) {
    if (txid == last_outcome_tx_) return Status::OK();  // duplicate delivery
    return Err(ErrorCode::kNoTx,
               "rank " + Rank() + ": transaction '" + std::string(txid) + "' is not active");
  }
  ActiveTx& tx = *active_;
  // Background hashes of landed bytes finish before a restore may change those bytes.
  DrainLandingHashes();
  if (decision == Decision::kCommit && !(tx.prepared && tx.vote_yes)) {
    return Err(ErrorCode::kVoteNo, "rank " + Rank() + ": commit of '" + tx.req.tx +
                                       "' which this rank did not vote yes on");
  }
  // Before-images go back only into storage that is still where wtx is bound: a move is found
  // (and journaled, making the transaction's facts say so) before the rule is applied.
  if (decision == Decision::kAbort && tx.req.rollback && !tx.before.empty()) {
    std::vector<uint32_t> params;
    params.reserve(tx.before.size());
    for (const BeforeImage& b : tx.before) params.push_back(b.param);
    Status moved = CheckIdentityLocked(Distinct(std::move(params)));
    if (!moved.ok() && moved.code() != ErrorCode::kStorageMoved) return moved;
  }
  // The dirty rule (DecideOutcome, the function replay applies to the OUTCOME record) on what
  // this process knows; replay derives the same from the journal's records.
  OutcomeFacts facts;
  facts.decision = decision;
  facts.kind = tx.req.kind;
  facts.rollback = tx.req.rollback;
  facts.dirty_at_begin = tx.dirty_at_begin;
  facts.wrote = tx.wrote;
  facts.undeclared = tx.undeclared;
  facts.interrupted = tx.interrupted;
  facts.loaded = loaded_;
  const OutcomeEffect effect = DecideOutcome(facts);
  std::string reason;
  switch (decision) {
    case Decision::kCommit:
      committed_chunks_known_ = !tx.interrupted;
      committed_chunks_.clear();
      if (committed_chunks_known_) {
        // Exact: prepare rehashed every touched chunk and nothing changed since.
        for (const auto& h : hash_) {
          committed_chunks_.emplace_back(h.chunk_digests().begin(), h.chunk_digests().end());
        }
      }
      for (const auto& [param, image] : tx.checkpoint) {
        if (image.complete()) checkpoint_digest_[param] = image.Digest();
      }
      for (const auto& [param, digest] : tx.adopted) checkpoint_digest_[param] = digest;
      break;
    case Decision::kAbort:
      if (effect.restored) {
        WTX_RETURN_IF_ERROR(RestoreBefore());
        RestoreEpochs(tx);
        reason = "before-images restored";
      }
      break;
    case Decision::kNoop:
      reason = "empty transaction: nothing was written on any rank";
      break;
  }
  OutcomeRecord rec;
  rec.tx = tx.req.tx;
  rec.decision = decision;
  if (decision == Decision::kCommit) {
    rec.version = version.version;
    if (version.served() != version.version) rec.served_digest = version.served();
  }
  if (!reason.empty()) rec.reason = reason;
  rec.interrupted = tx.interrupted;
  rec.dirty = effect.dirty;
  rec.loaded = effect.loaded;
  rec.restored = effect.restored;
  rec.ts = options_.env.clock->NowMicros();
  WTX_RETURN_IF_ERROR(Log(std::move(rec), false));
  loaded_ = effect.loaded;
  if (loaded_) rebound_ = false;  // a full commit wrote every byte of the rebound storage
  last_outcome_tx_ = tx.req.tx;
  EndMetrics(tx, decision, effect.restored, t0);
  active_.reset();
  return Status::OK();
}

void ParticipantImpl::EndMetrics(const ActiveTx& tx, Decision decision, bool restored,
                                 std::chrono::steady_clock::time_point t0) {
  if (!metrics_) return;
  metrics_->BytesWritten(
      static_cast<uint64_t>(std::max<int64_t>(tx.bytes - metrics_bytes_reported_, 0)));
  metrics_bytes_reported_ = 0;
  metrics_->Ended(TxKindName(tx.req.kind), DecisionOutcomeName(decision));
  if (decision == Decision::kAbort && !tx.no_vote_code.empty()) {
    metrics_->CausedAbort(tx.no_vote_code);
  }
  const double seconds = metrics::SecondsSince(t0);
  if (decision != Decision::kAbort) metrics_->Phase(metrics::RankPhase::kCommit, seconds);
  if (restored) metrics_->Phase(metrics::RankPhase::kRestore, seconds);
}

Status ParticipantImpl::ResolveInDoubt(DecisionOracle& oracle) {
  std::string tx;
  {
    std::lock_guard<std::mutex> l(mu_);
    WTX_RETURN_IF_ERROR(CheckAlive());
    if (!active_ || !active_->prepared) return Status::OK();
    tx = active_->req.tx;
  }
  auto d = oracle.QueryDecision(tx);
  if (!d.ok()) return d.status();
  return Decide(tx, d->first, d->second);
}

}  // namespace wtx::participant_internal
