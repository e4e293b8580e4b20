// ParticipantImpl: the single-rank state machine behind wtx::Participant.
#include <algorithm>
#include <cassert>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_set>

#include "src/txn/coverage.h"
#include "journal/journal.h"
#include "src/txn/participant_state.h"
#include "src/txn/test_hooks.h"
#include "src/util/thread_annotations.h"
#include "wtx/content_hash.h"
#include "wtx/participant.h"

namespace wtx {

using nlohmann::json;

namespace {

constexpr size_t kMaxMissingReported = 64;
constexpr size_t kWriteRecordBatch = 256;

Status Err(ErrorCode c, std::string m) { return Status(c, std::move(m)); }

// Per-source accounting of delta patch parts.
struct PatchState {
  int parts = 0;
  std::vector<bool> got;
  std::vector<int64_t> applied;  // sorted source indices applied in earlier parts
};

struct BeforeImage {
  uint32_t param;
  size_t offset;
  std::string bytes;
};

struct ActiveTx {
  BeginRequest req;
  std::vector<bool> in_scope;                 // partial: per parameter
  std::unordered_set<std::string> sources;    // delta
  std::string kernel_identity_at_begin;
  bool wrote = false;
  bool prepared = false;
  bool vote_yes = false;
  bool interrupted = false;                   // recovered after a restart: bytes lost
  bool dirty_at_begin = false;
  std::vector<std::unique_ptr<CoverageSet>> coverage;
  std::map<std::string, PatchState> patches;
  std::vector<uint64_t> epochs_at_begin;      // rollback: parameter write epochs
  std::vector<uint64_t> derived_epochs_at_begin;
  std::vector<BeforeImage> before;
  uint64_t begin_epoch = 0;
  // Audit counters.
  std::set<std::pair<uint32_t, uint32_t>> shards_touched;
  int64_t pieces = 0, elements = 0, bytes = 0, rows = 0, patched = 0;
  int64_t t_begin = 0, t_first_write = 0, t_last_write = 0;
};

class ParticipantImpl : public Participant {
 public:
  ParticipantImpl(ParticipantOptions options, ManifestPtr manifest, const ParticipantHooks& hooks)
      : options_(std::move(options)), hooks_(hooks), manifest_(std::move(manifest)) {}

  Status Init();

  RankDescription Describe() const override {
    std::lock_guard<std::mutex> l(mu_);
    return {options_.rank, manifest_->Fingerprint(), kernel_identity_};
  }
  Status CheckBegin(const BeginRequest& req) const override {
    std::lock_guard<std::mutex> l(mu_);
    return CheckBeginLocked(req);
  }
  Status Begin(const BeginRequest& req) override;
  Status Write(std::span<const WritePiece> pieces) override;
  Status Patch(const PatchRequest& req) override;
  Result<std::vector<std::string>> Refresh(std::string_view name) override;
  void SetKernelIdentity(std::string identity) override {
    std::lock_guard<std::mutex> l(mu_);
    kernel_identity_ = std::move(identity);
  }
  Result<Vote> Prepare(std::string_view tx) override;
  Result<Vote> CheckPrepare(std::string_view tx) const override;
  Status Decide(std::string_view tx, Decision decision, std::string_view version) override;
  Status ResolveInDoubt(DecisionOracle& oracle) override;
  RankStatus status() const override;
  const Manifest& manifest() const override { return *manifest_; }
  LiveMemory& memory() override { return *memory_; }
  Result<std::string> RecomputeDigest() override;
  size_t CoverageMemoryBytes() const override {
    std::lock_guard<std::mutex> l(mu_);
    return coverage_peak_bytes_;
  }

 private:
  Status CheckBeginLocked(const BeginRequest& req) const;
  Status CheckAlive() const {
    if (crashed_) return Err(ErrorCode::kCrashed, "rank " + Rank() + " has crashed");
    return Status::OK();
  }
  Status CheckWritable() const;
  std::string Rank() const { return std::to_string(options_.rank); }
  // Appends pending write records plus `record` (if not null) with the new state.
  Status Log(json record, bool sync);
  Status FlushPending() { return Log(json(), false); }
  Status AppendRecords(std::vector<JournalRecord> records, bool sync);
  bool CrashAt(std::string_view point) {
    if (hooks_.crash_points && hooks_.crash_points->ShouldCrash(point)) {
      crashed_ = true;
      return true;
    }
    return false;
  }
  std::vector<StaleDerivedState> StaleDerived() const;
  void CollectMissing(Vote* vote) const;
  // Coverage, staleness and kernel identity of the active transaction: sets errors, yes and
  // message of *vote. REQUIRES: active_ and not prepared.
  void LocalChecks(Vote* vote) const;
  Result<std::string> DigestLocked();
  // A live-memory operation failed (a device error): the live bytes are no longer known, so
  // the rank refuses everything from now on, as after a journal failure.
  Status MemoryFailed(const Status& s) {
    crashed_ = true;
    return Err(ErrorCode::kCrashed, "rank " + Rank() + ": live memory failed: " + s.ToString());
  }
  void TouchBytes(uint32_t param, size_t offset, size_t len) {
    hash_[param].Touch(offset, len);
  }
  Status SaveBefore(uint32_t param, size_t offset, size_t len);
  Status RestoreBefore();
  bool Serving() const;
  // Live bytes may differ from the committed version: the durable flag, or a write of the
  // active transaction whose record is still batched.
  bool DirtyLocked() const {
    return journal_->state().value("dirty", false) || (active_ && active_->wrote);
  }
  void UpdateCoveragePeak();

