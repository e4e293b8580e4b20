// The values the etcd decision log stores under its PREFIX, each a JSON object with its own
// "format" and "v" (docs/protocol.md, "Decision log"), and the one encoder and one strict
// decoder of each:
//
//   PREFIX/meta       {"format":"wtx-decision-log","v":1,"created_micros":N}
//   PREFIX/leader     {"format":"wtx-leader","v":1,"holder":"...","lease":"<id>"}
//   PREFIX/tx/<tx>    {"format":"wtx-decision","v":1,"tx":..,"decision":"commit|abort|noop",
//                      "version","reason","writer","epoch","time_micros",["prepare_us"],
//                      "votes":[{"rank","vote","error"}]}
//   PREFIX/end/<tx>   {"format":"wtx-end","v":1}
//   PREFIX/beat       {"format":"wtx-beat","v":1,"epoch":N,"ttl_ms":T}: the leader's heartbeat,
//                     rewritten every renewal while PREFIX/leader is its
//                     (src/txn/etcd_leadership.h)
//
// A decoder accepts exactly what its encoder writes: a value that is not JSON, names another
// format or version, lacks a field, has a field of the wrong type or one it does not know is
// kJournalCorrupt saying what is wrong (the caller names the key and the member).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "wtx/decision_log.h"
#include "wtx/status.h"

namespace wtx {

struct DecisionLogMeta {
  int64_t created_micros = 0;
};

struct LeaderRecord {
  std::string holder;
  int64_t lease = 0;  // the etcd lease the key is attached to
};

std::string EncodeDecisionLogMeta(const DecisionLogMeta& meta);
Result<DecisionLogMeta> DecodeDecisionLogMeta(std::string_view value);

// kInvalidArgument when the holder is not valid UTF-8 (JSON cannot carry it).
Result<std::string> EncodeLeaderRecord(const LeaderRecord& leader);
Result<LeaderRecord> DecodeLeaderRecord(std::string_view value);

// Every field of `d` but `ended` (which is the end key's, not the decision's).
// kInvalidArgument when a text field is not valid UTF-8.
Result<std::string> EncodeDecisionRecord(const LoggedDecision& d);
// Also kJournalCorrupt when the record's "tx" is not `tx` (the key's suffix).
Result<LoggedDecision> DecodeDecisionRecord(std::string_view value, std::string_view tx);

// The leader's heartbeat: its epoch and the TTL its standbys give it.
struct BeatRecord {
  int64_t epoch = 0;
  int64_t ttl_ms = 0;
};
std::string EncodeBeatRecord(const BeatRecord& beat);
Result<BeatRecord> DecodeBeatRecord(std::string_view value);

std::string EncodeEndRecord();
Status DecodeEndRecord(std::string_view value);

// A decoder's error with the key and the member that sent the value: "etcd key 'wtx/tx/a'
// (member 127.0.0.1:2379): not a wtx-decision record: ...". REQUIRES: !status.ok().
Status NameStoredKey(const Status& status, std::string_view key, std::string_view endpoint);

}  // namespace wtx
