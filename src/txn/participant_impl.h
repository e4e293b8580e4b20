// ParticipantImpl: the single-rank state machine behind wtx::Participant. Internal to the library
// (not in include/wtx): opened only by OpenParticipantWithHooks (test_hooks.h), which
// Participant::Open calls.
//
// Contract. One rank's side of the two-phase commit: Begin opens the one active transaction,
// Write/WriteSource/Patch/Reserve+Landed change live bytes within its scope (partial: modules;
// delta: sources), Refresh marks derived state current, Prepare checks coverage, staleness and
// kernel identity (and, under verify all, every undeclared chunk) and votes, Decide applies the
// coordinator's decision (commit, abort restoring before-images, noop). Every state change is
// journaled first (AppendRecords/Log) through the pure rules of participant_state.h, so replay
// rebuilds exactly state_; a journal or live-memory failure makes the rank crashed_ for good.
// A yes vote is synced before it is returned; after a restart a yes-voted transaction stays in
// doubt (ResolveInDoubt) and any other is presumed aborted.
//
// Locking. One mutex, mu_, guards every mutable member (GUARDED_BY below). Every public method
// takes mu_ itself (EXCLUDES(mu_)); ResolveInDoubt releases it before asking the oracle and
// then calls Decide. The private helpers run with mu_ held (REQUIRES(mu_)). Init runs before
// the participant is shared, so it touches the guarded state without mu_. options_, hooks_,
// manifest_, memory_, host_memory_, journal_ and data_pool_ are set by the constructor and
// Init and never reassigned; the journal and the live bytes are used only under mu_, except by
// data_pool_'s threads, which copy the chunks of a Write while its caller holds mu_ and waits
// for them (ChunkHashPool::CopyIn), and hash landed chunks that nothing changes until
// DrainLandingHashes (under mu_) has installed their digests.
//
// Where the methods are:
//   participant.cc          Init, AppendRecords, Log, Serving, status; Participant::Open,
//                           OpenParticipantWithHooks, WaitForLandingHashes.
//   participant_write.cc    CheckBeginLocked, Begin, CheckWritable, ResolveBox, CheckInScope,
//                           ResolveSource, Write, WriteSource, UpdateCoveragePeak; rollback:
//                           SaveBefore, RestoreBefore, RestoreEpochs.
//   participant_patch.cc    Patch, PatchLocked.
//   participant_derived.cc  Refresh, StaleDerived, CollectMissing, LocalChecks.
//   participant_prepare.cc  CheckPrepare, DigestLocked, RecomputeDigest, Prepare, Decide,
//                           ResolveInDoubt.
//   participant_landing.cc  Reserve, Landed, HashWritten, HashLanded, DrainLandingHashes.
//   participant_verify.cc   VerifyLiveLocked, LogUndeclared, LoadCommitted, Verify, Reattach.
//   participant_identity.cc InitIdentity, CheckIdentityLocked, MovedError, CheckStorage,
//                           Rebind (storage identity, include/wtx/storage_identity.h).
//   participant_metrics.cc  MetricsGauges, PublishMetrics (the rank's series,
//                           docs/observability.md).
// The small inline methods are defined below.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "journal/journal.h"
#include "src/memory/checkpoint_image_digest.h"
#include "src/memory/chunk_hash_pool.h"
#include "src/memory/chunks_before_declare.h"
#include "src/metrics/rank_metrics.h"
#include "src/txn/coverage.h"
#include "src/txn/participant_records.h"
#include "src/txn/participant_state.h"
#include "src/txn/test_hooks.h"
#include "src/util/thread_annotations.h"
#include "wtx/content_hash.h"
#include "wtx/participant.h"

