// ResolveFromDecisionLog: how a rank resolves the transaction it holds without any coordinator
// (docs/protocol.md, "Ranks that resolve themselves"). The TCP rank agent calls it while no
// coordinator answers; the Python module exposes it for ranks on other transports.
//
// Contract: with no transaction active on `participant`, nothing happens (nullopt). Otherwise
// the decision `log` holds on it is applied; when there is none, the rank writes an abort by the
// log's exactly-once leaderless write (DecisionLog::DecideIfLeaderless: it can win only if no
// coordinator decided and none leads) and applies whichever decision holds. Returns the
// decision applied. E_TX_ACTIVE while a coordinator leads (it decides; ask again later);
// E_DECISION_LOG_UNAVAILABLE when the log has no quorum (nothing decided, the rank stays in
// doubt and does not serve).
//
// Thread-safety: as the participant's and the log's methods.
#pragma once

#include <optional>

#include "wtx/decision_log.h"
#include "wtx/participant.h"

namespace wtx {

Result<std::optional<LoggedDecision>> ResolveFromDecisionLog(Participant& participant,
                                                             DecisionLog& log, int rank);

}  // namespace wtx
