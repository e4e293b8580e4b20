// The durable state of a participant, typed, and the pure rules that advance it by one journal
// record (participant_records.h). The live participant computes every new state with these
// rules before appending, so replaying the journal from empty rebuilds exactly the stored state.
//
// Every transition is re-derived from the records, the dirty rule included: DecideOutcome is
// the one function that says what a decision leaves (dirty, loaded, before-images restored);
// the live participant calls it in Decide and replay calls it for every OUTCOME record, from the
// state before the decision and the record's facts. An OUTCOME or RESTART record also stores
// what the rule gave its writer (for readers of the record alone and for older wtx): replay
// requires it to equal what the rule derives, and a disagreement is kJournalCorrupt naming the
// record and the field (docs/journal-format.md, "The dirty rule").
//
// Thread-safety: ParticipantReplay is a plain value (one owner); the functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/txn/participant_records.h"
#include "src/util/cbor_writer.h"
#include "wtx/protocol.h"
#include "wtx/status.h"

namespace wtx {

// The transaction a participant's journal says is active (begun, not decided).
struct ActiveTxState {
  std::string tx;
  TxKind kind = TxKind::kFull;
  std::optional<std::string> base;
  std::vector<std::string> modules;
  std::vector<std::string> sources;
  bool rollback = false;
  bool wrote = false;  // a WRITE, an applied PATCH or a RESERVE was logged
  bool prepared = false;
  std::optional<bool> vote_yes;       // once prepared
  std::optional<std::string> digest;  // a yes vote's rank digest
  // Facts the dirty rule needs at the decision.
  bool dirty_at_begin = false;       // the rank's durable dirty flag just before BEGIN
  bool undeclared = false;           // prepare's verifier found undeclared changes (UNDECLARED)
  bool interrupted = false;          // a RESTART came after BEGIN: the live bytes were lost
  std::string lineage = {};          // BEGIN's lineage ("" when it named none)
  std::optional<int64_t> step = {};  // BEGIN's step (nullopt in journals from before steps)
  // A yes vote's rank served digest, where it differs from `digest` (a processed manifest).
  std::optional<std::string> served_digest = {};
  // BEGIN's time (BeginRecord::ts, microseconds since the epoch), so that a transaction left
  // in doubt by a crash reports when it began after the restart; 0 in snapshots from before.
  int64_t begin_ts = 0;

  bool operator==(const ActiveTxState&) const = default;
};

struct ParticipantState {
  int rank = 0;
  std::optional<std::string> version;       // committed version
  std::optional<std::string> committed_tx;  // the transaction that committed it
  std::optional<std::string> digest;        // its rank digest
  // The committed version's served digest, where it differs from `version` (the OUTCOME's).
  std::optional<std::string> served_digest;
  bool dirty = false;   // live bytes may differ from the committed version
  bool loaded = false;  // this process's live bytes are known (a full commit or reattach)
  std::optional<ActiveTxState> active;
  int64_t txs = 0;  // transactions begun
  // What the journal belongs to (docs/fleet.md): the model (its manifest fingerprint, "" for
  // journals created without one) and the lineage ("" until one is named), from CREATE or the
  // last LINEAGE record; and the step of the committed version (nullopt before one, or in
  // journals from before steps).
  std::string model;
  std::string lineage;
  std::optional<int64_t> step;

  bool operator==(const ParticipantState&) const = default;
};

ParticipantState InitialParticipantState(int rank);

// The state snapshot (journal key "s"): {rank, version, committed_tx, digest, dirty, loaded,
// active: null | {tx, kind, base, modules, sources, rollback, wrote, prepared, vote, digest,
// dirty_at_begin, undeclared, interrupted, lineage, step}, txs, model, lineage, step}. The
// journal adds seq/head.
nlohmann::json EncodeParticipantState(const ParticipantState& s);
// The same object as a CborMap: what a participant's Append stores (the same bytes).
CborMap EncodeParticipantStateCbor(const ParticipantState& s);
// kJournalCorrupt naming `what` and the field. A snapshot written before the three facts of the
// active transaction existed decodes with them false and *legacy_facts (if given) set: such a
// transaction is always interrupted at the next open, which makes the facts irrelevant. A
// snapshot written before lineages ("model" absent) sets *legacy_facts too: its model, lineage
// and steps are the replay's.
Result<ParticipantState> DecodeParticipantState(const nlohmann::json& j, std::string_view what,
                                                bool* legacy_facts = nullptr);

// ---- The dirty rule ----

// What the decision on a transaction starts from.
struct OutcomeFacts {
  Decision decision = Decision::kAbort;
  TxKind kind = TxKind::kFull;
  bool rollback = false;        // before-images were kept
  bool dirty_at_begin = false;  // durable dirty flag just before BEGIN
  bool wrote = false;           // live bytes changed (or may have: a reservation)
  bool undeclared = false;      // the verifier found undeclared changes
  bool interrupted = false;     // the deciding process is not the one that began
  bool loaded = false;          // the rank's loaded flag before the decision
};

// What it leaves.
struct OutcomeEffect {
  bool dirty = false;
  bool loaded = false;
  bool restored = false;  // an abort put the before-images back (the live participant does it)

  bool operator==(const OutcomeEffect&) const = default;
};

// DESIGN's dirty rule. Clean only when the live bytes are exactly a committed version: a full
// commit, or a partial/delta commit on the clean base, by a process that kept its bytes from
// BEGIN on. An abort after writes leaves the rank dirty unless the before-images are restored
// (then it is as before BEGIN); an empty or noop transaction gives back the flag of before
// BEGIN; undeclared changes keep it dirty until a full commit; an interrupted transaction
// leaves it dirty whatever the decision. A non-interrupted full commit makes the rank loaded.
OutcomeEffect DecideOutcome(const OutcomeFacts& f);

// The facts of deciding `decision` on the state's active transaction.
// REQUIRES: s.active
OutcomeFacts FactsOf(const ParticipantState& s, Decision decision);

// The dirty flag a RESTART sets: a new process holds no live bytes of the committed version
// (nor of an active transaction) until a full commit or a reattach.
bool DirtyAfterRestart(const ParticipantState& s);

// ---- Replay ----

// Advances a state record by record, in place. A binary WRITE record (ApplyWrite) is applied
// from its transaction id alone: the same rule as a decoded WRITE record. Any error is
// kJournalCorrupt naming the record; after one, the state is unspecified and the replay must
// stop.
class ParticipantReplay {
 public:
  ParticipantReplay() = default;
  // `state`: nullopt (an empty journal) or a participant state.
  explicit ParticipantReplay(std::optional<ParticipantState> state) : state_(std::move(state)) {}

  // Decodes (DecodeParticipantRecord) and applies one JSON record.
  Status Apply(const nlohmann::json& record);
  // Applies a decoded record; `seq` names it in errors.
  Status Apply(const ParticipantRecord& record, uint64_t seq);
  // Applies the WRITE record `seq` of transaction `tx`.
  Status ApplyWrite(uint64_t seq, std::string_view tx);

  const std::optional<ParticipantState>& state() const { return state_; }
  std::optional<ParticipantState> Take() && { return std::move(state_); }

 private:
  std::optional<ParticipantState> state_;
};

// ReplayState's participant half: every record of `journal` from empty.
Result<std::optional<ParticipantState>> ReplayParticipantJournal(const Journal& journal);

// Replay-equals-stored-state for a participant journal: OK, or kJournalCorrupt naming the
// difference.
Status CheckParticipantState(const Journal& journal);

}  // namespace wtx
