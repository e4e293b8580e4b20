// ParticipantImpl (participant_impl.h): beginning a transaction and writing into it. Begin and
// its checks (dirty base, base version, scope, rollback budget), the scope and box checks every
// change shares (CheckWritable, ResolveBox, CheckInScope, ResolveSource), Write and WriteSource,
// and rollback: the before-images a rollback transaction saves and an abort restores, with the
// write epochs put back (RestoreEpochs).
#include "src/txn/participant_impl.h"

#include <algorithm>

#include "src/util/file_util.h"

namespace wtx::participant_internal {

Status ParticipantImpl::CheckBeginLocked(const BeginRequest& req) const {
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (active_) {
    return Err(ErrorCode::kTxActive,
               "rank " + Rank() + ": transaction '" + active_->req.tx +
                   (active_->prepared ? "' is prepared and in doubt" : "' is active"));
  }
  if (req.tx.empty()) return Status::InvalidArgument("begin: empty transaction id");
  WTX_RETURN_IF_ERROR(CheckLineageLocked(req));
  WTX_RETURN_IF_ERROR(MovedError(all_params_));  // rebind first
  if (req.kind != TxKind::kFull) {
    const bool dirty = state_.dirty;
    if (dirty || (!loaded_ && state_.version)) {
      std::string why = dirty ? "is dirty (live bytes may differ from its committed version)"
                              : "has no loaded weights";
      return Err(ErrorCode::kDirty, "rank " + Rank() + " " + why + "; a " +
                                        std::string(TxKindName(req.kind)) +
                                        " update needs a clean base, only a full commit cleans it");
    }
    const std::string version = state_.version.value_or("(none: never committed)");
    if (!state_.version || req.base != version) {
      return Err(ErrorCode::kBaseMismatch, "rank " + Rank() + ": base " +
                                               (req.base.empty() ? "(none)" : req.base) +
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
        // Before-images are of live bytes (a processed parameter's served form, whole).
        rollback_bytes += manifest_->params()[*manifest_->FindParam(pn)].live_bytes();
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
  if (req.kind == TxKind::kFull && FullRollbackRestores()) {
    for (const ParamSpec& p : manifest_->params()) rollback_bytes += p.live_bytes();
  }
  if (req.kind != TxKind::kFull) {  // a full one counted every parameter above
    for (const ParamSpec& p : manifest_->params()) {
      if (p.served_only()) rollback_bytes += p.live_bytes();  // Begin saves them whole
    }
  }
  if (req.rollback && rollback_bytes > options_.rollback_budget_bytes) {
    return Err(ErrorCode::kBudgetExceeded, "rank " + Rank() + ": rollback needs up to " +
                                               std::to_string(rollback_bytes) +
                                               " bytes of before-images, budget is " +
                                               std::to_string(options_.rollback_budget_bytes));
  }
  return Status::OK();
}

Status ParticipantImpl::CheckLineageLocked(const BeginRequest& req) const {
  const std::string lineage = EffectiveLineage();
  const std::string named = lineage.empty() ? "the unnamed lineage" : "lineage '" + lineage + "'";
  if (!req.lineage.empty() && !lineage.empty() && req.lineage != lineage) {
    return Err(ErrorCode::kLineageMismatch,
               "rank " + Rank() + " belongs to " + named + " (journal " + options_.journal_dir +
                   "); transaction '" + req.tx + "' is of lineage '" + req.lineage + "'");
  }
  if (req.step && *req.step < 0) {
    return Status::InvalidArgument("begin: step " + std::to_string(*req.step) + " is negative");
  }
  if (!req.step && state_.step == INT64_MAX) {
    return Err(ErrorCode::kStepRegression, "rank " + Rank() + " committed step " +
                                               std::to_string(*state_.step) + " of " + named +
                                               ": no step follows it");
  }
  if (req.step && state_.step && *req.step <= *state_.step) {
    return Err(ErrorCode::kStepRegression,
               "rank " + Rank() + " committed step " + std::to_string(*state_.step) + " of " +
                   named + " (transaction '" + state_.committed_tx.value_or("?") + "'); step " +
                   std::to_string(*req.step) + " of transaction '" + req.tx +
                   "' is at or below it: a step never goes back (start a new lineage to reuse "
                   "it)");
  }
  return Status::OK();
}

Status ParticipantImpl::Begin(const BeginRequest& req) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kBegin);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckBeginLocked(req));
  // Every parameter: a transaction's version vouches for all of the rank's bytes.
  WTX_RETURN_IF_ERROR(CheckIdentityLocked(all_params_));
  auto tx = std::make_unique<ActiveTx>();
  tx->req = req;
  if (tx->req.lineage.empty()) tx->req.lineage = EffectiveLineage();
  if (!tx->req.step) tx->req.step = state_.step ? *state_.step + 1 : 0;
  // A full update on a rank that serves a committed version keeps before-images too (the
  // serving gate's restore: an abort puts the old version back); on a rank with nothing
  // committed or loaded there is nothing to restore to.
  if (req.kind == TxKind::kFull && !FullRollbackRestores()) tx->req.rollback = false;
  tx->kernel_identity_at_begin = kernel_identity_;
  tx->dirty_at_begin = state_.dirty;
  tx->coverage.resize(manifest_->params().size());
  tx->reserved.resize(manifest_->params().size());
  tx->declared_chunks.resize(manifest_->params().size());
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
    tx->derived_restored_at_begin = derived_restored_;
    tx->first_write_epoch.assign(manifest_->params().size(), 0);
  }
  for (uint32_t i = 0; i < manifest_->params().size(); ++i) {
    if (req.kind == TxKind::kPartial && !tx->in_scope[i]) continue;
    tx->required_elements += manifest_->params()[i].num_elements();
  }
  tx->begin_epoch = epoch_;

