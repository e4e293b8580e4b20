// The JSON form of a LoggedDecision (include/wtx/decision_log.h) that `wtx log/show
// --decision-log`, the coordinator's control answers and the Python module print: one place,
// so that every tool shows a decision the same way. Not the stored form (the etcd values are
// encoded in src/txn/decision_log_etcd.cc; the journal's in coordinator_records.cc).
//
// Thread-safety: a pure function.
#pragma once

#include <nlohmann/json.hpp>

#include "wtx/decision_log.h"

namespace wtx {

// {"tx", "decision", "version" (commit only), "reason", "writer", "epoch", "time_micros",
//  "ended", "prepare_us" (when known), "votes": [{"rank", "vote", "error"?}] (when known)}
nlohmann::json LoggedDecisionToJson(const LoggedDecision& d);
// {"rank", "vote", "error" (a "no" vote only)}: one vote, as the forms above and the history
// of a coordinator journal show it.
nlohmann::json LoggedVoteToJson(const LoggedVote& v);

}  // namespace wtx
