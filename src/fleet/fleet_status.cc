// ReadFleetStatus, ServingReplicas, SetFleetPolicy (wtx/fleet.h): one registry read or write
// each.
#include "src/fleet/fleet_registry.h"
#include "src/fleet/fleet_view.h"
#include "wtx/fleet.h"

namespace wtx {

Result<FleetStatus> ReadFleetStatus(const FleetOptions& options) {
  WTX_ASSIGN_OR_RETURN(registry, fleet::Registry::Open(options));
  WTX_ASSIGN_OR_RETURN(contents, registry->Read());
  return fleet::ComputeFleetStatus(options.fleet, contents);
}

Result<std::vector<FleetReplica>> ServingReplicas(const FleetOptions& options,
                                                  std::optional<int64_t> min_step) {
  WTX_ASSIGN_OR_RETURN(status, ReadFleetStatus(options));
  std::vector<FleetReplica> out;
  for (FleetReplica& r : status.replicas) {
    if (r.state != ReplicaState::kServing || !r.step) continue;
    if (min_step && *r.step < *min_step) continue;
    out.push_back(std::move(r));
  }
  return out;
}

Result<FleetPolicy> SetFleetPolicy(const FleetOptions& options, const FleetPolicy& policy) {
  if (policy.max_lag && *policy.max_lag < 0) {
    return Status::InvalidArgument("fleet policy: max_lag " + std::to_string(*policy.max_lag) +
                                   " is negative (0 is strictly on-policy; none is unbounded)");
  }
  if (policy.quorum < 0) {
    return Status::InvalidArgument("fleet policy: quorum " + std::to_string(policy.quorum) +
                                   " is negative (0 is every live replica)");
  }
  WTX_ASSIGN_OR_RETURN(registry, fleet::Registry::Open(options));
  WTX_RETURN_IF_ERROR(registry->PutPolicy(policy));
  return policy;
}

}  // namespace wtx