  tx->t_begin = options_.env.clock->NowMicros();
  BeginRecord rec;
  rec.tx = req.tx;
  rec.kind = req.kind;
  if (!req.base.empty()) rec.base = req.base;
  rec.modules = req.modules;
  rec.sources = req.sources;
  rec.rollback = tx->req.rollback;
  rec.verify = req.verify;
  rec.fingerprint = manifest_->Fingerprint();
  rec.kernel_identity = kernel_identity_;
  rec.lineage = tx->req.lineage;
  rec.step = tx->req.step;
  rec.ts = tx->t_begin;
  // Durably dirty from here to the decision: WRITE records are batched, so a reader of the
  // journal cannot know whether live bytes changed (the OUTCOME says after).
  rec.marks_dirty = true;
  // Synced: the rank must be durably marked as in a transaction before any live byte changes.
  WTX_RETURN_IF_ERROR(Log(std::move(rec), true));
  coverage_peak_bytes_ = 0;
  metrics_bytes_reported_ = 0;
  active_ = std::move(tx);
  // Served-only tensors change when the engine processes, at a moment wtx is not told of:
  // their before-images are taken now.
  if (active_->req.rollback) {
    for (uint32_t i = 0; i < manifest_->params().size(); ++i) {
      if (manifest_->params()[i].served_only()) {
        WTX_RETURN_IF_ERROR(SaveBefore(i, 0, memory_->Size(i)));
      }
    }
  }
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
  bool device;           // src is a device address
  bool strided = false;  // one of many runs of a piece read in place from a strided source
  int fd = -1;           // >= 0: the bytes are read from this file at file_offset, not src
  uint64_t file_offset = 0;
  const std::string* file = nullptr;  // its name
};

// Bytes of a strided piece land run by run (rows of a column slice), so no run covers a hash
// chunk whole; the chunks they fill are hashed every this many bytes, from cache, instead of
// at prepare (within the 1 MiB L2 of a core, so the hash reads what the copy just wrote).
constexpr size_t kStridedHashBatch = size_t{256} << 10;
}  // namespace

Result<ParticipantImpl::Target> ParticipantImpl::ResolveBox(
    const std::string& param, const std::string& shard, const std::optional<Box>& box,
    const std::function<Status(uint32_t)>& scope) const {
  auto pi = manifest_->FindParam(param);
  if (!pi) return Err(ErrorCode::kUnknownParam, "unknown parameter '" + param + "'");
  const ParamSpec& p = manifest_->params()[*pi];
  Target t;
  t.param = *pi;
  if (!shard.empty()) {
    t.shard = manifest_->FindShard(*pi, shard);
    if (!t.shard) {
      return Err(ErrorCode::kUnknownParam,
                 "parameter '" + p.name + "' has no shard '" + shard + "'");
    }
  }
  WTX_RETURN_IF_ERROR(scope(*pi));
  t.box = box ? *box : (t.shard ? p.shards[*t.shard].box : WholeBox(p.shape));
  t.where = "'" + p.name + "'" + (t.shard ? " shard '" + shard + "'" : "");
  if (t.box.size() != p.shape.size()) {
    return Err(ErrorCode::kBadWrite, t.where + ": box " + BoxToString(t.box) + " has " +
                                         std::to_string(t.box.size()) +
                                         " dimensions, the "
                                         "parameter has " +
                                         std::to_string(p.shape.size()));
  }
  for (const auto& r : t.box) {
    if (r.begin >= r.end && !p.shape.empty()) {
      return Err(ErrorCode::kBadWrite, t.where + ": empty or inverted box " + BoxToString(t.box));
    }
  }
  if (!BoxInsideShape(t.box, p.shape)) {
    return Err(ErrorCode::kOutOfRange,
               t.where + ": box " + BoxToString(t.box) + " lies outside the parameter");
  }
  if (t.shard && !BoxContains(p.shards[*t.shard].box, t.box)) {
    return Err(ErrorCode::kOutOfRange, t.where + ": box " + BoxToString(t.box) +
                                           " lies outside the shard's box " +
                                           BoxToString(p.shards[*t.shard].box));
  }
  return t;
}