namespace wtx::participant_internal {

// Write, patch and landing records are appended in batches of this many (or at prepare).
inline constexpr size_t kWriteRecordBatch = 256;

inline Status Err(ErrorCode c, std::string m) { return Status(c, std::move(m)); }

// `params` sorted, each once: the parameters a call touches, for the identity check.
inline std::vector<uint32_t> Distinct(std::vector<uint32_t> params) {
  std::sort(params.begin(), params.end());
  params.erase(std::unique(params.begin(), params.end()), params.end());
  return params;
}

// Why a processed parameter (ParamSpec::served) takes no write, landing, patch or piece
// digest: its live bytes are its served form, not checkpoint bytes.
inline std::string ProcessedRefusal(const ParamSpec& p) {
  std::string shape;
  for (int64_t d : p.served->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  return "'" + p.name + "' is processed (served as " + std::string(DTypeName(p.served->dtype)) +
         " [" + shape +
         "]): its live bytes are not checkpoint bytes; declare its checkpoint "
         "bytes as they pass to the engine's loader (Participant::Declare)";
}

// Per-source accounting of delta patch parts.
struct PatchState {
  int parts = 0;
  std::vector<bool> got;
  bool by_piece = false;   // patches by source box (PatchRequest::source_box) instead of parts
  std::vector<Box> boxes;  // their boxes
  std::vector<int64_t> applied;  // sorted source indices applied in earlier parts
};

struct BeforeImage {
  uint32_t param;
  size_t offset;
  std::string bytes;
};

// One in-place landing of the active transaction (Reserve .. Landed).
struct Landing {
  std::string name;    // for messages: "'w' shard 's0' box [[0, 4]]"
  std::string source;  // delta: the source the landing stands for
  std::vector<std::pair<uint32_t, std::pair<int64_t, int64_t>>> runs;  // param, (flat begin, len)
  bool landed = false;
};

// The live box of the part `part` of a shard's source box: a shard maps its source box to its
// live box one to one, dimension by dimension, after any leading live dimensions the source does
// not have (a stacked expert's slot). REQUIRES: part lies in sh.source_box (participant_pieces.cc)
Box LiveBoxOfSourcePart(const ShardSpec& sh, const Box& part);
// E_OUT_OF_RANGE naming `what` unless `box` is a non-empty box of `shape` (same rank).
Status CheckSourceBox(const Box& box, const Shape& shape, const std::string& what);

struct ActiveTx {
  BeginRequest req;
  std::vector<bool> in_scope;               // partial: per parameter
  std::unordered_set<std::string> sources;  // delta
  std::string kernel_identity_at_begin;
  bool wrote = false;
  bool prepared = false;
  bool vote_yes = false;
  bool interrupted = false;  // recovered after a restart: bytes lost
  bool dirty_at_begin = false;
  bool undeclared = false;  // verify all found undeclared changes, or a parameter's storage moved
  // A read from a file failed after bytes landed (WriteSourceFromFile): what failed. The
  // transaction cannot commit (prepare votes no, E_BAD_WRITE).
  std::string failed_read;
  // wtx_coverage_ratio: elements written or landed of the elements required (full, partial:
  // set at Begin); delta: the fraction of each source's parts received, summed over sources.
  int64_t covered_elements = 0, required_elements = 0;
  double sources_patched = 0;
  // This rank voted no: the vote's first error code (wtx_aborts_total's code).
  std::string no_vote_code;
  std::vector<std::unique_ptr<CoverageSet>> coverage;
  std::vector<std::unique_ptr<CoverageSet>> reserved;  // elements reserved for landings
  std::map<std::string, Landing> landings;             // by RegionKey
  std::vector<std::vector<bool>> declared_chunks;      // per param: hash chunks this tx changed
  // verify all: the chunks this tx declared only in part (chunks_before_declare.h)
  PartlyDeclaredChunks partly_declared;
  std::map<std::string, PatchState> patches;
  // WriteSource by source box: the boxes of each source written so far (for naming the piece a
  // new one overlaps).
  std::map<std::string, std::vector<Box>, std::less<>> source_pieces;
  // ExpectPiece: each piece with the shard it lies in, checked at prepare.
  struct Expected {
    ExpectedPiece piece;
    uint32_t param;
    uint32_t shard;
  };
  std::vector<Expected> expected_pieces;
  // Their indices by source, so that the overlap check of a new piece reads only its source's.
  std::map<std::string, std::vector<size_t>, std::less<>> expected_by_source;
  std::vector<uint64_t> epochs_at_begin;  // rollback: parameter write epochs
  std::vector<uint64_t> derived_epochs_at_begin;
  std::vector<std::vector<std::string>> derived_restored_at_begin;
  std::vector<uint64_t> first_write_epoch;  // rollback: per parameter, this tx's first write
                                            // (0: not written)
  std::vector<BeforeImage> before;
  // Declare: each processed parameter's checkpoint bytes declared so far (their digest), and
  // its live (served) bytes, which the engine's processing rewrites, taken as touched whole.
  std::map<uint32_t, CheckpointImageDigest> checkpoint;
  std::map<uint32_t, uint64_t> adopted;  // AdoptServed: the peer's checkpoint digests
  uint64_t begin_epoch = 0;
  // Audit counters.
  std::set<std::pair<uint32_t, uint32_t>> shards_touched;
  int64_t pieces = 0, elements = 0, bytes = 0, rows = 0, patched = 0;
  int64_t t_begin = 0, t_first_write = 0, t_last_write = 0;
};

class ParticipantImpl;

// Declared before a public method's lock: times the call as one phase of the rank's metrics
// and, once the method has released mu_, publishes the gauges its call may have changed.
class MetricsScope {
 public:
  MetricsScope(const ParticipantImpl* p, std::optional<metrics::RankPhase> phase);
  ~MetricsScope();
  MetricsScope(const MetricsScope&) = delete;
  MetricsScope& operator=(const MetricsScope&) = delete;

 private:
  const ParticipantImpl* p_;
  std::optional<metrics::PhaseTimer> timer_;
};

class ParticipantImpl : public Participant {
 public:
  ParticipantImpl(ParticipantOptions options, ManifestPtr manifest, const ParticipantHooks& hooks)
      : options_(std::move(options)), hooks_(hooks), manifest_(std::move(manifest)) {}

  // Runs before the participant is shared: touches the guarded state without mu_.
  Status Init() NO_THREAD_SAFETY_ANALYSIS;
  // Init's check that the journal belongs to this model and lineage (ParticipantOptions).
  Status CheckLineageAtOpen() const NO_THREAD_SAFETY_ANALYSIS;
  // The lineage of this rank: the journal's, or before one is committed, the options'.
  // REQUIRES: mu_ held (or Init).
  std::string EffectiveLineage() const NO_THREAD_SAFETY_ANALYSIS;

  RankDescription Describe() const override EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    RankDescription d;
    d.rank = options_.rank;
    d.fingerprint = manifest_->Fingerprint();
    d.kernel_identity = kernel_identity_;
    d.lineage = EffectiveLineage();
    d.step = state_.step;
    if (active_) {
      d.active_tx = active_->req.tx;
      d.prepared = active_->prepared && active_->vote_yes;
    }
    return d;
  }
  Status CheckBegin(const BeginRequest& req) const override EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    return CheckBeginLocked(req);
  }
  Status Begin(const BeginRequest& req) override EXCLUDES(mu_);
  Status Write(std::span<const WritePiece> pieces) override EXCLUDES(mu_);
  // Where a piece's bytes are when they are not one contiguous run: the box `box` of a
  // row-major tensor of shape `shape` whose first byte is the piece's `data` (WriteSource of a
  // shard fed by a column slice reads it in place, without gathering it first).
  struct SourceLayout {
    const Shape* shape = nullptr;  // null: the piece's bytes are contiguous
    const Box* box = nullptr;
    // Contiguous pieces only: the bytes are at `file_offset` of the open file `fd` (-1: at the
    // piece's `data`), read straight into host live memory; `file` names it in errors.
    int fd = -1;
    uint64_t file_offset = 0;
    const std::string* file = nullptr;
  };
  // Write, with layouts[i] describing pieces[i] (empty: every piece contiguous); `declare`:
  // Declare (the bytes go to the processed parameters' checkpoint digests, not live memory).
  Status WriteLocked(std::span<const WritePiece> pieces, std::span<const SourceLayout> layouts,
                     bool declare) REQUIRES(mu_);
  Status Declare(std::span<const WritePiece> pieces) override EXCLUDES(mu_);
  Result<int> DeclareSource(std::string_view source, const void* data, size_t bytes) override
      EXCLUDES(mu_);
  Status AdoptServed(std::string_view param, const void* data, size_t bytes,
                     uint64_t checkpoint_digest) override EXCLUDES(mu_);
  std::optional<uint64_t> CommittedCheckpointDigest(uint32_t param) const override EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    if (param >= checkpoint_digest_.size()) return std::nullopt;
    if (manifest_->params()[param].served_only()) return ZeroImageDigest(param);
    return checkpoint_digest_[param];
  }
  // The checkpoint digest of a served-only parameter (ParamSpec::served_only): of zeros.
  uint64_t ZeroImageDigest(uint32_t param) const;
  Status Patch(const PatchRequest& req) override EXCLUDES(mu_);
  Result<int> WriteSource(std::string_view source, const void* data, size_t bytes) override
      EXCLUDES(mu_);
  Result<int> WriteSourceFromFile(std::string_view source, const SourceFile& file) override
      EXCLUDES(mu_);
  Result<int> WriteSource(std::string_view source, const void* data, size_t bytes,
                          const Box& source_box) override EXCLUDES(mu_);
  // WriteSource's slicing, from `data` (may be null when `file` is given) or `file`;
  // `declare`: DeclareSource.
  Result<int> WriteSourceFrom(std::string_view source, const void* data, size_t bytes,
                              const SourceFile* file, bool declare = false) EXCLUDES(mu_);
  Status ExpectPiece(const ExpectedPiece& piece) override EXCLUDES(mu_);
  Result<std::vector<std::string>> Refresh(std::string_view name) override EXCLUDES(mu_);
  Result<std::vector<Reservation>> Reserve(const LandingRegion& region) override EXCLUDES(mu_);
  Status Landed(const LandingRegion& region) override EXCLUDES(mu_);
  Result<VerifyReport> Verify() override EXCLUDES(mu_);
  Result<VerifyReport> Reattach() override EXCLUDES(mu_);
  Status CheckStorage() override EXCLUDES(mu_);
  Result<std::vector<StorageChange>> Rebind(std::span<const std::string> params) override
      EXCLUDES(mu_);
  void SetKernelIdentity(std::string identity) override EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    kernel_identity_ = std::move(identity);
  }
  void SetHold(std::optional<std::string> reason) override EXCLUDES(mu_);
  Result<Vote> Prepare(std::string_view tx) override EXCLUDES(mu_);
  Result<Vote> CheckPrepare(std::string_view tx) const override EXCLUDES(mu_);
  Status Decide(std::string_view tx, Decision decision, const DecidedVersion& version) override
      EXCLUDES(mu_);
  Status ResolveInDoubt(DecisionOracle& oracle) override EXCLUDES(mu_);
  RankStatus status() const override EXCLUDES(mu_);
  // Publishes MetricsGauges (MetricsScope).
  void PublishMetrics() const EXCLUDES(mu_);
  metrics::RankMetrics* rank_metrics() const { return metrics_.get(); }
  const Manifest& manifest() const override { return *manifest_; }
  LiveMemory& memory() override { return *memory_; }
  Result<std::string> RecomputeDigest() override EXCLUDES(mu_);
  size_t CoverageMemoryBytes() const override EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    return coverage_peak_bytes_;
  }

  // DrainLandingHashes under the participant's mutex (test_hooks.h).
  void WaitForLandingHashes() EXCLUDES(mu_) {
    std::lock_guard<std::mutex> lock(mu_);
    DrainLandingHashes();
  }

 private:
  Status CheckBeginLocked(const BeginRequest& req) const REQUIRES(mu_);
  // The request's lineage is the rank's and its step (if any) above the committed one.
  Status CheckLineageLocked(const BeginRequest& req) const REQUIRES(mu_);
  // Identity (participant_identity.cc). Binds every parameter to the storage the resolver
  // reports at Open (Init, before the participant is shared).
  Status InitIdentity() NO_THREAD_SAFETY_ANALYSIS;
  // Re-resolves `params`: a change not seen before is journaled (STORAGE_MOVED, synced; an
  // active transaction can no longer leave the rank clean); E_STORAGE_MOVED while any of them
  // is moved (not rebound). OK without a resolver.
  Status CheckIdentityLocked(std::span<const uint32_t> params) REQUIRES(mu_);
  // E_STORAGE_MOVED naming those of `params` known to be moved, or OK. Resolves nothing.
  Status MovedError(std::span<const uint32_t> params) const REQUIRES(mu_);
  // Reattach, with mu_ held (Verify after a Rebind is a Reattach).
  Result<VerifyReport> ReattachLocked() REQUIRES(mu_);

  Status CheckAlive() const REQUIRES(mu_) {
    if (crashed_) return Err(ErrorCode::kCrashed, "rank " + Rank() + " has crashed");
    return Status::OK();
  }
  Status CheckWritable() const REQUIRES(mu_);
  // A piece named by `source` as the pieces of the shards it is: param, shard, box and its
  // slice of the bytes. Other pieces are appended as they are.
  Status ResolveSource(const WritePiece& w, std::vector<WritePiece>* out) const;
  // Whether a full transaction's before-images would restore a committed version (the rank
  // holds loaded, clean bytes of one). REQUIRES: mu_ held.
  bool FullRollbackRestores() const REQUIRES(mu_) {
    return loaded_ && state_.version.has_value() && !state_.dirty;
  }
  std::string Rank() const { return std::to_string(options_.rank); }
  // Appends pending write records plus `record` (if any) with the new state.
  Status Log(std::optional<ParticipantRecord> record, bool sync) REQUIRES(mu_);
  Status FlushPending() REQUIRES(mu_) { return Log(std::nullopt, false); }
  // Appends `records` and then `last` with the new state, all applied typed (never decoded
  // back) and encoded without building JSON where the record has a direct encoding.
  Status AppendRecords(std::vector<ParticipantRecord> records,
                       std::optional<ParticipantRecord> last, bool sync) REQUIRES(mu_);
  bool CrashAt(std::string_view point) REQUIRES(mu_) {
    if (hooks_.crash_points && hooks_.crash_points->ShouldCrash(point)) {
      crashed_ = true;
      return true;
    }
    return false;
  }
  std::vector<StaleDerivedState> StaleDerived() const REQUIRES(mu_);
  void CollectMissing(Vote* vote) const REQUIRES(mu_);
  // Coverage, staleness and kernel identity of the active transaction: sets errors, yes and
  // message of *vote. REQUIRES: active_ and not prepared.
  void LocalChecks(Vote* vote) const REQUIRES(mu_);
  // The expected pieces' digests over the live bytes: a difference adds E_VERSION_MISMATCH to
  // *vote, naming each piece (participant_piece_digest.cc). Errors: reading device memory.
  Status CheckPieceDigests(Vote* vote) REQUIRES(mu_);
  // The rank's two digests from the hash caches (and, for processed parameters, their
  // checkpoint digests: this transaction's declared bytes, else the committed ones). An
  // unknown checkpoint digest of a processed parameter is kCoverageIncomplete naming it.
  struct RankDigests {
    std::string checkpoint;
    std::string served;
    std::vector<std::pair<uint32_t, uint64_t>> processed;  // (param, checkpoint digest)
  };
  Result<RankDigests> DigestLocked() REQUIRES(mu_);
  // A live-memory operation failed (a device error): the live bytes are no longer known, so
  // the rank refuses everything from now on, as after a journal failure.
  Status MemoryFailed(const Status& s) REQUIRES(mu_) {
    crashed_ = true;
    return Err(ErrorCode::kCrashed, "rank " + Rank() + ": live memory failed: " + s.ToString());
  }
  void TouchBytes(uint32_t param, size_t offset, size_t len) REQUIRES(mu_) {
    hash_[param].Touch(offset, len);
    DeclareBytes(param, offset, len);
  }
  // The active transaction changes bytes [offset, offset + len) of `param` (verify all skips
  // their chunks when comparing with the committed digests).
  void DeclareBytes(uint32_t param, size_t offset, size_t len) REQUIRES(mu_) {
    if (!active_ || len == 0) return;
    auto& d = active_->declared_chunks[param];
    if (d.empty()) d.assign(hash_[param].num_chunks(), false);
    const size_t last = std::min((offset + len - 1) / kHashChunkBytes, d.size() - 1);
    for (size_t c = offset / kHashChunkBytes; c <= last; ++c) d[c] = true;
  }
  // Before a declared change to bytes [offset, offset + len) of `param`: under verify all, on a
  // rank comparable with its committed version, the chunks it covers in part are saved and
  // checked, so that their undeclared bytes are compared at prepare (chunks_before_declare.h).
  Status CheckBeforeDeclare(uint32_t param, size_t offset, size_t len) REQUIRES(mu_) {
    if (!active_ || len == 0 || active_->req.verify != VerifyMode::kAll) return Status::OK();
    if (active_->interrupted || active_->dirty_at_begin || !loaded_ || !committed_chunks_known_) {
      return Status::OK();
    }
    auto& d = active_->declared_chunks[param];
    if (d.empty()) d.assign(hash_[param].num_chunks(), false);
    Status s = active_->partly_declared.BeforeDeclare(*memory_, param, offset, len, d,
                                                      committed_chunks_[param]);
    return s.ok() ? s : MemoryFailed(s);
  }
  struct Target {
    uint32_t param;
    std::optional<uint32_t> shard;
    Box box;
    std::string where;  // "'w' shard 's0'"
  };
  // Resolves and checks a box of a parameter or shard (unknown names, dimensions, emptiness,
  // range): what a write and a reservation share.
  // `scope(param)` runs after the names resolve, before the box checks.
  Result<Target> ResolveBox(const std::string& param, const std::string& shard,
                            const std::optional<Box>& box,
                            const std::function<Status(uint32_t)>& scope) const;
  Status CheckInScope(const ActiveTx& tx, uint32_t param) const;
  // Elements this transaction already wrote or reserved.
  static bool OverlapsDeclared(const ActiveTx& tx, uint32_t param, int64_t begin, int64_t len) {
    const auto& c = tx.coverage[param];
    const auto& r = tx.reserved[param];
    return (c && c->Overlaps(begin, len)) || (r && r->Overlaps(begin, len));
  }
  Status PatchLocked(const PatchRequest& req) REQUIRES(mu_);
  // A patch by piece's own checks: no parts, box inside the source, every index inside the
  // box, no overlap with an earlier piece where this rank holds it.
  Status CheckPatchPiece(const PatchRequest& req, const PatchState& ps,
                         const std::vector<ShardRef>& refs) const REQUIRES(mu_);
  // Landed: digests of the chunks `landing` covers whole, computed now from the live bytes
  // (host memory directly, device memory through its ChunkDigests kernel); the chunks it
  // covers in part stay touched for prepare.
  // background: hand the whole chunks to data_pool_ when there is one.
  Status HashLanded(const Landing& landing, bool background) REQUIRES(mu_);
  // Hashes now the chunks that bytes [offset, offset + len) of `param`, just stored, cover
  // whole (host memory directly, device memory through its ChunkDigests kernel); the chunks
  // covered in part stay touched for prepare.
  Status HashWritten(uint32_t param, size_t offset, size_t len) REQUIRES(mu_);
  // Waits for the background hashes of landed chunks (data_pool_) and installs them in the
  // hash caches. Called before anything reads the caches or may change landed bytes: prepare,
  // decide, verify, reattach.
  void DrainLandingHashes() REQUIRES(mu_);
  // Rehashes every chunk of the live bytes, installs the digests in the hash caches and, when
  // `committed` is not null, compares the chunks `tx` did not declare (all when tx is null)
  // with it. Chunks `tx` declared whose digest was taken when the write or landing was
  // declared (a whole chunk copied by Write, or landed) are compared with that digest: a
  // change since is undeclared too, committed digests or not. Fills *report (comparable =
  // committed != null).
  Status VerifyLiveLocked(const ActiveTx* tx, const std::vector<std::vector<uint64_t>>* committed,
                          VerifyReport* report) REQUIRES(mu_);
  // Logs (synced) that undeclared changes were found: the rank is durably dirty.
  Status LogUndeclared(const VerifyReport& report) REQUIRES(mu_);
  // The committed chunk digests: in memory since the last commit, else from the journal's
  // CHUNKS record of the committed transaction. Also returns that transaction's PREPARED
  // digest. nullopt chunks: none stored (a journal from before CHUNKS records).
  Status LoadCommitted(std::optional<std::vector<std::vector<uint64_t>>>* chunks,
                       std::string* rank_digest) REQUIRES(mu_);
  Status SaveBefore(uint32_t param, size_t offset, size_t len) REQUIRES(mu_);
  Status RestoreBefore() REQUIRES(mu_);
  bool Serving() const REQUIRES(mu_);
  // Why the rank does not serve, as wtx_held_info's reason (empty when it serves).
  std::string HeldReason() const REQUIRES(mu_);
  // The gauges of the rank's metrics now.
  metrics::RankGauges MetricsGauges() const REQUIRES(mu_);
  // Live bytes may differ from the committed version. Outside a transaction: the durable
  // flag. Inside one this process knows exactly: dirty before it began, or it wrote (the
  // journal, whose WRITE records are batched, conservatively says dirty from BEGIN on).
  bool DirtyLocked() const REQUIRES(mu_) {
    if (active_) return active_->dirty_at_begin || active_->wrote;
    return state_.dirty;
  }
  void UpdateCoveragePeak() REQUIRES(mu_);
  // Every change of live bytes of parameter `p` calls this: it orders the write against
  // refreshes (staleness) and remembers a rollback transaction's first write of `p`.
  void NoteWritten(uint32_t p) REQUIRES(mu_) {
    param_epoch_[p] = ++epoch_;
    if (active_ && !active_->first_write_epoch.empty() && active_->first_write_epoch[p] == 0) {
      active_->first_write_epoch[p] = epoch_;
    }
  }
  // The end of `tx` in the rank's metrics: bytes not yet counted, the outcome, the abort this
  // rank's no vote caused, and Decide's time since `t0` as the commit or restore phase.
  void EndMetrics(const ActiveTx& tx, Decision decision, bool restored,
                  std::chrono::steady_clock::time_point t0) REQUIRES(mu_);
  // After a restoring abort: the live bytes of every parameter are those at begin again.
  void RestoreEpochs(const ActiveTx& tx) REQUIRES(mu_);

  ParticipantOptions options_;
  // The rank's series (docs/observability.md); set by Init, never reassigned.
  std::unique_ptr<metrics::RankMetrics> metrics_;
  // Bytes of the active transaction already counted in wtx_bytes_written_total.
  mutable int64_t metrics_bytes_reported_ GUARDED_BY(mu_) = 0;
  ParticipantHooks hooks_;  // src/txn/test_hooks.h
  ManifestPtr manifest_;
  std::shared_ptr<LiveMemory> memory_;
  bool host_memory_ = true;  // memory_->HostAddressable(): copy and hash in one pass here
  std::unique_ptr<Journal> journal_;
  mutable std::mutex mu_;
  // The journal's state as of its last record (what journal_->state() encodes).
  ParticipantState state_ GUARDED_BY(mu_);
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
  // Per derived state: the sources a restoring abort put back under a copy the engine had
  // recomputed from the aborted bytes (non-empty: stale until refreshed).
  std::vector<std::vector<std::string>> derived_restored_ GUARDED_BY(mu_);
  // Batched WRITE/PATCH/REFRESH/RESERVE/LANDED/CHUNKS records, typed until appended.
  std::vector<ParticipantRecord> pending_ GUARDED_BY(mu_);
  size_t coverage_peak_bytes_ GUARDED_BY(mu_) = 0;
  // Chunk digests of the committed version, per parameter, when known in this process (set at
  // commit and by Reattach; empty otherwise).
  std::vector<std::vector<uint64_t>> committed_chunks_ GUARDED_BY(mu_);
  bool committed_chunks_known_ GUARDED_BY(mu_) = false;
  // Processed parameters (ParamSpec::served): the checkpoint digest of the committed version,
  // when known in this process (set at commit, and from the journal's CHUNKS record by
  // LoadCommitted); nullopt otherwise and for the other parameters.
  std::vector<std::optional<uint64_t>> checkpoint_digest_ GUARDED_BY(mu_);
  // Identity (storage_identity.h): the resolver (null: nothing moves), the storage each
  // parameter is bound to, and what the resolver said of those found moved (not rebound yet).
  std::shared_ptr<StorageResolver> resolver_;
  std::vector<uint32_t> all_params_;  // 0 .. params - 1, for the checks of every parameter
  std::vector<ParamStorage> bound_ GUARDED_BY(mu_);
  std::vector<std::optional<ParamStorage>> moved_ GUARDED_BY(mu_);
  size_t moved_count_ GUARDED_BY(mu_) = 0;
  std::optional<std::string> hold_ GUARDED_BY(mu_);  // SetHold's reason
  // Rebind adopted new storage since the bytes were last known (a full commit or a reattach):
  // Verify is then a Reattach.
  bool rebound_ GUARDED_BY(mu_) = false;
  // Host memory with more than one data-path thread (ParticipantOptions::threads,
  // landing_hash_threads): copies the whole chunks of a large Write with the caller, and hashes
  // landed chunks in the background (HashLanded submits, DrainLandingHashes installs). Declared
  // last: destroyed (joined) first, while the live memory its jobs read is still alive.
  std::unique_ptr<ChunkHashPool> data_pool_;
};

}  // namespace wtx::participant_internal