  ParticipantOptions options_;
  ParticipantHooks hooks_;  // src/txn/test_hooks.h
  ManifestPtr manifest_;
  std::shared_ptr<LiveMemory> memory_;
  bool host_memory_ = true;  // memory_->HostAddressable(): copy and hash in one pass here
  std::unique_ptr<Journal> journal_;
  mutable std::mutex mu_;
  std::string kernel_identity_ GUARDED_BY(mu_);
  bool crashed_ GUARDED_BY(mu_) = false;
  bool loaded_ GUARDED_BY(mu_) = false;
  std::unique_ptr<ActiveTx> active_ GUARDED_BY(mu_);
  std::string last_outcome_tx_ GUARDED_BY(mu_);
  std::vector<ParamHashCache> hash_ GUARDED_BY(mu_);
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  // Epoch of the last write to each parameter, of the last refresh of each derived state.
  std::vector<uint64_t> param_epoch_ GUARDED_BY(mu_);
  std::vector<uint64_t> derived_epoch_ GUARDED_BY(mu_);
  std::vector<JournalRecord> pending_ GUARDED_BY(mu_);   // batched WRITE/PATCH/REFRESH records
  size_t coverage_peak_bytes_ GUARDED_BY(mu_) = 0;
};

Status ParticipantImpl::Init() {
  kernel_identity_ = options_.kernel_identity;
  memory_ = options_.memory ? options_.memory
                            : std::shared_ptr<LiveMemory>(NewHostLiveMemory(*manifest_));
  host_memory_ = memory_->HostAddressable();
  const auto& params = manifest_->params();
  for (uint32_t i = 0; i < params.size(); ++i) {
    if (memory_->Size(i) != static_cast<size_t>(params[i].num_bytes())) {
      return Status::InvalidArgument("live memory of '" + params[i].name + "' has " +
                                     std::to_string(memory_->Size(i)) + " bytes, expected " +
                                     std::to_string(params[i].num_bytes()));
    }
  }
  hash_.reserve(params.size());
  for (const auto& p : params) hash_.emplace_back(static_cast<size_t>(p.num_bytes()));
  param_epoch_.assign(params.size(), 0);
  derived_epoch_.assign(manifest_->derived().size(), 0);

  JournalOptions jo;
  jo.env = options_.env;
  jo.identity = {"participant", options_.rank};
  auto j = Journal::Open(options_.journal_dir, jo);
  if (!j.ok()) return j.status();
  journal_ = std::move(j).value();
  if (journal_->state().is_null()) {
    std::vector<JournalRecord> create;
    create.emplace_back(json{{"type", "CREATE"},
                             {"rank", options_.rank},
                             {"fingerprint", manifest_->Fingerprint()},
                             {"ts", options_.env.clock->NowMicros()}});
    return AppendRecords(std::move(create), true);
  }
  if (journal_->state().value("rank", -1) != options_.rank) {
    return Status::Corruption(options_.journal_dir + ": state belongs to rank " +
                              journal_->state().value("rank", json()).dump());
  }
  // Recovery: this process has lost the live bytes of any earlier one.
  json st = StripBookkeeping(journal_->state());
  const json& act = st["active"];
  if (!act.is_null()) {
    if (act.value("prepared", false) && act.value("vote", json()) == "yes") {
      // In doubt: keep the transaction until the coordinator's decision is known.
      auto tx = std::make_unique<ActiveTx>();
      tx->req.tx = act["tx"].get<std::string>();
      tx->req.kind = TxKindFromName(act["kind"].get<std::string>()).value_or(TxKind::kFull);
      tx->prepared = true;
      tx->vote_yes = true;
      tx->wrote = act.value("wrote", false);
      tx->interrupted = true;
      active_ = std::move(tx);
    } else {
      json out = {{"type", "OUTCOME"}, {"tx", act["tx"]}, {"decision", "abort"},
                  {"reason", "process restarted before the transaction was decided"},
                  {"dirty", true}, {"ts", options_.env.clock->NowMicros()}};
      WTX_RETURN_IF_ERROR(Log(std::move(out), false));
      st = StripBookkeeping(journal_->state());
    }
  }
  const bool dirty = st.value("dirty", false) || !st["version"].is_null() || active_ != nullptr;
  return Log(json{{"type", "RESTART"}, {"dirty", dirty}, {"ts", options_.env.clock->NowMicros()}},
             false);
}

Status ParticipantImpl::AppendRecords(std::vector<JournalRecord> records, bool sync) {
  // The new state by the rules replay uses (a record's seq is assigned by the journal: 0 here).
  ParticipantReplay replay(journal_->state());
  for (const auto& r : records) {
    const auto* w = std::get_if<WriteRecord>(&r);
    Status s = w ? replay.ApplyWrite(0, w->tx) : replay.Apply(std::get<json>(r));
    assert(s.ok() && "the live participant produced a record its own replay rejects");
    if (!s.ok()) return s;
  }
  return journal_->Append(std::move(records), std::move(replay).Take(), sync);
}

Status ParticipantImpl::Log(json record, bool sync) {
  std::vector<JournalRecord> recs = std::move(pending_);
  pending_.clear();
  if (!record.is_null()) recs.emplace_back(std::move(record));
  if (recs.empty()) return Status::OK();
  Status s = AppendRecords(std::move(recs), sync);
  if (!s.ok()) {
    // The journal no longer reflects this process; refuse everything from now on.
    crashed_ = true;
    return Err(ErrorCode::kCrashed, "rank " + Rank() + ": journal write failed: " + s.ToString());
  }
  return s;
}

Status ParticipantImpl::CheckBeginLocked(const BeginRequest& req) const {
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (active_) {
    return Err(ErrorCode::kTxActive, "rank " + Rank() + ": transaction '" + active_->req.tx +
                                         (active_->prepared ? "' is prepared and in doubt"
                                                            : "' is active"));
  }
  if (req.tx.empty()) return Status::InvalidArgument("begin: empty transaction id");
  const json& st = journal_->state();
  if (req.kind != TxKind::kFull) {
    const bool dirty = st.value("dirty", false);
    if (dirty || (!loaded_ && !st["version"].is_null())) {
      std::string why = dirty ? "is dirty (live bytes may differ from its committed version)"
                              : "has no loaded weights";
      return Err(ErrorCode::kDirty, "rank " + Rank() + " " + why + "; a " +
                                        std::string(TxKindName(req.kind)) +
                                        " update needs a clean base, only a full commit cleans it");
    }
    const std::string version =
        st["version"].is_null() ? std::string("(none: never committed)") : st["version"].get<std::string>();
    if (st["version"].is_null() || req.base != version) {
      return Err(ErrorCode::kBaseMismatch,
                 "rank " + Rank() + ": base " + (req.base.empty() ? "(none)" : req.base) +
                     " is not the committed version " + version);
    }
  }
  size_t rollback_bytes = 0;
  if (req.kind == TxKind::kPartial) {
    if (req.modules.empty()) {
      return Err(ErrorCode::kOutOfScope, "partial transaction names no module");
    }
    for (const auto& m : req.modules) {
      auto mi = manifest_->FindModule(m);
      if (!mi) return Err(ErrorCode::kUnknownParam, "unknown module '" + m + "'");
      for (const auto& pn : manifest_->modules()[*mi].params) {
        rollback_bytes += manifest_->params()[*manifest_->FindParam(pn)].num_bytes();
      }
    }
  }
  if (req.kind == TxKind::kDelta) {
    if (req.sources.empty()) {
      return Err(ErrorCode::kOutOfScope, "delta transaction declares no source");
    }
    for (const auto& s : req.sources) {
      for (const ShardRef& ref : manifest_->ShardsOfSource(s)) {
        const ParamSpec& p = manifest_->params()[ref.param];
        rollback_bytes += NumElements(p.shards[ref.shard].box) * DTypeSize(p.dtype);
      }
    }
  }
  if (req.rollback && req.kind != TxKind::kFull &&
      rollback_bytes > options_.rollback_budget_bytes) {
    return Err(ErrorCode::kBudgetExceeded,
               "rank " + Rank() + ": rollback needs up to " + std::to_string(rollback_bytes) +
                   " bytes of before-images, budget is " +
                   std::to_string(options_.rollback_budget_bytes));
  }
  return Status::OK();
}

Status ParticipantImpl::Begin(const BeginRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckBeginLocked(req));
  auto tx = std::make_unique<ActiveTx>();
  tx->req = req;
  if (req.kind == TxKind::kFull) tx->req.rollback = false;  // nothing to restore to
  tx->kernel_identity_at_begin = kernel_identity_;
  tx->dirty_at_begin = journal_->state().value("dirty", false);
  tx->coverage.resize(manifest_->params().size());
  if (req.kind == TxKind::kPartial) {
    tx->in_scope.assign(manifest_->params().size(), false);
    for (const auto& m : req.modules) {
      for (const auto& pn : manifest_->modules()[*manifest_->FindModule(m)].params) {
        tx->in_scope[*manifest_->FindParam(pn)] = true;
      }
    }
  }
  tx->sources.insert(req.sources.begin(), req.sources.end());
  if (tx->req.rollback) {
    tx->epochs_at_begin = param_epoch_;
    tx->derived_epochs_at_begin = derived_epoch_;
  }
  tx->begin_epoch = epoch_;
  tx->t_begin = options_.env.clock->NowMicros();
  json rec = {{"type", "BEGIN"},         {"tx", req.tx},
              {"kind", TxKindName(req.kind)}, {"base", req.base.empty() ? json() : json(req.base)},
              {"modules", req.modules},  {"sources", req.sources},
              {"rollback", tx->req.rollback}, {"fingerprint", manifest_->Fingerprint()},
              {"kernel_identity", kernel_identity_}, {"ts", tx->t_begin}};
  // Synced: the rank must be durably marked as in a transaction before any live byte changes.
  WTX_RETURN_IF_ERROR(Log(std::move(rec), true));
  coverage_peak_bytes_ = 0;
  active_ = std::move(tx);
  return Status::OK();
}

Status ParticipantImpl::CheckWritable() const {
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (!active_) return Err(ErrorCode::kNoTx, "rank " + Rank() + ": no active transaction");
  if (active_->prepared) {
    return Err(ErrorCode::kTxActive, "rank " + Rank() + ": transaction '" + active_->req.tx +
                                         "' is already prepared; no more changes");
  }
  return Status::OK();
}

namespace {
struct PlannedRun {
  uint32_t param;
  int64_t begin;  // flat element index
  int64_t len;
  const uint8_t* src;
};
}  // namespace

Status ParticipantImpl::Write(std::span<const WritePiece> pieces) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckWritable());
  ActiveTx& tx = *active_;
  std::vector<PlannedRun> runs;
  std::vector<WriteRecord> records;
  std::vector<std::pair<uint32_t, uint32_t>> touched;
  for (const WritePiece& w : pieces) {
    auto pi = manifest_->FindParam(w.param);
    if (!pi) return Err(ErrorCode::kUnknownParam, "unknown parameter '" + w.param + "'");
    const ParamSpec& p = manifest_->params()[*pi];
    std::optional<uint32_t> si;
    if (!w.shard.empty()) {
      si = manifest_->FindShard(*pi, w.shard);
      if (!si) {
        return Err(ErrorCode::kUnknownParam,
                   "parameter '" + p.name + "' has no shard '" + w.shard + "'");
      }
    }
    if (tx.req.kind == TxKind::kDelta) {
      return Err(ErrorCode::kOutOfScope, "'" + p.name + "': transaction '" + tx.req.tx +
                                             "' is a delta; it takes patches, not writes");
    }
    if (tx.req.kind == TxKind::kPartial && !tx.in_scope[*pi]) {
      return Err(ErrorCode::kOutOfScope, "'" + p.name + "' is not in the modules of partial "
                                         "transaction '" + tx.req.tx + "'");
    }
    Box box = w.box ? *w.box : (si ? p.shards[*si].box : WholeBox(p.shape));
    const std::string where = "'" + p.name + "'" + (si ? " shard '" + w.shard + "'" : "");
    if (box.size() != p.shape.size()) {
      return Err(ErrorCode::kBadWrite, where + ": box " + BoxToString(box) + " has " +
                                           std::to_string(box.size()) + " dimensions, the "
                                           "parameter has " + std::to_string(p.shape.size()));
    }
    for (const auto& r : box) {
      if (r.begin >= r.end && !p.shape.empty()) {
        return Err(ErrorCode::kBadWrite, where + ": empty or inverted box " + BoxToString(box));
      }
    }
    if (!BoxInsideShape(box, p.shape)) {
      return Err(ErrorCode::kOutOfRange,
                 where + ": box " + BoxToString(box) + " lies outside the parameter");
    }
    if (si && !BoxContains(p.shards[*si].box, box)) {
      return Err(ErrorCode::kOutOfRange, where + ": box " + BoxToString(box) +
                                             " lies outside the shard's box " +
                                             BoxToString(p.shards[*si].box));
    }
    const size_t esz = DTypeSize(p.dtype);
    const size_t want = static_cast<size_t>(NumElements(box)) * esz;
    if (w.bytes != want || (want > 0 && w.data == nullptr)) {
      return Err(ErrorCode::kBadWrite, where + ": " + std::to_string(w.bytes) +
                                           " bytes for box " + BoxToString(box) + ", expected " +
                                           std::to_string(want) + " (" +
                                           std::string(DTypeName(p.dtype)) + ")");
    }
    const uint8_t* src = static_cast<const uint8_t*>(w.data);
    const size_t first_run = runs.size();
    ForEachFlatRun(p.shape, box, [&](int64_t b, int64_t len) {
      runs.push_back({*pi, b, len, src});
      src += static_cast<size_t>(len) * esz;
    });
    for (size_t k = first_run; k < runs.size(); ++k) {
      const auto& cov = tx.coverage[*pi];
      if (cov && cov->Overlaps(runs[k].begin, runs[k].len)) {
        return Err(ErrorCode::kDuplicateWrite,
                   where + ": box " + BoxToString(box) +
                       " overlaps elements this transaction already wrote");
      }
    }
    WriteRecord rec;
    rec.tx = tx.req.tx;
    rec.param = p.name;
    rec.box = box;
    rec.elements = NumElements(box);
    rec.bytes = static_cast<int64_t>(want);
    std::vector<std::string>& shard_ids = rec.shards;
    if (si) {  // a named shard: no scan (stacked experts have hundreds of shards)
      shard_ids.push_back(p.shards[*si].id);
      touched.emplace_back(*pi, *si);
    } else {
      for (uint32_t k = 0; k < p.shards.size(); ++k) {
        if (Overlaps(p.shards[k].box, box)) {
          shard_ids.push_back(p.shards[k].id);
          touched.emplace_back(*pi, k);
        }
      }
    }
    records.push_back(std::move(rec));
  }
  // Overlaps among the pieces of this call.
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(runs[a].param, runs[a].begin) < std::tie(runs[b].param, runs[b].begin);
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& a = runs[order[i - 1]];
    const auto& b = runs[order[i]];
    if (a.param == b.param && a.begin + a.len > b.begin) {
      return Err(ErrorCode::kDuplicateWrite, "'" + manifest_->params()[a.param].name +
                                                 "': pieces of one write overlap each other");
    }
  }
  // Everything checked: land the bytes.
  const int64_t now = options_.env.clock->NowMicros();
  if (!tx.wrote) tx.t_first_write = now;
  tx.t_last_write = now;
  for (const PlannedRun& r : runs) {
    const ParamSpec& p = manifest_->params()[r.param];
    const size_t esz = DTypeSize(p.dtype);
    const size_t off = static_cast<size_t>(r.begin) * esz;
    const size_t len = static_cast<size_t>(r.len) * esz;
    if (tx.req.rollback) WTX_RETURN_IF_ERROR(SaveBefore(r.param, off, len));
    if (hooks_.benchmark_coverage_only) {
      // nothing lands
    } else if (host_memory_) {
      // Whole hash chunks are hashed in the same pass as the copy; prepare rehashes the rest.
      hash_[r.param].CopyIn(memory_->Param(r.param), off, r.src, len);
    } else {
      // A device: the bytes go over, prepare hashes the touched chunks there.
      Status st = memory_->Store(r.param, off, r.src, len);
      if (!st.ok()) return MemoryFailed(st);
      TouchBytes(r.param, off, len);
    }
    auto& cov = tx.coverage[r.param];
    if (!cov) {
      cov = std::make_unique<CoverageSet>(p.num_elements(), p.shape.empty() ? 0 : p.shape.back());
    }
    cov->Add(r.begin, r.len);
    param_epoch_[r.param] = ++epoch_;
    tx.elements += r.len;
    tx.bytes += static_cast<int64_t>(len);
    tx.rows += p.shape.empty() ? 1 : std::max<int64_t>(1, r.len / p.shape.back());
  }
  tx.shards_touched.insert(touched.begin(), touched.end());
  tx.pieces += static_cast<int64_t>(pieces.size());
  tx.wrote = tx.wrote || !runs.empty();
  UpdateCoveragePeak();
  for (auto& r : records) {
    r.ts = now;
    pending_.emplace_back(std::move(r));
  }
  if (pending_.size() >= kWriteRecordBatch) return FlushPending();
  return Status::OK();
}

