#include "src/txn/resolve_from_log.h"

#include <string>

namespace wtx {

Result<std::optional<LoggedDecision>> ResolveFromDecisionLog(Participant& participant,
                                                             DecisionLog& log, int rank) {
  const RankStatus st = participant.status();
  if (!st.active_tx) return std::optional<LoggedDecision>();
  const std::string tx = *st.active_tx;
  WTX_ASSIGN_OR_RETURN(logged, log.Read(tx));
  LoggedDecision won;
  if (logged) {
    won = std::move(*logged);
  } else {
    LoggedDecision abort;
    abort.tx = tx;
    abort.decision = Decision::kAbort;
    abort.reason = "cooperative abort by rank " + std::to_string(rank) +
                   ": no coordinator could be reached and none leads";
    abort.writer = "rank " + std::to_string(rank);
    abort.time_micros = Clock::Real()->NowMicros();
    WTX_ASSIGN_OR_RETURN(w, log.DecideIfLeaderless(abort));
    won = std::move(w);
  }
  WTX_RETURN_IF_ERROR(participant.Decide(tx, won.decision, {won.version, won.served_digest}));
  return std::optional<LoggedDecision>(std::move(won));
}

}  // namespace wtx
