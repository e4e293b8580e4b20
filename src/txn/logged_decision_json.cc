#include "src/txn/logged_decision_json.h"

namespace wtx {

nlohmann::json LoggedDecisionToJson(const LoggedDecision& d) {
  nlohmann::json j = {{"tx", d.tx},         {"decision", std::string(DecisionName(d.decision))},
                      {"reason", d.reason}, {"writer", d.writer},
                      {"epoch", d.epoch},   {"time_micros", d.time_micros},
                      {"ended", d.ended}};
  if (d.decision == Decision::kCommit) {
    j["version"] = d.version;
    j["served_digest"] = DecidedVersion(d.version, d.served_digest).served();
  }
  if (d.prepare_us) j["prepare_us"] = *d.prepare_us;
  if (!d.lineage.empty()) j["lineage"] = d.lineage;
  if (d.step) j["step"] = *d.step;
  if (!d.votes.empty()) {
    nlohmann::json votes = nlohmann::json::array();
    for (const LoggedVote& v : d.votes) votes.push_back(LoggedVoteToJson(v));
    j["votes"] = std::move(votes);
  }
  return j;
}

nlohmann::json LoggedVoteToJson(const LoggedVote& v) {
  nlohmann::json j = {{"rank", v.rank}, {"vote", v.vote}};
  if (!v.error.empty()) j["error"] = v.error;
  return j;
}

}  // namespace wtx