void ParticipantImpl::UpdateCoveragePeak() {
  size_t bytes = active_->coverage.size() * sizeof(std::unique_ptr<CoverageSet>);
  for (const auto& c : active_->coverage) {
    if (c) bytes += c->MemoryBytes();
  }
  coverage_peak_bytes_ = std::max(coverage_peak_bytes_, bytes);
}

Status ParticipantImpl::SaveBefore(uint32_t param, size_t offset, size_t len) {
  std::string bytes(len, '\0');
  Status s = memory_->Load(param, offset, bytes.data(), len);
  if (!s.ok()) return MemoryFailed(s);
  active_->before.push_back({param, offset, std::move(bytes)});
  return Status::OK();
}

Status ParticipantImpl::RestoreBefore() {
  for (auto it = active_->before.rbegin(); it != active_->before.rend(); ++it) {
    Status s = memory_->Store(it->param, it->offset, it->bytes.data(), it->bytes.size());
    if (!s.ok()) return MemoryFailed(s);
    TouchBytes(it->param, it->offset, it->bytes.size());
  }
  active_->before.clear();
  return Status::OK();
}

Status ParticipantImpl::Patch(const PatchRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckWritable());
  ActiveTx& tx = *active_;
  const std::string where = "patch of '" + req.source + "' part [" + std::to_string(req.part) +
                            ", " + std::to_string(req.parts) + "]";
  if (tx.req.kind != TxKind::kDelta) {
    return Err(ErrorCode::kOutOfScope, where + ": transaction '" + tx.req.tx + "' is " +
                                           std::string(TxKindName(tx.req.kind)) +
                                           "; patches belong to delta transactions");
  }
  if (!tx.sources.count(req.source)) {
    return Err(ErrorCode::kOutOfScope, where + ": source not declared by transaction '" +
                                           tx.req.tx + "'");
  }
  if (req.parts < 1 || req.part < 0 || req.part >= req.parts) {
    return Err(ErrorCode::kBadWrite, where + ": part must satisfy 0 <= k < n");
  }
  const auto& refs = manifest_->ShardsOfSource(req.source);
  if (refs.empty()) return Status::OK();  // this rank holds none of the source
  // Looked up, not inserted: a refused patch must leave no trace in the part accounting.
  static const PatchState kNoParts;
  auto existing = tx.patches.find(req.source);
  const PatchState& ps = existing == tx.patches.end() ? kNoParts : existing->second;
  if (ps.parts != 0 && ps.parts != req.parts) {
    return Err(ErrorCode::kBadWrite, where + ": earlier parts said n = " +
                                         std::to_string(ps.parts));
  }
  if (ps.parts != 0 && ps.got[req.part]) {
    return Err(ErrorCode::kDuplicateWrite, where + ": part already applied");
  }
  const Shape source_shape = manifest_->SourceShape(req.source).value();
  const int64_t source_elems = NumElements(source_shape);
  const DType dtype = manifest_->params()[refs[0].param].dtype;
  for (const ShardRef& ref : refs) {
    if (manifest_->params()[ref.param].dtype != dtype) {
      return Err(ErrorCode::kBadWrite, where + ": the source feeds parameters of different dtypes");
    }
  }
  const size_t esz = DTypeSize(dtype);
  if (req.value_bytes != req.indices.size() * esz || (!req.indices.empty() && !req.values)) {
    return Err(ErrorCode::kBadWrite, where + ": " + std::to_string(req.value_bytes) +
                                         " value bytes for " + std::to_string(req.indices.size()) +
                                         " indices of " + std::string(DTypeName(dtype)));
  }
  std::vector<int64_t> sorted(req.indices.begin(), req.indices.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= source_elems) {
      return Err(ErrorCode::kOutOfRange, where + ": index " + std::to_string(sorted[i]) +
                                             " outside source of " + std::to_string(source_elems) +
                                             " elements");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return Err(ErrorCode::kDuplicateWrite,
                 where + ": index " + std::to_string(sorted[i]) + " appears twice");
    }
  }
  {
    std::vector<int64_t> common;
    std::set_intersection(sorted.begin(), sorted.end(), ps.applied.begin(), ps.applied.end(),
                          std::back_inserter(common));
    if (!common.empty()) {
      return Err(ErrorCode::kDuplicateWrite, where + ": index " + std::to_string(common[0]) +
                                                 " was patched by an earlier part");
    }
  }
  // Map source indices to live elements through each shard's translation.
  struct Target {
    uint32_t param;
    int64_t flat;
    size_t value;
  };
  std::vector<Target> targets;
  const std::vector<int64_t> sstrides = Strides(source_shape);
  std::vector<int64_t> coord(source_shape.size());
  for (size_t i = 0; i < req.indices.size(); ++i) {
    int64_t rem = req.indices[i];
    for (size_t d = 0; d < source_shape.size(); ++d) {
      coord[d] = rem / sstrides[d];
      rem %= sstrides[d];
    }
    for (const ShardRef& ref : refs) {
      const ParamSpec& p = manifest_->params()[ref.param];
      const ShardSpec& s = p.shards[ref.shard];
      bool inside = true;
      for (size_t d = 0; d < coord.size() && inside; ++d) {
        inside = coord[d] >= s.source_box[d].begin && coord[d] < s.source_box[d].end;
      }
      if (!inside) continue;
      if (s.packed) {
        return Err(ErrorCode::kLayoutMismatch,
                   where + ": index " + std::to_string(req.indices[i]) + " lands in shard '" +
                       s.id + "' of '" + p.name +
                       "' whose packed layout is not a translation of the source");
      }
      const std::vector<int64_t> lstrides = Strides(p.shape);
      const size_t extra = s.box.size() - s.source_box.size();
      int64_t flat = 0;
      for (size_t d = 0; d < extra; ++d) flat += s.box[d].begin * lstrides[d];
      for (size_t d = 0; d < coord.size(); ++d) {
        flat += (s.box[extra + d].begin + coord[d] - s.source_box[d].begin) * lstrides[extra + d];
      }
      targets.push_back({ref.param, flat, i});
    }
  }
  // Apply.
  const int64_t now = options_.env.clock->NowMicros();
  if (!targets.empty()) {
    if (!tx.wrote) tx.t_first_write = now;
    tx.t_last_write = now;
  }
  const uint8_t* values = static_cast<const uint8_t*>(req.values);
  std::set<uint32_t> params_touched;
  for (const Target& t : targets) params_touched.insert(t.param);
  // One scatter per parameter (one kernel launch on a device), saving before-images with it.
  for (uint32_t p : params_touched) {
    std::vector<int64_t> flat;
    std::string vals;
    for (const Target& t : targets) {
      if (t.param != p) continue;
      flat.push_back(t.flat);
      vals.append(reinterpret_cast<const char*>(values + t.value * esz), esz);
    }
    std::string before(tx.req.rollback ? vals.size() : 0, '\0');
    Status st = memory_->Scatter(p, flat, vals.data(), esz,
                                 tx.req.rollback ? before.data() : nullptr);
    if (!st.ok()) return MemoryFailed(st);
    for (size_t k = 0; k < flat.size(); ++k) {
      const size_t off = static_cast<size_t>(flat[k]) * esz;
      if (tx.req.rollback) tx.before.push_back({p, off, before.substr(k * esz, esz)});
      TouchBytes(p, off, esz);
    }
  }
  for (uint32_t p : params_touched) {
    param_epoch_[p] = ++epoch_;
    for (const ShardRef& ref : refs) {
      if (ref.param == p) tx.shards_touched.insert({ref.param, ref.shard});
    }
  }
  PatchState& acc = tx.patches[req.source];
  if (acc.parts == 0) {
    acc.parts = req.parts;
    acc.got.assign(req.parts, false);
  }
  acc.got[req.part] = true;
  std::vector<int64_t> merged;
  std::merge(acc.applied.begin(), acc.applied.end(), sorted.begin(), sorted.end(),
             std::back_inserter(merged));
  acc.applied = std::move(merged);
  tx.patched += static_cast<int64_t>(targets.size());
  tx.elements += static_cast<int64_t>(targets.size());
  tx.bytes += static_cast<int64_t>(targets.size() * esz);
  tx.wrote = tx.wrote || !targets.empty();
  pending_.emplace_back(json{{"type", "PATCH"}, {"tx", tx.req.tx}, {"source", req.source},
                            {"part", {req.part, req.parts}}, {"indices", req.indices.size()},
                            {"applied", targets.size()}, {"ts", now}});
  if (pending_.size() >= kWriteRecordBatch) return FlushPending();
  return Status::OK();
}

