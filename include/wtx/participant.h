// Participant: one rank of an inference engine taking part in journaled weight-update
// transactions. It owns (or borrows) the live parameter bytes, records exactly which elements
// each transaction wrote, tracks derived-state staleness, computes the content version, and
// keeps its journal.
//
// Contract (DESIGN.md): begin -> write*/patch*/refresh* -> prepare (vote) -> decide.
//  * A rank becomes dirty before its first live byte changes (the synced BEGIN record makes an
//    interrupted transaction count as dirty on recovery) and becomes clean only when a
//    transaction that wrote bytes commits on a clean base (or is a full commit). An empty
//    transaction never cleans anything; an abort after writes leaves the rank dirty unless
//    before-images (rollback) restored the bytes.
//  * Serving is allowed only when loaded, clean, committed, not in doubt, and no derived
//    state is stale.
//  * Every failing call returns its error and changes nothing.
//  * Live memory is never zeroed at Open: borrowed bytes (the engine's own tensors) are left as
//    they are; only participant-owned buffers start zeroed. Either way the rank starts
//    loaded=false; Reattach() brings borrowed bytes that survived a restart back to serving.
//
// In-place landings (Reserve / Landed): the engine fills a region of its live tensor itself
// (an NCCL broadcast into the tensor, a CUDA-IPC copy, an RDMA write) instead of handing the
// bytes to Write.
//  * Before the first byte of the region changes, the engine calls Reserve(region) and waits
//    for it to return OK. Reserve checks the region exactly like a Write (scope, range, overlap
//    with what this transaction already wrote or reserved: E_DUPLICATE_WRITE), saves
//    before-images when the transaction has rollback, marks the region's hash chunks touched
//    and makes the rank dirty (durably: the synced BEGIN record already makes an interrupted
//    transaction dirty on recovery). It returns where to write: one Reservation per parameter
//    (host address and/or device address of the parameter's first byte, and the resolved live
//    box). On error nothing was reserved and the engine must not write.
//  * Between Reserve and Landed the engine may write the reserved bytes any number of times,
//    in any order, from any thread or stream; it must not write outside them. Other wtx calls
//    (Write, Patch, more Reserves) may interleave. The bytes are not read by wtx before
//    Landed, so the transfer must be complete (stream synchronized) before Landed is called.
//  * Landed(region), with the region as reserved, records the region as coverage and hashes,
//    from live memory, every hash chunk the region covers whole (while the transfer most
//    likely left the bytes in cache; on device memory with the device's kernel; under verify
//    "touched", a large landing, or any with ParticipantOptions::landing_hash_threads, on the
//    participant's data-path threads, Landed not waiting);
//    chunks it covers only in part are rehashed from live memory at Prepare. A region
//    reserved but never landed is E_COVERAGE_INCOMPLETE at prepare, naming it.
//  * After Landed the region's bytes are final for this transaction: a later change (without
//    another declared write) is an undeclared write. verify "touched" (the default) trusts the
//    declaration, as it trusts that undeclared chunks did not change: the version describes
//    the bytes as landed, and the next Verify() or verify "all" finds the difference. A
//    verify "all" prepare rehashes every chunk and votes no with E_UNDECLARED_WRITE naming a
//    chunk that changed after its landing (or after a Write that covered it whole).
//  * Abort: with rollback the before-images are restored (whatever the engine had written);
//    without, the rank stays dirty (its bytes are mixed) until a full commit.
//  * Delta transactions land patches only through Patch; Reserve on a shard whose packed layout
//    is not a translation of the source is E_LAYOUT_MISMATCH; a delta Reserve is E_OUT_OF_SCOPE.
//
// Thread-safety: all methods are safe to call from several threads; calls are serialized by
// an internal mutex (Landed hashes under it). With more than one data-path thread
// (ParticipantOptions::threads, landing_hash_threads) the participant owns threads that copy a
// Write's chunks while that Write waits for them, and read landed bytes; they are joined when
// it is destroyed.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wtx/env.h"
#include "wtx/live_memory.h"
#include "wtx/manifest.h"
#include "wtx/metrics.h"
#include "wtx/protocol.h"
#include "wtx/status.h"
#include "wtx/storage_identity.h"

