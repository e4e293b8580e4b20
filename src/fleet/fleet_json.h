// The JSON form of a FleetStatus (`wtx fleet status --json`, Python's wtx.fleet.status):
// {"fleet", "lineage", "newest_step", "published_step", "policy": {"max_lag", "quorum",
// "lineage"}, "replicas": [{"replica", "lineage", "step", "version", "state", "lag", "reason",
// "ranks", "world"}]}, absent numbers as null.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "wtx/fleet.h"

namespace wtx::fleet {

nlohmann::json FleetPolicyToJson(const FleetPolicy& policy);
nlohmann::json FleetReplicaToJson(const FleetReplica& replica);
nlohmann::json FleetStatusToJson(const FleetStatus& status);

}  // namespace wtx::fleet
