#include "src/fleet/fleet_json.h"

namespace wtx::fleet {

namespace {

using nlohmann::json;

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json();
}

}  // namespace

json FleetPolicyToJson(const FleetPolicy& policy) {
  return {
      {"max_lag", OrNull(policy.max_lag)}, {"quorum", policy.quorum}, {"lineage", policy.lineage}};
}

json FleetReplicaToJson(const FleetReplica& r) {
  return {{"replica", r.replica},
          {"lineage", r.lineage},
          {"step", OrNull(r.step)},
          {"version", OrNull(r.version)},
          {"state", ReplicaStateName(r.state)},
          {"lag", OrNull(r.lag)},
          {"reason", r.reason.empty() ? json() : json(r.reason)},
          {"ranks", r.ranks},
          {"world", r.world}};
}

json FleetStatusToJson(const FleetStatus& s) {
  json replicas = json::array();
  for (const FleetReplica& r : s.replicas) replicas.push_back(FleetReplicaToJson(r));
  return {{"fleet", s.fleet},
          {"lineage", s.lineage},
          {"newest_step", OrNull(s.newest_step)},
          {"published_step", OrNull(s.published_step)},
          {"policy", FleetPolicyToJson(s.policy)},
          {"replicas", std::move(replicas)}};
}

}  // namespace wtx::fleet