Result<std::vector<std::string>> ParticipantImpl::Refresh(std::string_view name) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  std::vector<uint32_t> targets;
  if (name == "*") {
    for (const auto& s : StaleDerived()) targets.push_back(*manifest_->FindDerived(s.name));
  } else {
    auto d = manifest_->FindDerived(name);
    if (!d) return Err(ErrorCode::kUnknownParam, "unknown derived state '" + std::string(name) + "'");
    targets.push_back(*d);
  }
  std::vector<std::string> names;
  for (uint32_t d : targets) {
    derived_epoch_[d] = ++epoch_;
    names.push_back(manifest_->derived()[d].name);
  }
  if (active_ && !names.empty()) {
    pending_.emplace_back(json{{"type", "REFRESH"}, {"tx", active_->req.tx}, {"derived", names},
                              {"ts", options_.env.clock->NowMicros()}});
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
      if (param_epoch_[p] > derived_epoch_[d]) s.written_sources.push_back(src);
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
  auto add = [&](MissingPiece m) {
    ++vote->missing_total;
    if (vote->missing.size() < kMaxMissingReported) vote->missing.push_back(std::move(m));
  };
  const auto& params = manifest_->params();
  if (tx.req.kind == TxKind::kDelta) {
    for (const auto& src : tx.req.sources) {
      const auto& refs = manifest_->ShardsOfSource(src);
      if (refs.empty()) continue;
      auto it = tx.patches.find(src);
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
        add({p.name, p.shards[ref.shard].id, p.shards[ref.shard].box, src, missing_parts, parts});
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
      if (!cov || cov->covered() == 0) {
        add({p.name, s.id, s.box, s.source, {}, 0});
        continue;
      }
      std::vector<Box> gaps;
      ForEachFlatRun(p.shape, s.box, [&](int64_t b, int64_t len) {
        cov->ForEachGap(b, len, [&](int64_t gb, int64_t gl) {
          FlatIntervalToBoxes(p.shape, gb, gb + gl, &gaps);
        });
      });
      for (auto& g : MergeAdjacentBoxes(std::move(gaps))) {
        add({p.name, s.id, std::move(g), s.source, {}, 0});
      }
    }
  }
}