namespace wtx {

// What a participant asks the coordinator when it finds itself in doubt.
class DecisionOracle {
 public:
  virtual ~DecisionOracle() = default;
  // The logged decision for `tx` and its version (and served digest); presumed abort when
  // none was logged.
  virtual Result<std::pair<Decision, DecidedVersion>> QueryDecision(const std::string& tx) = 0;
};

struct ParticipantOptions {
  int rank = 0;
  std::string journal_dir;
  Env env;
  std::string kernel_identity;
  // Upper bound on before-image bytes a rollback transaction may need; checked at begin.
  size_t rollback_budget_bytes = size_t{1} << 30;
  // Where the live bytes are (live_memory.h; a GPU: device_live_memory.h). Null: zeroed host
  // buffers owned by the participant. Sizes must match the manifest (checked at Open).
  std::shared_ptr<LiveMemory> memory;
  // Threads of the data path on host live memory: a Write of a large region (at least 512 KiB
  // of whole 64 KiB hash chunks) is copied and hashed by the calling thread and threads - 1
  // threads of this participant together (each chunk in one pass: streaming stores, the hash
  // computed from the same loads), and Landed hands a landing that covers at least 1 MiB of
  // whole chunks to those threads and returns at once, so the engine's next transfer overlaps
  // the hashing; prepare, decide and Verify wait for them, so prepare only combines digests.
  // 0 (default): one per core (std::thread::hardware_concurrency); where several ranks share
  // a host, give each its share of the cores. 1: everything in the calling thread. The threads
  // start at the first such copy or landing. In [0, 256], else Open fails with kInvalidArgument.
  // The trade of background hashing, under verify "touched" only: a landed byte the engine changes
  // again before a thread has read it is hashed as changed, so the version describes it and a later
  // Verify() does not report it. Under verify "all" Landed always hashes in the calling thread
  // (that prepare rehashes every chunk anyway), so a change after Landed is always caught. Ignored
  // for device memory.
  int threads = 0;
  // Host live memory: N in [1, 256]: at least N threads as above, and every landing, whatever
  // its size, is hashed by them (Landed returns at once). 0 (default): as `threads` says.
  // Out of range: Open fails with kInvalidArgument.
  int landing_hash_threads = 0;
  // Start on a journal that has records but no valid sync watermark (both copies lost or
  // damaged: synced records may have been lost without a trace), which Open otherwise refuses
  // with kJournalCorrupt. The operator's decision (`wtx rank --accept-unverified-journal`);
  // it is logged in the journal as an ACCEPTED_UNVERIFIED record.
  bool accept_unverified_journal = false;
  // Where the engine's parameters are now (storage_identity.h): consulted at every phase, so
  // that a parameter the engine rebound, shrank or freed is refused (E_STORAGE_MOVED) instead
  // of written or vouched for. Null: the live memory never moves (owned memory, or borrowed
  // buffers their owner keeps in place). At Open it must resolve every parameter to the
  // address and at least the size `memory` has for it (else kInvalidArgument).
  std::shared_ptr<StorageResolver> storage_resolver;
  // Extra labels of this rank's metrics (wtx/metrics.h): "replica" and/or "fleet". Anything
  // else fails Open with kInvalidArgument naming the key.
  MetricLabels metric_labels;
  // The lineage (the policy being trained; docs/fleet.md) this journal belongs to. A journal
  // belongs to one lineage and one model (the manifest's fingerprint, recorded when it was
  // created). Open refuses a journal of another model (E_MANIFEST_MISMATCH) or, when `lineage`
  // is set, of another lineage (E_LINEAGE_MISMATCH), naming both, unless `new_lineage`: then
  // the journal starts `lineage` on this model (a LINEAGE record): the old committed version
  // and step are forgotten and nothing serves until a full commit. Empty: the journal's own
  // (a new journal's lineage is named by its first commit's BeginRequest::lineage).
  std::string lineage;
  bool new_lineage = false;
};

// Where a caller's buffer is: host memory, or device memory on the live memory's device (for
// the reference device backend: host memory standing in for device memory).
enum class BufferLocation { kHost, kDevice };

// One write: bytes for a box of a parameter, in the parameter's dtype, row-major over the box.
// The region is named by `param` (and optionally `shard`), or by `source`: the shards fed by
// that source tensor (in `param` only, when given). `box` restricts every form: it must lie in
// the parameter, in the named shard, or in one shard fed by the source (else E_OUT_OF_RANGE).
// A `source` piece without a box covers every shard it feeds, its bytes being those shards'
// boxes one after the other, in manifest order (parameter, then shard).
struct WritePiece {
  std::string param;       // required unless `source` is given
  std::string shard;       // empty: whatever shards the box covers; not with `source`
  std::optional<Box> box;  // live coordinates; default: the shard's box, or the whole param
  const void* data = nullptr;
  size_t bytes = 0;
  // kDevice: `data` is a device address; the copy is device-to-device (device live memory only).
  BufferLocation location = BufferLocation::kHost;
  std::string source = {};  // optional: the region fed by this source tensor
};

// A source tensor's bytes in a file (a safetensors checkpoint's): `offset` is where its first
// byte is in the open file `fd` (read with pread; the descriptor stays the caller's, open for
// the call). `name` names the file in errors. `mapped`, when not null, is the same bytes mapped
// in memory (the checkpoint's mapping): column slices are then read from it in place.
struct SourceFile {
  int fd = -1;
  uint64_t offset = 0;
  std::string name;
  const void* mapped = nullptr;
};

// Part `part` of `parts` of a sparse patch of `source`, at flat indices in source
// coordinates; values[i] (in the dtype of the live parameter the source feeds) goes to
// indices[i].
struct PatchRequest {
  std::string source;
  std::span<const int64_t> indices;
  const void* values = nullptr;
  size_t value_bytes = 0;
  int part = 0;
  int parts = 1;
  // kDevice: the array is in device memory (device live memory only). Device indices are
  // copied to the host for the checks (range, duplicates, source-to-live translation).
  BufferLocation indices_location = BufferLocation::kHost;
  BufferLocation values_location = BufferLocation::kHost;
  // A patch by piece (an M-to-N delta, docs/m2n.md): every change of the elements of this box
  // (source coordinates), which the sender holds; every index must lie inside it. Instead of
  // parts, pieces from any number of senders cover the source: the part of it this rank holds
  // must be covered exactly once (an overlap is E_DUPLICATE_WRITE naming both boxes; a gap is
  // missing coverage at prepare). A piece no shard of this rank intersects changes nothing.
  // part/parts must stay 0/1, and one source takes parts or pieces, not both (E_BAD_WRITE).
  std::optional<Box> source_box = std::nullopt;
};

// What a sender says one piece of an M-to-N update holds (docs/m2n.md): the digest
// (wtx/piece_digest.h) of the elements of `source_box` of `source` it sent.
struct ExpectedPiece {
  std::string source;
  Box source_box;      // source coordinates
  std::string sender;  // names the sender in errors ("trainer rank 3")
  std::string digest;  // PieceDigest of the bytes sent
};

// A region the engine fills itself (Reserve/Landed), in live coordinates.
struct LandingRegion {
  std::string param;       // parameter name (required unless `source` is given)
  std::string shard;       // optional shard id of `param`
  std::string source;      // optional: every shard this rank holds of this source tensor
  std::optional<Box> box;  // optional sub-box (live coordinates of `param`; requires `param`)
  // Optional, with `source`: one piece of the source (source coordinates, as WriteSource's
  // source_box); the region is the part of it each shard of this rank holds (none: an empty
  // reservation, which Landed accepts).
  std::optional<Box> source_box = std::nullopt;
};

// Where to write one reserved box.
struct Reservation {
  std::string param;
  std::string shard;         // the named shard, or empty when the box was given by param/box
  Box box;                   // resolved live box
  uint32_t param_index = 0;  // manifest order
  void* host = nullptr;      // host address of the parameter's first byte, or null (device)
  uint64_t device_ptr = 0;   // device address of the parameter's first byte, or 0 (host)
  size_t param_bytes = 0;    // byte size of the whole parameter
  // With LandingRegion::source_box: the part of the piece this reservation holds, in source
  // coordinates (its extents are `box`'s, after any leading expert-slot dimension); else empty.
  Box source_box;
};

// One run of hash chunks of a parameter whose live bytes differ from the committed digests.
struct ChunkDifference {
  std::string param;
  size_t first_chunk = 0;  // chunks of kHashChunkBytes (content_hash.h)
  size_t chunks = 0;
  Box box;  // live elements those chunks hold (the bounding box of the run)
};

// What Verify / Reattach / a verify-all prepare found.
struct VerifyReport {
  bool ok = false;                  // comparable and every chunk matches
  bool comparable = false;          // committed chunk digests (or digest) were available to compare
  std::vector<std::string> params;  // parameters with differing bytes (manifest order)
  std::vector<Box> boxes;           // differences[i].box, for each difference
  std::vector<ChunkDifference> differences;
  size_t chunks_checked = 0;
  size_t chunks_differing = 0;
  std::string message;  // one line for humans, naming what differs
};

class Participant {
 public:
  // Opens (creating if needed) the journal and recovers: a prepared transaction without an
  // outcome is in doubt; an unprepared one is aborted. Live bytes are not touched (borrowed
  // memory keeps its contents; owned buffers start zeroed); the rank starts loaded=false.
  static Result<std::unique_ptr<Participant>> Open(ParticipantOptions options,
                                                   ManifestPtr manifest);
  virtual ~Participant() = default;

