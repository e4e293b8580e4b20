// ParticipantImpl (participant_impl.h): construction and the journal. Init opens (or creates)
// the rank's journal, checks the live memory against the manifest and recovers an interrupted
// transaction; AppendRecords and Log append records with the state they lead to; status and
// Serving report the rank. Also the factories: Participant::Open and OpenParticipantWithHooks.
#include "src/txn/participant_impl.h"

#include <chrono>

#include <cassert>
#include <new>

#include "src/txn/journal_check.h"
#include "wtx/limits.h"

namespace wtx {

using nlohmann::json;

namespace participant_internal {

Status ParticipantImpl::Init() {
  WTX_RETURN_IF_ERROR(CheckMetricLabels(options_.metric_labels));
  if (!hooks_.benchmark_no_metrics) {
    metrics_ = std::make_unique<metrics::RankMetrics>(options_.rank, options_.metric_labels);
  }
  kernel_identity_ = options_.kernel_identity;
  memory_ = options_.memory ? options_.memory
                            : std::shared_ptr<LiveMemory>(NewHostLiveMemory(*manifest_));
  host_memory_ = memory_->HostAddressable();
  if (options_.landing_hash_threads < 0 || options_.landing_hash_threads > kMaxDataThreads) {
    return Status::InvalidArgument("landing_hash_threads must be in [0, " +
                                   std::to_string(kMaxDataThreads) + "], got " +
                                   std::to_string(options_.landing_hash_threads));
  }
  if (options_.threads < 0 || options_.threads > kMaxDataThreads) {
    return Status::InvalidArgument("threads must be in [0, " + std::to_string(kMaxDataThreads) +
                                   "], got " + std::to_string(options_.threads));
  }
  // The data path's threads besides the caller's: threads - 1 (0: one per core), at least
  // landing_hash_threads. Started at the first large copy or landing (ChunkHashPool).
  const int workers =
      std::max(DataPathThreads(options_.threads) - 1, options_.landing_hash_threads);
  if (workers > 0 && host_memory_) data_pool_ = std::make_unique<ChunkHashPool>(workers);
  const auto& params = manifest_->params();
  for (uint32_t i = 0; i < params.size(); ++i) {
    if (memory_->Size(i) != static_cast<size_t>(params[i].live_bytes())) {
      return Status::InvalidArgument("live memory of '" + params[i].name + "' has " +
                                     std::to_string(memory_->Size(i)) + " bytes, expected " +
                                     std::to_string(params[i].live_bytes()));
    }
    if (host_memory_ && memory_->Size(i) > 0 && memory_->Param(i).data() == nullptr) {
      return Status::InvalidArgument("live memory of '" + params[i].name + "': cannot allocate " +
                                     std::to_string(params[i].live_bytes()) + " bytes");
    }
  }
  {
    std::vector<StorageExtent> extents(params.size());
    for (uint32_t i = 0; i < params.size(); ++i) {
      extents[i] = {params[i].name, memory_->Address(i), memory_->Size(i)};
    }
    Status shared = CheckStorageDisjoint(extents);
    if (!shared.ok()) {
      return Status::InvalidArgument("rank " + Rank() + ": live memory: " + shared.message());
    }
  }
  WTX_RETURN_IF_ERROR(InitIdentity());
  hash_.reserve(params.size());
  for (const auto& p : params) hash_.emplace_back(static_cast<size_t>(p.live_bytes()));
  param_epoch_.assign(params.size(), 0);
  checkpoint_digest_.assign(params.size(), std::nullopt);
  derived_epoch_.assign(manifest_->derived().size(), 0);
  derived_restored_.assign(manifest_->derived().size(), {});

  JournalOptions jo;
  jo.env = options_.env;
  jo.identity = {"participant", options_.rank};
  jo.accept_unverified = options_.accept_unverified_journal;
  // Verified first (as `wtx check` would), then opened for writing: a damaged journal is refused
  // before RocksDB could repair it, and only an empty or absent directory starts fresh.
  auto j = OpenTrustedJournal(options_.journal_dir, jo);
  if (!j.ok()) return j.status();
  journal_ = std::move(j).value();
  if (journal_->state().is_null()) {
    CreateRecord create;
    create.rank = options_.rank;
    create.fingerprint = manifest_->Fingerprint();
    create.lineage = options_.lineage;
    create.ts = options_.env.clock->NowMicros();
    return AppendRecords({}, std::move(create), true);
  }
  // Verified (replay equals it) by OpenTrustedJournal.
  bool legacy_facts = false;
  auto st =
      DecodeParticipantState(journal_->state(), options_.journal_dir + ": state", &legacy_facts);
  if (!st.ok()) return st.status();
  state_ = std::move(st).value();
  if (legacy_facts) {
    // A snapshot written before the dirty rule's facts of the active transaction were stored:
    // the replay has them (once; every snapshot written from now on holds them).
    auto replayed = ReplayParticipantJournal(*journal_);
    if (!replayed.ok()) return replayed.status();
    if (!replayed.value()) return Status::Corruption(options_.journal_dir + ": no records");
    state_ = std::move(*replayed.value());
  }
  if (state_.rank != options_.rank) {
    return Status::Corruption(options_.journal_dir + ": state belongs to rank " +
                              std::to_string(state_.rank));
  }
  WTX_RETURN_IF_ERROR(CheckLineageAtOpen());
  if (!journal_->unverified_at_open().empty()) {
    // The operator accepted a journal whose synced records cannot be verified: on the record.
    WTX_RETURN_IF_ERROR(Log(
        AcceptedUnverifiedRecord{journal_->unverified_at_open(), options_.env.clock->NowMicros()},
        true));
  }
  // Recovery: this process has lost the live bytes of any earlier one.
  if (state_.active) {
    const ActiveTxState& act = *state_.active;
    if (act.prepared && act.vote_yes == true) {
      // In doubt: keep the transaction until the coordinator's decision is known.
      auto tx = std::make_unique<ActiveTx>();
      tx->req.tx = act.tx;
      tx->req.kind = act.kind;
      tx->prepared = true;
      tx->vote_yes = true;
      tx->wrote = act.wrote;
      tx->interrupted = true;
      tx->dirty_at_begin = true;   // this process never had the bytes the journal describes
      tx->t_begin = act.begin_ts;  // when it began, for status and the open-update metric
      active_ = std::move(tx);
    } else {
      // Not prepared (or voted no): presumed abort, by a process that never had its bytes.
      OutcomeFacts facts = FactsOf(state_, Decision::kAbort);
      facts.interrupted = true;
      const OutcomeEffect e = DecideOutcome(facts);
      OutcomeRecord out;
      out.tx = act.tx;
      out.decision = Decision::kAbort;
      out.reason = "process restarted before the transaction was decided";
      out.interrupted = true;
      out.dirty = e.dirty;
      out.loaded = e.loaded;
      out.restored = e.restored;
      out.ts = options_.env.clock->NowMicros();
      WTX_RETURN_IF_ERROR(Log(std::move(out), false));
    }
  }
  RestartRecord restart;
  restart.dirty = DirtyAfterRestart(state_);
  restart.ts = options_.env.clock->NowMicros();
  WTX_RETURN_IF_ERROR(Log(restart, false));
  if (!options_.new_lineage) return Status::OK();
  // The operator's explicit new lineage (checked above: nothing is in doubt).
  LineageRecord lineage;
  lineage.lineage = options_.lineage;
  lineage.fingerprint = manifest_->Fingerprint();
  lineage.previous_lineage = state_.lineage;
  lineage.previous_fingerprint = state_.model;
  lineage.previous_step = state_.step;
  lineage.ts = options_.env.clock->NowMicros();
  return Log(std::move(lineage), true);
}

std::string ParticipantImpl::EffectiveLineage() const {
  return state_.lineage.empty() ? options_.lineage : state_.lineage;
}

Status ParticipantImpl::CheckLineageAtOpen() const {
  const std::string& model = manifest_->Fingerprint();
  const std::string committed =
      state_.step ? ", step " + std::to_string(*state_.step) +
                        (state_.committed_tx ? " (transaction '" + *state_.committed_tx + "')" : "")
                  : ", nothing committed";
  const std::string journal = "rank " + Rank() + ": journal " + options_.journal_dir +
                              " belongs to " +
                              (state_.lineage.empty() ? std::string("an unnamed lineage")
                                                      : "lineage '" + state_.lineage + "'") +
                              " of model " + state_.model + committed;
  const std::string remedy =
      ": a journal holds one lineage of one model; start a new lineage on it explicitly "
      "(ParticipantOptions::new_lineage, `wtx rank --new-lineage`) or give another journal";
  if (options_.new_lineage) {
    if (state_.active && state_.active->prepared && state_.active->vote_yes == true) {
      return Err(ErrorCode::kTxActive, journal + "; transaction '" + state_.active->tx +
                                           "' is in doubt: it must be resolved (open without "
                                           "new_lineage) before a new lineage starts");
    }
    return Status::OK();
  }
  if (!state_.model.empty() && state_.model != model) {
    return Err(ErrorCode::kManifestMismatch, journal + "; the manifest given is model " + model +
                                                 " (" + std::to_string(manifest_->params().size()) +
                                                 " parameters)" + remedy);
  }
  if (!options_.lineage.empty() && !state_.lineage.empty() && options_.lineage != state_.lineage) {
    return Err(ErrorCode::kLineageMismatch,
               journal + "; it was opened for lineage '" + options_.lineage + "'" + remedy);
  }
  return Status::OK();
}

Status ParticipantImpl::AppendRecords(std::vector<ParticipantRecord> records,
                                      std::optional<ParticipantRecord> last, bool sync) {
  // The new state by the rules replay uses (a record's seq is assigned by the journal: 0 here).
  // A brand-new journal starts from none (its CREATE record makes the state).
  ParticipantReplay replay(journal_->last_seq() == 0 ? std::nullopt
                                                     : std::optional<ParticipantState>(state_));
  if (last) records.push_back(std::move(*last));
  std::vector<JournalRecord> encoded;
  encoded.reserve(records.size());
  for (auto& r : records) {
    Status s = replay.Apply(r, 0);
    assert(s.ok() && "the live participant produced a record its own replay rejects");
    if (!s.ok()) return s;
    encoded.push_back(ToJournalRecord(std::move(r)));
  }
  std::optional<ParticipantState> next = std::move(replay).Take();
  assert(next && "records leave a state");
  WTX_RETURN_IF_ERROR(
      journal_->Append(std::move(encoded), EncodeParticipantStateCbor(*next), sync));
  state_ = std::move(*next);
  return Status::OK();
}

Status ParticipantImpl::Log(std::optional<ParticipantRecord> record, bool sync) {
  std::vector<ParticipantRecord> recs = std::move(pending_);
  pending_.clear();
  if (recs.empty() && !record) return Status::OK();
  const auto t0 = std::chrono::steady_clock::now();
  Status s = AppendRecords(std::move(recs), std::move(record), sync);
  if (sync && s.ok() && metrics_) metrics_->JournalSync(metrics::SecondsSince(t0));
  if (!s.ok()) {
    // The journal no longer reflects this process; refuse everything from now on.
    crashed_ = true;
    return Err(ErrorCode::kCrashed, "rank " + Rank() + ": journal write failed: " + s.ToString());
  }
  return s;
}

bool ParticipantImpl::Serving() const {
  const bool in_doubt = active_ && active_->prepared && active_->vote_yes;
  return !crashed_ && loaded_ && !DirtyLocked() && state_.version && !in_doubt &&
         moved_count_ == 0 && StaleDerived().empty() && !hold_;
}

void ParticipantImpl::SetHold(std::optional<std::string> reason) {
  MetricsScope metrics_scope(this, std::nullopt);
  std::lock_guard<std::mutex> l(mu_);
  hold_ = std::move(reason);
}

RankStatus ParticipantImpl::status() const {
  MetricsScope metrics_scope(this, std::nullopt);
  std::lock_guard<std::mutex> l(mu_);
  // Serving is reported only on storage the engine still holds where wtx is bound to it: the
  // check observes the engine's memory and journals a move as every phase does (a change of the
  // engine's, not of this call's; the caller's view of the participant stays const).
  if (!crashed_) {
    Status moved = const_cast<ParticipantImpl*>(this)->CheckIdentityLocked(all_params_);
    (void)moved;  // reported below as storage_moved and serving == false
  }
  RankStatus s;
  s.rank = options_.rank;
  if (state_.version) {
    s.version = *state_.version;
    s.served_digest = state_.served_digest.value_or(*state_.version);
  }
  if (state_.committed_tx) s.committed_tx = *state_.committed_tx;
  if (state_.digest) s.digest = *state_.digest;
  s.dirty = DirtyLocked() || crashed_;
  s.loaded = loaded_ && !crashed_;
  if (active_) {
    s.active_tx = active_->req.tx;
    if (active_->prepared && active_->vote_yes) s.in_doubt = active_->req.tx;
  }
  for (const auto& d : StaleDerived()) s.stale_derived.push_back(d.name);
  for (uint32_t i = 0; i < moved_.size(); ++i) {
    if (moved_[i]) s.storage_moved.push_back(manifest_->params()[i].name);
  }
  s.serving = Serving();
  s.lineage = EffectiveLineage();
  s.step = state_.step;
  s.held = hold_;
  return s;
}

}  // namespace participant_internal

Result<std::unique_ptr<Participant>> Participant::Open(ParticipantOptions options,
                                                       ManifestPtr manifest) {
  return OpenParticipantWithHooks(std::move(options), std::move(manifest), ParticipantHooks{});
}

void WaitForLandingHashes(Participant& participant) {
  auto* impl = dynamic_cast<participant_internal::ParticipantImpl*>(&participant);
  assert(impl != nullptr && "every Participant is opened by OpenParticipantWithHooks");
  impl->WaitForLandingHashes();
}

Result<std::unique_ptr<Participant>> OpenParticipantWithHooks(ParticipantOptions options,
                                                              ManifestPtr manifest,
                                                              const ParticipantHooks& hooks) {
  if (!manifest) return Status::InvalidArgument("participant needs a manifest");
  if (options.rank < 0 || options.rank >= kMaxRanks) {
    return Status::InvalidArgument("participant: rank " + std::to_string(options.rank) +
                                   " is not in [0, " + std::to_string(kMaxRanks - 1) + "]");
  }
  const int64_t total_bytes = manifest->TotalBytes();
  auto p = std::make_unique<participant_internal::ParticipantImpl>(std::move(options),
                                                                   std::move(manifest), hooks);
  // A valid manifest may still be too large for this machine: its host memory and hash caches
  // are allocated here, and running out is an error, not an escaping exception.
  Status s;
  try {
    s = p->Init();
  } catch (const std::bad_alloc&) {
    s = Status::InvalidArgument(
        "participant: out of memory allocating the live parameters and "
        "their hash caches (manifest of " +
        std::to_string(total_bytes) + " bytes)");
  }
  WTX_RETURN_IF_ERROR(s);
  p->PublishMetrics();
  return std::unique_ptr<Participant>(std::move(p));
}

}  // namespace wtx
