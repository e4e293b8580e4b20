// Protocol vocabulary shared by participants, the coordinator and transports: transaction
// kinds, begin requests, votes, decisions and the status a rank reports.
//
// These are plain values; thread-safety is that of std containers (distinct objects freely).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wtx/box.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

enum class TxKind { kFull, kPartial, kDelta };
std::string_view TxKindName(TxKind kind);
std::optional<TxKind> TxKindFromName(std::string_view name);

// What prepare hashes (DESIGN.md, docs/protocol.md "Verification"):
//  * kTouched: only the hash chunks this transaction wrote, patched or reserved get fresh
//    digests from live memory: those a Write copied whole or a landing covered whole when the
//    Write or Landed happened (participant.h), the others at prepare; every other chunk keeps
//    its cached digest. Cheap, but a byte changed behind wtx's back (an undeclared write,
//    also one into bytes already written or landed) goes unseen.
//  * kAll: every chunk of the rank is rehashed (one XXH3 pass over the live bytes); each chunk
//    the transaction did not touch is compared with the committed chunk digest, and each chunk
//    hashed at its Write or Landed with that digest; any difference votes no with
//    E_UNDECLARED_WRITE and makes the rank durably dirty.
enum class VerifyMode { kTouched, kAll };
std::string_view VerifyModeName(VerifyMode mode);  // "touched", "all"
std::optional<VerifyMode> VerifyModeFromName(std::string_view name);

struct BeginRequest {
  std::string tx;
  TxKind kind = TxKind::kFull;
  std::string base;                  // partial/delta: the committed version required
  std::vector<std::string> modules;  // partial: the modules in scope
  std::vector<std::string> sources;  // delta: the source tensors patched
  // Keep before-images of every byte written; an abort restores them (a full update only where
  // the rank holds a clean committed version to restore to). Bounded by the participant's
  // rollback_budget_bytes at begin.
  bool rollback = false;
  VerifyMode verify = VerifyMode::kTouched;  // what prepare rehashes and compares
  // The lineage (the policy being trained, docs/fleet.md) this transaction's version belongs
  // to. Empty: the rank's own. Another than the rank's is refused (E_LINEAGE_MISMATCH).
  std::string lineage;
  // The step of the lineage this transaction commits. A rank refuses a step at or below the one
  // it committed (E_STEP_REGRESSION), across restarts and coordinators. nullopt: the next step
  // (the coordinator's Begin gives every rank one past the highest any rank or its decision log
  // knows; a participant begun alone takes one past its own).
  std::optional<int64_t> step;
};

// One gap in required coverage. Every {param, shard} with missing coverage has at least one
// piece (nothing is ever cut); a shard with more than kMaxMissingBoxesPerShard gap boxes has
// exactly one piece whose `box` is the bounding box of its gaps, with `boxes` > 1 saying how
// many were merged and `elements` how many elements are really missing. So a vote holds at
// most kMaxMissingBoxesPerShard pieces per shard of the manifest (docs/protocol.md).
inline constexpr int64_t kMaxMissingBoxesPerShard = 4;
struct MissingPiece {
  std::string param;
  std::string shard;
  Box box;                         // live coordinates of what is missing (boxes > 1: their bound)
  std::string source;              // delta: the source whose parts are missing
  std::vector<int> missing_parts;  // delta: part numbers not received
  int parts = 0;                   // delta: n of [k, n]; 0 when no part arrived
  int64_t boxes = 1;               // gap boxes this piece stands for
  int64_t elements = 0;            // missing elements in this piece (exact)
};

struct StaleDerivedState {
  std::string name;
  Phase phase = Phase::kPostLoad;
  std::vector<std::string> written_sources;  // sources written after the last refresh
};

struct Vote {
  int rank = -1;
  std::string tx;
  bool yes = false;
  bool wrote = false;  // this rank changed live bytes in the transaction
  std::string digest;  // yes: this rank's checkpoint digest (hex)
  // yes: this rank's served digest, the live bytes after the engine's post-load processing
  // (equal to `digest` where the manifest processes nothing; "" from wtx before two digests)
  std::string served_digest;
  ErrorCode error = ErrorCode::kOk;  // no: the first failing check
  std::string message;
  std::vector<ErrorCode> errors;      // no: every failing check
  std::vector<MissingPiece> missing;  // never truncated (see MissingPiece)
  size_t missing_total = 0;           // gap boxes missing (the sum of missing[].boxes)
  std::vector<StaleDerivedState> stale;
  // The served digest, "" read as `digest` (one digest: nothing processed, or an older peer).
  const std::string& served() const { return served_digest.empty() ? digest : served_digest; }
};

enum class Decision { kCommit, kAbort, kNoop };

// What a commit decided (Decide, QueryDecision, the decision logs): the checkpoint version
// (the bytes as the trainer sent them, what wtx.expected_version computes, what
// expect_version, delta bases and M-to-N refer to) and the served digest (the live bytes after
// the engine's post-load processing, what verify checks). Equal where nothing processes; both
// "" for an abort or a noop. `served_digest` "" in a commit means "the version" (a decision
// from wtx before two digests).
struct DecidedVersion {
  DecidedVersion() = default;
  // A version alone: its served digest is the version's (nothing processed).
  DecidedVersion(std::string v) : version(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  DecidedVersion(const char* v) : version(v) {}             // NOLINT(google-explicit-constructor)
  DecidedVersion(std::string v, std::string served)
      : version(std::move(v)), served_digest(std::move(served)) {}

  std::string version;
  std::string served_digest;
  const std::string& served() const { return served_digest.empty() ? version : served_digest; }
};
std::string_view DecisionName(Decision d);
// What a transaction decided so became: "committed", "aborted" or "noop" (the history's
// "outcome", wtx_transactions_total's and wtx_decisions_total's outcome label).
std::string_view DecisionOutcomeName(Decision d);
std::optional<Decision> DecisionFromName(std::string_view name);

struct RankDescription {
  int rank = -1;
  std::string fingerprint;
  std::string kernel_identity;
  // The transaction active on the rank, if any, and whether it is prepared (voted yes, in
  // doubt): a coordinator that takes over aborts one nobody decided.
  std::optional<std::string> active_tx;
  bool prepared = false;
  std::string lineage;          // the rank's lineage ("" until one is named)
  std::optional<int64_t> step;  // the step it committed last; nullopt before one
};

struct RankStatus {
  int rank = -1;
  std::optional<std::string> version;  // committed version; nullopt if never committed
  // The served digest of the committed version (DecidedVersion): equal to `version` where
  // nothing processes; nullopt if never committed.
  std::optional<std::string> served_digest;
  std::optional<std::string> committed_tx;
  // This rank's own content digest as of its last commit (Vote::digest); nullopt before one.
  std::optional<std::string> digest;
  bool dirty = false;
  bool loaded = false;
  bool serving = false;
  std::optional<std::string> in_doubt;  // prepared, decision not known
  std::optional<std::string> active_tx;
  std::vector<std::string> stale_derived;
  // Parameters whose storage the engine moved, shrank or freed since wtx was bound to it
  // (storage_identity.h): not served, not touched, until rebound.
  std::vector<std::string> storage_moved;
  std::string lineage;          // the journal's lineage ("" until one is named)
  std::optional<int64_t> step;  // the step of the committed version; nullopt before one
  // Why an outside gate holds this rank (Participant::SetHold: the fleet's staleness gate);
  // nullopt when none does.
  std::optional<std::string> held;
};

}  // namespace wtx