void ParticipantImpl::LocalChecks(Vote* vote) const {
  const ActiveTx& tx = *active_;
  CollectMissing(vote);
  if (vote->missing_total > 0) vote->errors.push_back(ErrorCode::kCoverageIncomplete);
  vote->stale = StaleDerived();
  if (!vote->stale.empty()) vote->errors.push_back(ErrorCode::kStaleDerived);
  if (kernel_identity_ != tx.kernel_identity_at_begin) {
    vote->errors.push_back(ErrorCode::kKernelIdentityChanged);
  }
  vote->yes = vote->errors.empty();
  if (vote->yes) return;
  vote->error = vote->errors.front();
  std::string msg = "rank " + Rank() + ":";
  if (vote->missing_total) msg += " " + std::to_string(vote->missing_total) + " piece(s) missing;";
  if (!vote->stale.empty()) msg += " " + std::to_string(vote->stale.size()) + " stale derived;";
  if (kernel_identity_ != tx.kernel_identity_at_begin) {
    msg += " kernel identity changed from '" + tx.kernel_identity_at_begin + "' to '" +
           kernel_identity_ + "';";
  }
  msg.pop_back();
  vote->message = msg;
}

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

Result<std::string> ParticipantImpl::DigestLocked() {
  const auto& params = manifest_->params();
  std::vector<uint64_t> digests(params.size());
  for (uint32_t i = 0; i < params.size(); ++i) {
    if (host_memory_) {
      digests[i] = hash_[i].Digest(memory_->Param(i));
      continue;
    }
    auto d = hash_[i].Digest([&](size_t first, size_t count, uint64_t* out) {
      return memory_->ChunkDigests(i, first, count, out);
    });
    if (!d.ok()) return MemoryFailed(d.status());
    digests[i] = d.value();
  }
  return RankDigest(*manifest_, digests);
}

