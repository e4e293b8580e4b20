// Journal reader: the audit history a participant's or the coordinator's journal holds, typed
// (the data `wtx log` and `wtx show` print), the records of one transaction, the stored state
// (`wtx status`), a replay from the records (`wtx replay`), and the integrity check behind
// `wtx check`.
//
// Contract: every function opens the journal directory read-only (safe beside the process that
// writes it) and never modifies it. The Read*/Replay* functions verify the journal first
// (VerifyJournal, then a replay-equals-stored-state check) and refuse a journal that fails
// with kJournalCorrupt naming what is wrong, so corrupt history is never returned as data;
// kNotFound when the directory holds no journal.
//
// Thread-safety: pure functions of the files; concurrent calls are safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "wtx/decision_log.h"
#include "wtx/protocol.h"
#include "wtx/status.h"

namespace wtx {

// Who a journal belongs to.
struct JournalOwner {
  std::string role;  // "participant" or "coordinator"
  int rank = -1;     // participants only
  bool operator==(const JournalOwner&) const = default;
};

// What a participant's transaction wrote: counted from its WRITE and PATCH records while it
// is active, the participant's own coverage summary once it prepared.
struct TxCoverageSummary {
  int64_t pieces = 0;    // write pieces
  int64_t patches = 0;   // patch parts
  int64_t elements = 0;  // elements written
  int64_t bytes = 0;     // bytes written
  int64_t shards = 0;    // shards touched (once prepared)
  int64_t missing = 0;   // required elements not written (once prepared)
};

// LoggedVote (one rank's vote as the coordinator logged it): wtx/decision_log.h.

// One transaction, in order of first appearance in the journal.
struct HistoryEntry {
  std::string tx;
  int64_t time_micros = 0;  // when it began (participant) or was decided
  // Participant: "active", "prepared", "committed", "aborted" or "noop";
  // coordinator: "committed", "aborted" or "noop".
  std::string outcome;
  std::optional<std::string> version;         // committed: the version
  std::optional<std::string> served_digest;   // committed: its served digest (two digests)
  std::string reason;                         // why it aborted ("" otherwise)
  std::string lineage;                        // the lineage it commits a step of ("" if none)
  std::optional<int64_t> step;                // that step (nullopt: none named or recorded)
  std::map<std::string, int64_t> timings_us;  // per phase ("prepare", "total", ...)

  // Participant journals.
  std::optional<TxKind> kind;
  std::optional<std::string> base;   // partial/delta: the base version
  std::vector<std::string> modules;  // partial: modules in scope
  std::vector<std::string> sources;  // delta: sources patched
  bool rollback = false;
  TxCoverageSummary coverage;
  std::vector<std::string> refreshed;  // derived states refreshed
  std::optional<std::string> vote;     // "yes" / "no" once prepared
  std::string message;                 // the error message behind `reason`, if any
  std::optional<bool> dirty_after;     // the dirty flag the outcome left

  // Coordinator journals.
  std::optional<Decision> decision;
  std::vector<LoggedVote> votes;
  bool acknowledged = false;  // every rank heard the decision