Status ParticipantImpl::CheckInScope(const ActiveTx& tx, uint32_t param) const {
  if (tx.req.kind == TxKind::kPartial && !tx.in_scope[param]) {
    return Err(ErrorCode::kOutOfScope, "'" + manifest_->params()[param].name +
                                           "' is not in the modules of partial transaction '" +
                                           tx.req.tx + "'");
  }
  return Status::OK();
}

Status ParticipantImpl::ResolveSource(const WritePiece& w, std::vector<WritePiece>* out) const {
  if (w.source.empty()) {
    out->push_back(w);
    return Status::OK();
  }
  const std::string what =
      "source '" + w.source + "'" + (w.param.empty() ? std::string() : " in '" + w.param + "'");
  if (!w.shard.empty()) {
    return Err(ErrorCode::kBadWrite, what + ": give either a shard or a source, not both");
  }
  if (!w.param.empty() && !manifest_->FindParam(w.param)) {
    return Err(ErrorCode::kUnknownParam, "unknown parameter '" + w.param + "'");
  }
  std::vector<ShardRef> fed;
  for (const ShardRef& ref : manifest_->ShardsOfSource(w.source)) {
    if (w.param.empty() || manifest_->params()[ref.param].name == w.param) fed.push_back(ref);
  }
  if (fed.empty()) return Err(ErrorCode::kUnknownParam, "no shard fed by " + what);
  auto piece = [&](const ShardRef& ref, Box box, const void* data, size_t bytes) {
    const ParamSpec& p = manifest_->params()[ref.param];
    WritePiece r;
    r.param = p.name;
    r.shard = p.shards[ref.shard].id;
    r.box = std::move(box);
    r.data = data;
    r.bytes = bytes;
    r.location = w.location;
    out->push_back(std::move(r));
  };
  if (w.box) {
    // The box restricts the write: it lies inside one shard the source feeds.
    for (const ShardRef& ref : fed) {
      if (BoxContains(manifest_->params()[ref.param].shards[ref.shard].box, *w.box)) {
        piece(ref, *w.box, w.data, w.bytes);
        return Status::OK();
      }
    }
    const ParamSpec& p0 = manifest_->params()[fed[0].param];
    if (w.box->size() != p0.shape.size()) {
      piece(fed[0], *w.box, w.data, w.bytes);  // the shard's own checks name what is wrong
      return Status::OK();
    }
    std::string boxes;
    for (size_t k = 0; k < fed.size() && k < 4; ++k) {
      const ParamSpec& p = manifest_->params()[fed[k].param];
      boxes += std::string(k ? ", " : "") + "'" + p.name + "' shard '" + p.shards[fed[k].shard].id +
               "' " + BoxToString(p.shards[fed[k].shard].box);
    }
    if (fed.size() > 4) boxes += ", ...";
    return Err(ErrorCode::kOutOfRange, what + ": box " + BoxToString(*w.box) +
                                           " lies outside what the source feeds (" + boxes + ")");
  }
  size_t want = 0;
  for (const ShardRef& ref : fed) {
    const ParamSpec& p = manifest_->params()[ref.param];
    want += static_cast<size_t>(NumElements(p.shards[ref.shard].box)) * DTypeSize(p.dtype);
  }
  if (w.bytes != want || (want > 0 && w.data == nullptr)) {
    return Err(ErrorCode::kBadWrite, what + ": " + std::to_string(w.bytes) + " bytes, expected " +
                                         std::to_string(want) + " for the " +
                                         std::to_string(fed.size()) + " shard(s) it feeds");
  }
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  for (const ShardRef& ref : fed) {
    const ParamSpec& p = manifest_->params()[ref.param];
    const Box& box = p.shards[ref.shard].box;
    const size_t n = static_cast<size_t>(NumElements(box)) * DTypeSize(p.dtype);
    piece(ref, box, data, n);
    data += n;
  }
  return Status::OK();
}

Status ParticipantImpl::Write(std::span<const WritePiece> given) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kWrite);
  std::lock_guard<std::mutex> l(mu_);
  return WriteLocked(given, {}, /*declare=*/false);
}