Result<std::string> ParticipantImpl::RecomputeDigest() {
  std::lock_guard<std::mutex> l(mu_);
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
  return RankDigest(*manifest_, digests);
}

Result<Vote> ParticipantImpl::Prepare(std::string_view txid) {
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
    if (tx.vote_yes) vote.digest = journal_->state()["active"].value("digest", std::string());
    return vote;
  }
  const int64_t t0 = options_.env.clock->NowMicros();
  vote.wrote = tx.wrote;
  LocalChecks(&vote);
  if (vote.yes) {
    auto digest = DigestLocked();
    if (!digest.ok()) return digest.status();
    vote.digest = std::move(digest).value();
  }
  const int64_t t1 = options_.env.clock->NowMicros();
  if (CrashAt("before_prepare_logged")) {
    return Err(ErrorCode::kCrashed, "rank " + Rank() + " crashed before logging PREPARED");
  }
  json errors = json::array();
  for (auto e : vote.errors) errors.push_back(ErrorCodeName(e));
  json rec = {{"type", "PREPARED"},
              {"tx", tx.req.tx},
              {"vote", vote.yes ? "yes" : "no"},
              {"digest", vote.yes ? json(vote.digest) : json()},
              {"errors", errors},
              {"message", vote.message},
              {"coverage", {{"shards", tx.shards_touched.size()},
                            {"pieces", tx.pieces},
                            {"rows", tx.rows},
                            {"elements", tx.elements},
                            {"bytes", tx.bytes},
                            {"patched", tx.patched},
                            {"missing", vote.missing_total}}},
              {"timings_us", {{"first_write", tx.t_first_write ? tx.t_first_write - tx.t_begin : 0},
                              {"writes", tx.t_last_write ? tx.t_last_write - tx.t_first_write : 0},
                              {"prepare", t1 - t0}}},
              {"ts", t1}};
  // Synced before voting yes: a yes vote is a promise that survives a crash.
  Status s = Log(std::move(rec), vote.yes);
  if (!s.ok()) return s;
  tx.prepared = true;
  tx.vote_yes = vote.yes;
  if (CrashAt("after_prepare_logged")) {
    return Err(ErrorCode::kCrashed, "rank " + Rank() + " crashed after logging PREPARED");
  }
  return vote;
}