  virtual RankDescription Describe() const = 0;
  // Would Begin(req) succeed? Changes nothing.
  virtual Status CheckBegin(const BeginRequest& req) const = 0;
  virtual Status Begin(const BeginRequest& req) = 0;
  // All pieces are checked before any byte lands; on error nothing was written.
  virtual Status Write(std::span<const WritePiece> pieces) = 0;
  virtual Status Patch(const PatchRequest& req) = 0;
  // Write by source name (a checkpoint loader's weight_loader): `data` is the FULL source
  // tensor `source` (its manifest source_shape, row-major, in the dtype of the live parameter
  // it feeds, `bytes` = elements x dtype size). Writes every shard this rank holds of it --
  // TP slices, fused q/k/v and gate/up parts, stacked experts -- slicing each shard's
  // source_box out of `data`, as one Write (all shards checked before any byte lands; on error
  // nothing was written). Returns the number of shards written: 0 when this rank holds none of
  // `source` (nothing is checked against the transaction then, and nothing changes).
  // Errors: kInvalidArgument when `bytes` does not match the source shape and dtype, or the
  // source feeds parameters of different dtypes; otherwise those of Write (E_NO_TX,
  // E_OUT_OF_SCOPE, E_DUPLICATE_WRITE, ...), naming the source.
  virtual Result<int> WriteSource(std::string_view source, const void* data, size_t bytes) = 0;
  // One piece of `source` (an M-to-N update: a trainer rank holds part of a tensor): `data`
  // holds the elements of `source_box`, a box in the source's coordinates (its manifest
  // source_shape), row-major with the box's extents, in the live dtype; `bytes` = its elements
  // x dtype size. Writes the intersection of the piece with every shard this rank holds of
  // `source` -- TP slices, fused q/k/v and gate/up parts, stacked experts, column slices -- as
  // one Write (checked before any byte lands). Returns the number of shard pieces written: 0
  // when no shard of this rank intersects the piece (nothing changes). Coverage stays
  // element-exact across pieces, from any number of senders: a piece overlapping one written
  // earlier in the transaction, where this rank holds the overlap, is E_DUPLICATE_WRITE naming
  // both boxes. Errors: E_OUT_OF_RANGE for a box outside the source or of the wrong rank,
  // E_BAD_WRITE when `bytes` do not match the box, kInvalidArgument for a packed shard the
  // piece covers only in part; otherwise those of Write, naming the source.
  virtual Result<int> WriteSource(std::string_view source, const void* data, size_t bytes,
                                  const Box& source_box) = 0;
  // WriteSource with the source read from a file, in the live parameter's dtype (its manifest
  // source_shape, row-major): every shard that is one contiguous run of the source is read
  // with pread straight into host live memory, several reads in flight on the data-path
  // threads (ParticipantOptions::threads), and its chunks hashed right after each read, from
  // cache; no page of a mapping is touched for it. Column slices are read in place from
  // `file.mapped`, or, without it, from one read of the source into a buffer; into device live
  // memory every shard goes through such a buffer. Errors as WriteSource's, checked before any
  // byte lands. A read that fails once bytes have landed (an I/O error, a file that ends early)
  // is kIOError naming the file, the source and the byte range: the live bytes of the shards
  // being read are then undefined, so the transaction can no longer commit (prepare votes no,
  // E_BAD_WRITE, naming the read) and its abort leaves the rank dirty unless the transaction
  // saves rollback before-images.
  virtual Result<int> WriteSourceFromFile(std::string_view source, const SourceFile& file) = 0;
  // Processed parameters (ParamSpec::served; docs/manifest.md): the checkpoint bytes of
  // `pieces`, host buffers in the parameter's checkpoint dtype and coordinates, pass to the
  // engine's loader, which processes them into the served form, instead of into live memory.
  // Checked and recorded exactly as Write (scope, range, overlap, coverage, the durable dirty
  // flag, derived state), hashed into the parameter's checkpoint digest (the version's), and
  // every live chunk of the parameter is rehashed at prepare (the served digest), after the
  // engine's processing. With rollback, the whole live tensor's before-image is kept. Errors:
  // those of Write; kInvalidArgument for a parameter that is not processed (Write, Reserve or
  // WriteSource it) or a device buffer. Write, Reserve, Patch and ExpectPiece of a processed
  // parameter are refused (E_BAD_WRITE naming it): its live bytes are not checkpoint bytes.
  virtual Status Declare(std::span<const WritePiece> pieces) = 0;
  // Declare by source name: `data` the FULL source tensor, as WriteSource. Returns the number
  // of shards declared (0 when this rank holds none of `source`).
  virtual Result<int> DeclareSource(std::string_view source, const void* data, size_t bytes) = 0;
  // Catch-up from a peer replica (docs/fleet.md) of a processed parameter: `data` its whole
  // served form, read from a peer rank that serves the version this transaction must commit,
  // and `checkpoint_digest` the peer's checkpoint digest of it (CommittedCheckpointDigest),
  // which the served bytes cannot show. Written into live memory and counted as every shard of
  // the parameter; the commit must reproduce the peer's version and served digest
  // (CommitOptions), which proves the bytes. Errors as Write's; kInvalidArgument for a
  // parameter that is not processed (Write it) or `bytes` other than its served size.
  virtual Status AdoptServed(std::string_view param, const void* data, size_t bytes,
                             uint64_t checkpoint_digest) = 0;
  // A processed parameter's checkpoint digest in the committed version, when this process
  // knows it (it committed it, or reattached from a journal that stores it); nullopt for the
  // other parameters.
  virtual std::optional<uint64_t> CommittedCheckpointDigest(uint32_t param) const = 0;
  // The transaction carries a sender's digest of one piece: prepare computes the same digest
  // over the piece's bytes as they landed in live memory, and a difference votes no with
  // E_VERSION_MISMATCH naming the source, the box and the sender. Call it before prepare,
  // before or after the piece is written or landed. The piece must lie inside the source box of
  // one shard of this rank, else it was sent to the wrong rank: E_OUT_OF_RANGE naming it.
  // Errors (nothing recorded): E_NO_TX; kInvalidArgument for a malformed digest or a packed
  // shard; E_OUT_OF_RANGE for a box outside the source or not held here; E_DUPLICATE_WRITE
  // for a piece overlapping one expected earlier, naming both and their senders.
  virtual Status ExpectPiece(const ExpectedPiece& piece) = 0;
  // The engine recomputed derived state `name` ("*": every stale one). Returns the names.
  virtual Result<std::vector<std::string>> Refresh(std::string_view name) = 0;
  // In-place landings: see the file comment. E_NO_TX without a transaction.
  virtual Result<std::vector<Reservation>> Reserve(const LandingRegion& region) = 0;
  // `region` exactly as passed to Reserve. A region never reserved is E_BAD_WRITE, landing
  // it twice E_DUPLICATE_WRITE, each naming it.
  virtual Status Landed(const LandingRegion& region) = 0;
  // On-demand verifier (no transaction may be active: E_TX_ACTIVE): rehashes every chunk of
  // the live bytes (one XXH3 pass) and compares it with the committed chunk digests. A
  // difference on a clean rank makes it durably dirty (stops serving until a full commit) and
  // is reported, naming params and chunks, in an OK result with ok == false. A rank that is
  // dirty, or never committed, is reported not comparable; except after Rebind(), where Verify
  // is Reattach(): an exact match makes the rank clean and loaded again. A moved parameter
  // (CheckStorage) is E_STORAGE_MOVED, never read.
  virtual Result<VerifyReport> Verify() = 0;
  // After reopening over live bytes that survived the restart (borrowed memory): compares them
  // with the committed chunk digests stored in the journal; an exact match marks the rank
  // loaded and clean (durably, a REATTACH record), so it serves again without a reload.
  // Otherwise it stays loaded=false and the report names what differs. Refused while a
  // transaction is active or in doubt (E_TX_ACTIVE).
  virtual Result<VerifyReport> Reattach() = 0;
  // Identity (storage_identity.h). Asks the resolver where every parameter is now: OK when none
  // moved (always, without a resolver); otherwise E_STORAGE_MOVED naming each moved parameter
  // with its old and new address and size, after making the rank durably dirty (a
  // STORAGE_MOVED record, once per change). Every phase runs this check on the parameters it
  // touches; this call runs it on demand.
  virtual Status CheckStorage() = 0;
  // The engine reallocated: adopts its current storage for `params` (every parameter when
  // empty) and returns the parameters whose storage changed (empty: nothing to adopt, nothing
  // logged). Each new storage must be there and hold the parameter's bytes (else
  // E_STORAGE_MOVED naming the parameter and both sizes, nothing adopted). A REBIND record
  // names each parameter, old and new; the rank is then dirty and not loaded: it serves again
  // only after Verify() proves the live bytes equal the committed version (then it is clean, as
  // after Reattach) or a full transaction commits. E_TX_ACTIVE while a transaction is active
  // (abort it first); kInvalidArgument without a resolver or over memory wtx owns.
  virtual Result<std::vector<StorageChange>> Rebind(std::span<const std::string> params) = 0;
  virtual void SetKernelIdentity(std::string identity) = 0;
  // An outside hold (the fleet's staleness gate, wtx/fleet.h): while `reason` is set the rank
  // does not serve (status().serving is false, status().held names the reason), whatever its
  // bytes. nullopt releases it. Changes nothing durable and no transaction: a restarted process
  // starts unheld, and whoever held it (a FleetMember) holds it again until admissible.
  virtual void SetHold(std::optional<std::string> reason) = 0;
  // Local checks, version digest, PREPARED (synced before a yes), vote.
  virtual Result<Vote> Prepare(std::string_view tx) = 0;
  // Prepare's local checks alone (coverage, stale derived state, kernel identity): the vote
  // Prepare would cast now, without its digest. Hashes, logs and changes nothing; for progress
  // reports and benchmarks.
  virtual Result<Vote> CheckPrepare(std::string_view tx) const = 0;
  virtual Status Decide(std::string_view tx, Decision decision, const DecidedVersion& version) = 0;
  // If in doubt, asks `oracle` and applies the answer.
  virtual Status ResolveInDoubt(DecisionOracle& oracle) = 0;

  virtual RankStatus status() const = 0;
  virtual const Manifest& manifest() const = 0;
  // REQUIRES: no concurrent Write/Patch while the caller uses the bytes.
  virtual LiveMemory& memory() = 0;
  // Recomputes this rank's served digest (ServedRankDigest: the live bytes; its checkpoint
  // digest where nothing is processed) from the live bytes, bypassing caches. IOError when the live
  // memory cannot be read (a device error).
  virtual Result<std::string> RecomputeDigest() = 0;
  // Peak bytes of coverage bookkeeping held by the current/last transaction.
  virtual size_t CoverageMemoryBytes() const = 0;
};

}  // namespace wtx