Status ParticipantImpl::Declare(std::span<const WritePiece> given) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kWrite);
  std::lock_guard<std::mutex> l(mu_);
  return WriteLocked(given, {}, /*declare=*/true);
}

Result<int> ParticipantImpl::DeclareSource(std::string_view source, const void* data,
                                           size_t bytes) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kWrite);
  return WriteSourceFrom(source, data, bytes, nullptr, /*declare=*/true);
}

Status ParticipantImpl::AdoptServed(std::string_view param_name, const void* data, size_t bytes,
                                    uint64_t checkpoint_digest) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kWrite);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckWritable());
  ActiveTx& tx = *active_;
  const std::string name(param_name);
  WTX_ASSIGN_OR_RETURN(target, ResolveBox(name, "", std::nullopt, [&](uint32_t param) {
                         if (tx.req.kind == TxKind::kDelta) {
                           return Err(ErrorCode::kOutOfScope,
                                      "'" + name + "': transaction '" + tx.req.tx +
                                          "' is a delta; it takes patches, not writes");
                         }
                         return CheckInScope(tx, param);
                       }));
  const uint32_t pi = target.param;
  const ParamSpec& p = manifest_->params()[pi];
  if (!p.served) {
    return Status::InvalidArgument("'" + name + "' is not processed: write its bytes instead");
  }
  const size_t size = memory_->Size(pi);
  if (bytes != size || (size > 0 && data == nullptr)) {
    return Err(ErrorCode::kBadWrite, "'" + name + "': " + std::to_string(bytes) +
                                         " served bytes, expected " + std::to_string(size));
  }
  const int64_t elements = p.num_elements();
  if (OverlapsDeclared(tx, pi, 0, elements)) {
    return Err(ErrorCode::kDuplicateWrite,
               "'" + name + "' overlaps elements this transaction already wrote or reserved");
  }
  WTX_RETURN_IF_ERROR(CheckIdentityLocked(std::span<const uint32_t>(&pi, 1)));
  WTX_RETURN_IF_ERROR(CheckBeforeDeclare(pi, 0, size));
  if (tx.req.rollback) WTX_RETURN_IF_ERROR(SaveBefore(pi, 0, size));
  if (Status st = memory_->Store(pi, 0, data, size); !st.ok()) return MemoryFailed(st);
  TouchBytes(pi, 0, size);  // hashed at prepare: the served digest must be the peer's
  tx.adopted[pi] = checkpoint_digest;
  auto& cov = tx.coverage[pi];
  if (!cov) cov = std::make_unique<CoverageSet>(elements, p.shape.empty() ? 0 : p.shape.back());
  cov->Add(0, elements);
  tx.covered_elements += elements;
  NoteWritten(pi);
  const int64_t now = options_.env.clock->NowMicros();
  if (!tx.wrote) tx.t_first_write = now;
  tx.t_last_write = now;
  tx.wrote = true;
  tx.elements += elements;
  tx.bytes += static_cast<int64_t>(size);
  tx.pieces += 1;
  WriteRecord rec;
  rec.tx = tx.req.tx;
  rec.param = p.name;
  rec.box = WholeBox(p.shape);
  rec.elements = elements;
  rec.bytes = static_cast<int64_t>(size);
  for (uint32_t k = 0; k < p.shards.size(); ++k) {
    rec.shards.push_back(p.shards[k].id);
    tx.shards_touched.emplace(pi, k);
  }
  rec.ts = now;
  pending_.emplace_back(std::move(rec));
  UpdateCoveragePeak();
  if (pending_.size() >= kWriteRecordBatch) return FlushPending();
  return Status::OK();
}