Status ParticipantImpl::Decide(std::string_view txid, Decision decision, std::string_view version) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (!active_ || active_->req.tx != txid) {
    if (txid == last_outcome_tx_) return Status::OK();  // duplicate delivery
    return Err(ErrorCode::kNoTx, "rank " + Rank() + ": transaction '" + std::string(txid) +
                                     "' is not active");
  }
  ActiveTx& tx = *active_;
  if (decision == Decision::kCommit && !(tx.prepared && tx.vote_yes)) {
    return Err(ErrorCode::kVoteNo, "rank " + Rank() + ": commit of '" + tx.req.tx +
                                       "' which this rank did not vote yes on");
  }
  const bool was_dirty = journal_->state().value("dirty", false);
  bool dirty = was_dirty;
  bool restored = false;
  std::string reason;
  switch (decision) {
    case Decision::kCommit:
      // Clean only when the live bytes are now exactly the committed version: a full commit,
      // or a partial/delta on the clean base (begin refused anything else), by a process that
      // kept its bytes throughout.
      dirty = tx.interrupted || (tx.req.kind != TxKind::kFull && tx.dirty_at_begin);
      if (!tx.interrupted && tx.req.kind == TxKind::kFull) loaded_ = true;
      break;
    case Decision::kAbort:
      if (tx.req.rollback && !tx.interrupted && tx.wrote) {
        WTX_RETURN_IF_ERROR(RestoreBefore());
        for (uint32_t p = 0; p < param_epoch_.size(); ++p) {
          if (param_epoch_[p] > tx.begin_epoch) param_epoch_[p] = tx.epochs_at_begin[p];
        }
        // Derived copies recomputed from the aborted bytes are now stale again.
        for (uint32_t d = 0; d < derived_epoch_.size(); ++d) {
          if (derived_epoch_[d] > tx.begin_epoch) {
            derived_epoch_[d] = tx.derived_epochs_at_begin[d];
            for (const auto& src : manifest_->derived()[d].sources) {
              param_epoch_[*manifest_->FindParam(src)] = ++epoch_;
            }
          }
        }
        restored = true;
        dirty = tx.dirty_at_begin;
        reason = "before-images restored";
      } else if (tx.wrote) {
        dirty = true;
      }
      break;
    case Decision::kNoop:
      reason = "empty transaction: nothing was written on any rank";
      break;
  }
  json rec = {{"type", "OUTCOME"},
              {"tx", tx.req.tx},
              {"decision", DecisionName(decision)},
              {"version", decision == Decision::kCommit ? json(std::string(version)) : json()},
              {"dirty", dirty},
              {"loaded", loaded_},
              {"restored", restored},
              {"ts", options_.env.clock->NowMicros()}};
  if (!reason.empty()) rec["reason"] = reason;
  WTX_RETURN_IF_ERROR(Log(std::move(rec), false));
  last_outcome_tx_ = tx.req.tx;
  active_.reset();
  return Status::OK();
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

