// The coordinator journal's records, typed: one struct per record type, each with exactly one
// Encode (the JSON object stored as CBOR; the journal adds "seq" and "prev") and one Decode
// (every field validated: kJournalCorrupt naming the record's seq, type and field), and the
// coordinator's state snapshot. docs/journal-format.md lists them.
//
// Record type names appear as strings only in coordinator_records.cc.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "journal/journal.h"
#include "src/txn/event_records.h"
#include "wtx/decision_log.h"
#include "wtx/protocol.h"
#include "wtx/status.h"

namespace wtx {

enum class CoordinatorRecordType { kCreate, kDecision, kEnd, kAcceptedUnverified, kBeginRefused };
std::string_view CoordinatorRecordTypeName(CoordinatorRecordType t);  // "CREATE", ...

// The journal was created.
struct CoordinatorCreateRecord {
  int64_t ts = 0;
};

// One rank's vote as the decision logged it: the public LoggedVote (wtx/decision_log.h), the
// same fields in the journal as in a shared decision log.
using DecisionVote = LoggedVote;

// The decision on a transaction (a commit decision is synced: the commit point).
struct DecisionRecord {
  std::string tx;
  Decision decision = Decision::kAbort;
  std::optional<std::string> version;  // commit: the version
  // commit: the served digest where it differs from the version (absent otherwise, and in
  // journals from before two digests)
  std::optional<std::string> served_digest;
  std::string reason;
  std::vector<DecisionVote> votes;    // decided by collecting votes (absent otherwise)
  std::optional<int64_t> prepare_us;  // timings_us.prepare
  int64_t ts = 0;
  // Who wrote the decision and the writer's leader epoch (a shared decision log: see
  // include/wtx/decision_log.h); absent in journals of the embedded log.
  std::optional<std::string> writer;
  std::optional<int64_t> epoch;
  // The lineage and step (absent where none was named, and in journals from before lineages).
  std::string lineage;
  std::optional<int64_t> step;
};

// Every rank acknowledged the decision on `tx`.
struct EndRecord {
  std::string tx;
  int64_t ts = 0;
};

// One rank's refusal of a begin (rank -1: the coordinator's own check, e.g. a delta source
// no rank holds).
struct RefusedRank {
  int rank = -1;
  std::string code;  // error code name
  std::string message;
};

// A begin was refused (by a rank, or by the comparison of the ranks' manifests): nothing was
// begun anywhere. History only (audit): changes no state.
struct BeginRefusedRecord {
  std::string tx;
  TxKind kind = TxKind::kFull;
  std::vector<RefusedRank> ranks;
  int64_t ts = 0;
};

// ACCEPTED_UNVERIFIED: src/txn/event_records.h (shared with the participant's journal).
using CoordinatorRecord = std::variant<CoordinatorCreateRecord, DecisionRecord, EndRecord,
                                       AcceptedUnverifiedRecord, BeginRefusedRecord>;

nlohmann::json Encode(const CoordinatorCreateRecord& r);
nlohmann::json Encode(const DecisionRecord& r);
nlohmann::json Encode(const EndRecord& r);
nlohmann::json Encode(const BeginRefusedRecord& r);

Result<CoordinatorCreateRecord> DecodeCoordinatorCreate(const nlohmann::json& r);
Result<DecisionRecord> DecodeDecision(const nlohmann::json& r);
Result<EndRecord> DecodeEnd(const nlohmann::json& r);
Result<BeginRefusedRecord> DecodeBeginRefused(const nlohmann::json& r);
// The one decode entry point.
Result<CoordinatorRecord> DecodeCoordinatorRecord(const nlohmann::json& r);

// The coordinator's state: decisions logged, and those not yet acknowledged by every rank.
struct CoordinatorState {
  uint64_t decisions = 0;
  std::vector<std::string> pending;  // sorted

  bool operator==(const CoordinatorState&) const = default;
};
// {"decisions": N, "pending": [tx...]} (the journal adds seq/head).
nlohmann::json EncodeCoordinatorState(const CoordinatorState& s);
Result<CoordinatorState> DecodeCoordinatorState(const nlohmann::json& j, std::string_view what);

// Advances the coordinator's state by one record: a DECISION adds a pending decision, an END
// acknowledges it.
class CoordinatorReplay {
 public:
  Status Apply(const CoordinatorRecord& r, uint64_t seq);
  Status Apply(const nlohmann::json& r);
  CoordinatorState state() const;

 private:
  uint64_t decisions_ = 0;
  std::map<std::string, bool> pending_;
};

}  // namespace wtx
