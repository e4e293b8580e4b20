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
//
// Thread-safety: all methods are safe to call from several threads; calls are serialized by
// an internal mutex.
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
#include "wtx/protocol.h"
#include "wtx/status.h"

namespace wtx {

// What a participant asks the coordinator when it finds itself in doubt.
class DecisionOracle {
 public:
  virtual ~DecisionOracle() = default;
  // The logged decision for `tx` and its version; presumed abort when none was logged.
  virtual Result<std::pair<Decision, std::string>> QueryDecision(const std::string& tx) = 0;
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
};

// One write: bytes for a box of a parameter, in the parameter's dtype, row-major over the box.
struct WritePiece {
  std::string param;
  std::string shard;        // empty: whatever shards the box covers
  std::optional<Box> box;   // live coordinates; default: the shard's box, or the whole param
  const void* data = nullptr;
  size_t bytes = 0;
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
};

class Participant {
 public:
  // Opens (creating if needed) the journal and recovers: a prepared transaction without an
  // outcome is in doubt; an unprepared one is aborted; live bytes start zeroed (loaded=false).
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
  // The engine recomputed derived state `name` ("*": every stale one). Returns the names.
  virtual Result<std::vector<std::string>> Refresh(std::string_view name) = 0;
  virtual void SetKernelIdentity(std::string identity) = 0;
  // Local checks, version digest, PREPARED (synced before a yes), vote.
  virtual Result<Vote> Prepare(std::string_view tx) = 0;
  // Prepare's local checks alone (coverage, stale derived state, kernel identity): the vote
  // Prepare would cast now, without its digest. Hashes, logs and changes nothing; for progress
  // reports and benchmarks.
  virtual Result<Vote> CheckPrepare(std::string_view tx) const = 0;
  virtual Status Decide(std::string_view tx, Decision decision, std::string_view version) = 0;
  // If in doubt, asks `oracle` and applies the answer.
  virtual Status ResolveInDoubt(DecisionOracle& oracle) = 0;

  virtual RankStatus status() const = 0;
  virtual const Manifest& manifest() const = 0;
  // REQUIRES: no concurrent Write/Patch while the caller uses the bytes.
  virtual LiveMemory& memory() = 0;
  // Recomputes this rank's digest from the live bytes, bypassing caches. IOError when the live
  // memory cannot be read (a device error).
  virtual Result<std::string> RecomputeDigest() = 0;
  // Peak bytes of coverage bookkeeping held by the current/last transaction.
  virtual size_t CoverageMemoryBytes() const = 0;
};

}  // namespace wtx