bool ParticipantImpl::Serving() const {
  const json& st = journal_->state();
  const bool in_doubt = active_ && active_->prepared && active_->vote_yes;
  return !crashed_ && loaded_ && !DirtyLocked() && !st["version"].is_null() &&
         !in_doubt && StaleDerived().empty();
}

RankStatus ParticipantImpl::status() const {
  std::lock_guard<std::mutex> l(mu_);
  RankStatus s;
  s.rank = options_.rank;
  const json& st = journal_->state();
  if (!st["version"].is_null()) s.version = st["version"].get<std::string>();
  if (!st["committed_tx"].is_null()) s.committed_tx = st["committed_tx"].get<std::string>();
  s.dirty = DirtyLocked() || crashed_;
  s.loaded = loaded_ && !crashed_;
  if (active_) {
    s.active_tx = active_->req.tx;
    if (active_->prepared && active_->vote_yes) s.in_doubt = active_->req.tx;
  }
  for (const auto& d : StaleDerived()) s.stale_derived.push_back(d.name);
  s.serving = Serving();
  return s;
}

}  // namespace

Result<std::unique_ptr<Participant>> Participant::Open(ParticipantOptions options,
                                                       ManifestPtr manifest) {
  return OpenParticipantWithHooks(std::move(options), std::move(manifest), ParticipantHooks{});
}

Result<std::unique_ptr<Participant>> OpenParticipantWithHooks(ParticipantOptions options,
                                                              ManifestPtr manifest,
                                                              const ParticipantHooks& hooks) {
  if (!manifest) return Status::InvalidArgument("participant needs a manifest");
  auto p = std::make_unique<ParticipantImpl>(std::move(options), std::move(manifest), hooks);
  WTX_RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<Participant>(std::move(p));
}

}  // namespace wtx