Status ParticipantImpl::WriteLocked(std::span<const WritePiece> given,
                                    std::span<const SourceLayout> layouts, bool declare) {
  assert((layouts.empty() || layouts.size() == given.size()) && "one layout per piece");
  assert((layouts.empty() || std::none_of(given.begin(), given.end(),
                                          [](const WritePiece& w) { return !w.source.empty(); })) &&
         "layouts describe resolved pieces");
  WTX_RETURN_IF_ERROR(CheckWritable());
  ActiveTx& tx = *active_;
  std::span<const WritePiece> pieces = given;
  std::vector<WritePiece> resolved;  // only when a piece names a source (no copies otherwise)
  if (std::any_of(given.begin(), given.end(),
                  [](const WritePiece& w) { return !w.source.empty(); })) {
    for (const WritePiece& w : given) WTX_RETURN_IF_ERROR(ResolveSource(w, &resolved));
    pieces = resolved;
  }
  std::vector<PlannedRun> runs;
  std::vector<WriteRecord> records;
  std::vector<std::pair<uint32_t, uint32_t>> touched;
  for (size_t pi_index = 0; pi_index < pieces.size(); ++pi_index) {
    const WritePiece& w = pieces[pi_index];
    const SourceLayout* given_layout = layouts.empty() ? nullptr : &layouts[pi_index];
    const SourceLayout* layout =
        given_layout != nullptr && given_layout->shape != nullptr ? given_layout : nullptr;
    // Read from a file: a contiguous piece into host memory (WriteSourceFromFile's routing).
    const SourceLayout* from_file =
        given_layout != nullptr && layout == nullptr && given_layout->fd >= 0 ? given_layout
                                                                              : nullptr;
    assert((from_file == nullptr || (host_memory_ && w.location == BufferLocation::kHost)) &&
           "file reads go to host live memory only");
    WTX_ASSIGN_OR_RETURN(target, ResolveBox(w.param, w.shard, w.box, [&](uint32_t param) {
                           if (tx.req.kind == TxKind::kDelta) {
                             return Err(ErrorCode::kOutOfScope,
                                        "'" + w.param + "': transaction '" + tx.req.tx +
                                            "' is a delta; it takes patches, not writes");
                           }
                           return CheckInScope(tx, param);
                         }));
    const uint32_t pi = target.param;
    const std::optional<uint32_t>& si = target.shard;
    const ParamSpec& p = manifest_->params()[pi];
    const Box& box = target.box;
    const std::string& where = target.where;
    if (w.location == BufferLocation::kDevice && host_memory_) {
      return Status::InvalidArgument(where +
                                     ": a write from device memory needs device live "
                                     "memory (this rank's live bytes are host memory)");
    }
    if (declare && p.served_only()) {
      return Status::InvalidArgument(where +
                                     ": is served only (the engine computes it; no source "
                                     "feeds it): nothing is declared for it");
    }
    if (declare && !p.served) {
      return Status::InvalidArgument(where +
                                     ": is not processed (its live tensor holds the checkpoint "
                                     "bytes): write or reserve it instead of declaring it");
    }
    if (!declare && p.served) {
      return Err(ErrorCode::kBadWrite, where + ": " + ProcessedRefusal(p));
    }
    if (declare && w.location == BufferLocation::kDevice) {
      return Status::InvalidArgument(where + ": declared checkpoint bytes must be in host memory");
    }
    const size_t esz = DTypeSize(p.dtype);
    const size_t want = static_cast<size_t>(NumElements(box)) * esz;
    if (w.bytes != want || (want > 0 && w.data == nullptr && from_file == nullptr)) {
      return Err(ErrorCode::kBadWrite, where + ": " + std::to_string(w.bytes) + " bytes for box " +
                                           BoxToString(box) + ", expected " + std::to_string(want) +
                                           " (" + std::string(DTypeName(p.dtype)) + ")");
    }
    const uint8_t* src = static_cast<const uint8_t*>(w.data);
    const size_t first_run = runs.size();
    const bool device = w.location == BufferLocation::kDevice;
    if (from_file != nullptr) {
      uint64_t at = from_file->file_offset;
      ForEachFlatRun(p.shape, box, [&](int64_t b, int64_t len) {
        runs.push_back({pi, b, len, nullptr, false, false, from_file->fd, at, from_file->file});
        at += static_cast<size_t>(len) * esz;
      });
    } else if (layout == nullptr) {
      ForEachFlatRun(p.shape, box, [&](int64_t b, int64_t len) {
        runs.push_back({pi, b, len, src, device});
        src += static_cast<size_t>(len) * esz;
      });
    } else {
      // The live box's runs and the source box's runs cut the same elements (both row-major
      // over boxes of one shape) at different places: one planned run per piece between cuts.
      std::vector<std::pair<int64_t, int64_t>> source_runs;
      ForEachFlatRun(*layout->shape, *layout->box,
                     [&](int64_t b, int64_t len) { source_runs.emplace_back(b, len); });
      size_t s = 0;
      int64_t in_run = 0;
      ForEachFlatRun(p.shape, box, [&](int64_t b, int64_t len) {
        while (len > 0) {
          assert(s < source_runs.size() && "the source box has the live box's element count");
          const int64_t take = std::min(len, source_runs[s].second - in_run);
          runs.push_back({pi, b, take,
                          src + static_cast<size_t>(source_runs[s].first + in_run) * esz, device,
                          /*strided=*/true});
          b += take;
          len -= take;
          in_run += take;
          if (in_run == source_runs[s].second) {
            ++s;
            in_run = 0;
          }
        }
      });
    }
    for (size_t k = first_run; k < runs.size(); ++k) {
      if (OverlapsDeclared(tx, pi, runs[k].begin, runs[k].len)) {
        return Err(ErrorCode::kDuplicateWrite,
                   where + ": box " + BoxToString(box) +
                       " overlaps elements this transaction already wrote or reserved");
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
      touched.emplace_back(pi, *si);
    } else {
      for (uint32_t k = 0; k < p.shards.size(); ++k) {
        if (Overlaps(p.shards[k].box, box)) {
          shard_ids.push_back(p.shards[k].id);
          touched.emplace_back(pi, k);
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
  // The engine's storage of every parameter written is still where wtx is bound.
  {
    std::vector<uint32_t> params;
    for (const PlannedRun& r : runs) {
      if (params.empty() || params.back() != r.param) params.push_back(r.param);
    }
    WTX_RETURN_IF_ERROR(CheckIdentityLocked(Distinct(std::move(params))));
  }
  // Everything checked: land the bytes.
  const int64_t now = options_.env.clock->NowMicros();
  if (!tx.wrote) tx.t_first_write = now;
  tx.t_last_write = now;
  // Strided runs contiguous in live memory since the last hash of their chunks.
  struct Pending {
    uint32_t param = 0;
    size_t begin = 0, end = 0;
  } pending;
  auto hash_pending = [&](bool all) {
    if (pending.end == pending.begin) return;
    hash_[pending.param].HashCovered(memory_->Param(pending.param), pending.begin,
                                     pending.end - pending.begin);
    // A chunk that continues past `end` is hashed with the next batch (from its start).
    pending.begin = all ? pending.end
                        : std::max(pending.begin, pending.end / kHashChunkBytes * kHashChunkBytes);
    if (all) pending.end = pending.begin;
  };
  for (const PlannedRun& r : runs) {
    const ParamSpec& p = manifest_->params()[r.param];
    const size_t esz = DTypeSize(p.dtype);
    const size_t off = static_cast<size_t>(r.begin) * esz;
    const size_t len = static_cast<size_t>(r.len) * esz;
    if (declare) {
      auto [image, fresh] = tx.checkpoint.try_emplace(r.param, static_cast<size_t>(p.num_bytes()));
      if (fresh) {
        // The engine's processing rewrites the whole live tensor: every chunk of it is declared
        // and rehashed at prepare, and its before-image kept.
        const size_t live = memory_->Size(r.param);
        WTX_RETURN_IF_ERROR(CheckBeforeDeclare(r.param, 0, live));
        if (tx.req.rollback) WTX_RETURN_IF_ERROR(SaveBefore(r.param, 0, live));
        TouchBytes(r.param, 0, live);
      }
      image->second.Add(off, static_cast<const uint8_t*>(r.src), len);
    } else {
      WTX_RETURN_IF_ERROR(CheckBeforeDeclare(r.param, off, len));
      if (tx.req.rollback) WTX_RETURN_IF_ERROR(SaveBefore(r.param, off, len));
    }
    if (declare || hooks_.benchmark_coverage_only) {
      // nothing lands
    } else if (r.fd >= 0) {
      // Read from the file straight into host live memory, several reads in flight on the
      // data path's threads, each job's chunks hashed right after its read.
      Status st = data_pool_ ? data_pool_->ReadIn(hash_[r.param], memory_->Param(r.param), off,
                                                  r.fd, r.file_offset, len)
                             : ReadInAndHash(hash_[r.param], memory_->Param(r.param), off, r.fd,
                                             r.file_offset, len);
      DeclareBytes(r.param, off, len);
      if (!st.ok()) {
        // Bytes of this call landed, and these are undefined: the transaction wrote, cannot
        // commit, and its abort leaves the rank dirty (or restores the before-images).
        NoteWritten(r.param);
        tx.wrote = true;
        tx.shards_touched.insert(touched.begin(), touched.end());
        const std::string what = *r.file + ": " + st.message() + " into '" + p.name + "'";
        if (tx.failed_read.empty()) tx.failed_read = what;
        return Err(ErrorCode::kIOError, what + "; the transaction can no longer commit");
      }
    } else if (host_memory_ && !r.device && r.strided) {
      // A row of a strided source: copied (the chunk stays in cache), its chunks hashed once
      // consecutive rows have filled them.
      hash_[r.param].CopyIn(memory_->Param(r.param), off, r.src, len);
      DeclareBytes(r.param, off, len);
      if (pending.param != r.param || pending.end != off) {
        hash_pending(/*all=*/true);
        pending = {r.param, off, off + len};
      } else {
        pending.end += len;
      }
      if (pending.end - pending.begin >= kStridedHashBatch) hash_pending(/*all=*/false);
    } else if (host_memory_ && !r.device) {
      // Whole hash chunks are hashed in the same pass as the copy; prepare rehashes the rest.
      // A large copy is split across the data path's threads (ParticipantOptions::threads).
      if (data_pool_) {
        data_pool_->CopyIn(hash_[r.param], memory_->Param(r.param), off, r.src, len);
      } else {
        hash_[r.param].CopyIn(memory_->Param(r.param), off, r.src, len);
      }
      DeclareBytes(r.param, off, len);
    } else {
      // From device memory, or into a device: the bytes go over, then the chunks they cover
      // whole are hashed now, as CopyIn does on the host, so that the version is of the bytes
      // as written whatever the memory (a later undeclared change is caught by verify all);
      // prepare rehashes the chunks covered in part.
      Status st = r.device ? memory_->StoreFromDevice(r.param, off, r.src, len)
                           : memory_->Store(r.param, off, r.src, len);
      if (!st.ok()) return MemoryFailed(st);
      TouchBytes(r.param, off, len);
      WTX_RETURN_IF_ERROR(HashWritten(r.param, off, len));
    }
    auto& cov = tx.coverage[r.param];
    if (!cov) {
      cov = std::make_unique<CoverageSet>(p.num_elements(), p.shape.empty() ? 0 : p.shape.back());
    }
    cov->Add(r.begin, r.len);
    tx.covered_elements += r.len;
    NoteWritten(r.param);
    tx.elements += r.len;
    tx.bytes += static_cast<int64_t>(len);
    tx.rows += p.shape.empty() ? 1 : std::max<int64_t>(1, r.len / p.shape.back());
  }
  hash_pending(/*all=*/true);
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

Result<int> ParticipantImpl::WriteSource(std::string_view source, const void* data, size_t bytes) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kWrite);
  return WriteSourceFrom(source, data, bytes, nullptr);
}

Result<int> ParticipantImpl::WriteSourceFromFile(std::string_view source, const SourceFile& file) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kWrite);
  if (file.fd < 0) {
    return Status::InvalidArgument("source '" + std::string(source) + "': no file (fd " +
                                   std::to_string(file.fd) + ")");
  }
  const std::vector<ShardRef>& refs = manifest_->ShardsOfSource(source);
  if (refs.empty()) return 0;
  const ParamSpec& p = manifest_->params()[refs[0].param];
  const size_t bytes =
      static_cast<size_t>(NumElements(p.shards[refs[0].shard].source_shape)) * DTypeSize(p.dtype);
  return WriteSourceFrom(source, file.mapped, bytes, &file);
}

Result<int> ParticipantImpl::WriteSourceFrom(std::string_view source, const void* data,
                                             size_t bytes, const SourceFile* file, bool declare) {
  // The manifest is immutable: the slicing needs no lock; the write below takes it.
  const std::vector<ShardRef>& refs = manifest_->ShardsOfSource(source);
  if (refs.empty()) return 0;
  const std::string where = "source '" + std::string(source) + "'";
  const auto& params = manifest_->params();
  const ShardSpec& first = params[refs[0].param].shards[refs[0].shard];
  const Shape& shape = first.source_shape;
  const DType dtype = params[refs[0].param].dtype;
  for (const ShardRef& r : refs) {
    if (params[r.param].dtype != dtype) {
      return Status::InvalidArgument(
          where + " feeds parameters of different dtypes ('" + params[refs[0].param].name + "' " +
          std::string(DTypeName(dtype)) + ", '" + params[r.param].name + "' " +
          std::string(DTypeName(params[r.param].dtype)) + "); write its shards one by one");
    }
  }
  const size_t esz = DTypeSize(dtype);
  const size_t want = static_cast<size_t>(NumElements(shape)) * esz;
  if (bytes != want || (want > 0 && data == nullptr && file == nullptr)) {
    return Status(ErrorCode::kBadWrite, where + ": " + std::to_string(bytes) + " bytes, expected " +
                                            std::to_string(want) + " (shape " +
                                            BoxToString(WholeBox(shape)) + ", " +
                                            std::string(DTypeName(dtype)) + ")");
  }
  // A file's shards that cannot be read straight into live memory (column slices without a
  // mapping, any shard into device memory) read from one read of the whole source.
  std::vector<uint8_t> whole;
  const uint8_t* src = static_cast<const uint8_t*>(data);
  auto source_bytes = [&]() -> Result<const uint8_t*> {
    if (src != nullptr) return src;
    whole.resize(want);
    Status read = PreadFully(file->fd, file->offset, whole.data(), want);
    if (!read.ok()) return Status(read.code(), file->name + ": " + where + ": " + read.message());
    src = whole.data();
    return src;
  };
  // Every shard is written straight from `data` (or the file): one whose source box is one
  // contiguous run as a plain piece, the others (column slices) row by row through their
  // layout, without a gathered copy; into device memory, where a store per row would cost a
  // transfer per row, those are gathered first and go over in one store.
  // Declared bytes are read from host memory whatever the live memory.
  const bool host = host_memory_ || declare;
  std::vector<std::vector<uint8_t>> gathered;
  std::vector<WritePiece> pieces;
  std::vector<SourceLayout> layouts;
  gathered.reserve(refs.size());
  pieces.reserve(refs.size());
  layouts.reserve(refs.size());
  for (const ShardRef& r : refs) {
    const ParamSpec& p = params[r.param];
    const ShardSpec& sh = p.shards[r.shard];
    WritePiece w;
    w.param = p.name;
    w.shard = sh.id;
    w.box = sh.box;
    w.bytes = static_cast<size_t>(NumElements(sh.source_box)) * esz;
    if (w.bytes == 0) continue;
    SourceLayout layout;
    if (NumFlatRuns(shape, sh.source_box) == 1) {
      int64_t run_begin = 0;
      ForEachFlatRun(shape, sh.source_box, [&](int64_t b, int64_t) { run_begin = b; });
      const size_t at = static_cast<size_t>(run_begin) * esz;
      if (file != nullptr && host) {
        layout.fd = file->fd;
        layout.file_offset = file->offset + at;
        layout.file = &file->name;
      } else {
        WTX_ASSIGN_OR_RETURN(base, source_bytes());
        w.data = base + at;
      }
    } else if (host) {
      WTX_ASSIGN_OR_RETURN(base, source_bytes());
      w.data = base;
      layout.shape = &shape;
      layout.box = &sh.source_box;
    } else {
      WTX_ASSIGN_OR_RETURN(base, source_bytes());
      std::vector<uint8_t>& buf = gathered.emplace_back(w.bytes);
      CopyBoxOut(shape, sh.source_box, esz, base, buf.data());
      w.data = buf.data();
    }
    pieces.push_back(std::move(w));
    layouts.push_back(layout);
  }
  Status s;
  {
    std::lock_guard<std::mutex> l(mu_);
    s = WriteLocked(pieces, layouts, declare);
  }
  if (!s.ok()) return Status(s.code(), where + ": " + s.message());
  return static_cast<int>(pieces.size());
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
  // Before-images go back only into storage that is still where wtx is bound: a parameter the
  // engine moved or freed is skipped (its bytes are unknown; the rank stays dirty).
  std::vector<uint32_t> params;
  params.reserve(active_->before.size());
  for (const BeforeImage& b : active_->before) params.push_back(b.param);
  Status moved = CheckIdentityLocked(Distinct(std::move(params)));
  if (!moved.ok() && moved.code() != ErrorCode::kStorageMoved) return moved;
  for (auto it = active_->before.rbegin(); it != active_->before.rend(); ++it) {
    if (moved_[it->param]) continue;
    Status s = memory_->Store(it->param, it->offset, it->bytes.data(), it->bytes.size());
    if (!s.ok()) return MemoryFailed(s);
    TouchBytes(it->param, it->offset, it->bytes.size());
  }
  active_->before.clear();
  return Status::OK();
}

void ParticipantImpl::RestoreEpochs(const ActiveTx& tx) {
  // The bytes of every parameter are back to those at begin, so are its write epochs: a derived
  // state the transaction did not refresh has its standing of before the transaction.
  for (uint32_t p = 0; p < param_epoch_.size(); ++p) {
    if (param_epoch_[p] > tx.begin_epoch) param_epoch_[p] = tx.epochs_at_begin[p];
  }
  // A derived state refreshed in the transaction: its copy was recomputed from the live bytes
  // at that refresh. If none of its sources had been written by then, those bytes are exactly
  // the restored ones and the refresh stands. Otherwise the copy holds aborted bytes: stale
  // until refreshed, naming the sources that were written before the refresh and restored.
  // Nothing else changes: other derived states of the same sources keep their standing.
  const auto& derived = manifest_->derived();
  for (uint32_t d = 0; d < derived_epoch_.size(); ++d) {
    if (derived_epoch_[d] <= tx.begin_epoch) continue;  // not refreshed in the transaction
    std::vector<std::string> seen_aborted;
    for (const auto& src : derived[d].sources) {
      const uint64_t first = tx.first_write_epoch[*manifest_->FindParam(src)];
      if (first != 0 && first < derived_epoch_[d]) seen_aborted.push_back(src);
    }
    if (seen_aborted.empty()) continue;
    derived_epoch_[d] = tx.derived_epochs_at_begin[d];
    std::vector<std::string>& restored = derived_restored_[d];
    restored = tx.derived_restored_at_begin[d];
    for (auto& src : seen_aborted) {
      if (std::find(restored.begin(), restored.end(), src) == restored.end()) {
        restored.push_back(std::move(src));
      }
    }
  }
}

}  // namespace wtx::participant_internal