  std::string json;  // the whole entry as JSON text (`wtx log --json` prints these)
};

// An event record: a fact about the process rather than a transaction.
struct JournalEvent {
  std::string type;  // "ACCEPTED_UNVERIFIED": started on a journal without a valid watermark
  int64_t time_micros = 0;
  std::string detail;  // what was missing
};

struct JournalHistory {
  JournalOwner owner;
  uint64_t records = 0;
  std::vector<HistoryEntry> entries;
  std::vector<JournalEvent> events;   // in journal order
  std::vector<std::string> warnings;  // verification warnings (a torn unsynced tail)
};

Result<JournalHistory> ReadJournalHistory(const std::string& dir);

// What a rank served at one moment, as its journal tells it (docs/fleet.md, "Serving
// intervals"): a committed version serves from its commit until the next transaction begins
// (an open update holds the rank), and again after a noop or an abort that left the rank clean;
// an abort that left it dirty serves nothing until a full update commits. A process restart
// that lost the bytes is not a record: the journal's answer is what wtx vouched for.
struct ServedAt {
  int64_t at_micros = 0;
  bool serving = false;
  std::optional<std::string> version;        // the committed version then (served or held)
  std::optional<std::string> served_digest;  // its served digest
  std::optional<std::string> committed_tx;
  std::string lineage;
  std::optional<int64_t> step;
  std::string reason;                   // why it did not serve; "" when it did
  int64_t since_micros = 0;             // when this state began (0: the journal's start)
  std::optional<int64_t> until_micros;  // when it ended; nullopt: it lasts to the journal's end
};
// kInvalidArgument for a coordinator's journal (it serves nothing).
Result<ServedAt> ServedAtTime(const JournalHistory& history, int64_t at_micros);

// One stored record (`wtx show` prints them under "records").
struct StoredRecord {
  std::string type;  // "BEGIN", "WRITE", "PREPARED", "DECISION", ...
  std::string tx;    // the transaction it belongs to
  std::string json;  // the whole record as JSON text
};

struct JournalTxRecords {
  std::vector<StoredRecord> records;  // in journal order; empty when `tx` never appears
  std::vector<std::string> warnings;  // verification warnings (a torn unsynced tail)
};

// The records of transaction `tx`, in journal order.
Result<JournalTxRecords> ReadJournalRecords(const std::string& dir, const std::string& tx);

// The state the journal stores (`wtx status`).
struct JournalState {
  JournalOwner owner;
  uint64_t records = 0;
  // Participant journals (the process's state as of its last record; the live bytes of a
  // running process are not in the journal).
  std::optional<std::string> version;        // last committed version
  std::optional<std::string> served_digest;  // its served digest (the version's where equal)
  std::optional<std::string> committed_tx;   // the transaction that committed it
  bool dirty = false;                        // from BEGIN to a clean commit
  bool loaded = false;
  std::optional<std::string> active_tx;  // begun, not decided
  std::optional<std::string> in_doubt;   // active and voted yes
  bool serving = false;                  // loaded, clean, committed and not in doubt
  std::string model;                     // the manifest fingerprint the journal belongs to
  std::string lineage;                   // its lineage ("" until one is named)
  std::optional<int64_t> step;           // the step of the committed version
  // Coordinator journals.
  int64_t decisions = 0;              // decisions logged
  std::vector<std::string> pending;   // decided, not yet acknowledged by every rank
  std::vector<std::string> warnings;  // verification warnings
};

Result<JournalState> ReadJournalState(const std::string& dir);

// The state rebuilt from the records alone (`wtx replay`), beside the stored one.
struct JournalReplay {
  uint64_t records = 0;
  std::string state_json;  // the replayed state as JSON text
  bool matches_stored_state = false;
  std::vector<std::string> warnings;
};

Result<JournalReplay> ReplayJournal(const std::string& dir);

struct JournalVerifyOptions {
  // Who the journal must belong to; nullopt: inferred from the directory name when it is
  // "rank-N" or "coordinator", otherwise not checked.
  std::optional<JournalOwner> expect;
  // Warnings (torn unsynced tail, missing sync watermark) count as corruption.
  bool strict = false;
  // Called as the records are replayed (every 4096 and at the end) with (records replayed,
  // records in the journal): `wtx check`'s progress. May be empty.
  std::function<void(uint64_t replayed, uint64_t total)> on_record;
};

struct JournalVerification {
  // OK; kJournalCorrupt naming what is wrong; kNotFound when `dir` holds no journal at all.
  Status status;
  std::vector<std::string> warnings;
  JournalOwner owner;          // as stored (empty role when unreadable)
  bool owner_checked = false;  // compared with an expected owner
  uint64_t records = 0;
  std::optional<uint64_t> synced_through;  // the sync watermark: last record known durable
  bool torn_tail = false;                  // an incomplete unsynced last record was dropped
};

// What `wtx check DIR [--strict]` reports (files, checksums, chain, replay, identity; see
// docs/journal-format.md and docs/crash-safety.md).
JournalVerification VerifyJournal(const std::string& dir, const JournalVerifyOptions& options = {});

}  // namespace wtx
