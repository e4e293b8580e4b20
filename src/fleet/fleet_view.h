// The fleet as its registry holds it, and the rules that make a FleetStatus of it (wtx/fleet.h):
// the fleet's lineage, its newest and published steps, each replica's state, lag and reason,
// and whether a rank's step is admissible under the policy. Pure: the registry (fleet_registry.h)
// reads and writes etcd, the member (fleet_member.cc) acts on what these functions decide.
//
// Thread-safety: pure functions and values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "src/fleet/fleet_records.h"
#include "wtx/fleet.h"

namespace wtx::fleet {

// What one read of PREFIX/fleet/<fleet>/ found.
struct RegistryContents {
  std::optional<FleetPolicy> policy;
  std::optional<StepMark> newest;
  std::optional<StepMark> published;
  std::vector<RankRecord> ranks;  // the live ranks' records, in key order
};

FleetStatus ComputeFleetStatus(const std::string& fleet, const RegistryContents& contents);

// Why a replica of `lineage` serving `step` may not serve in `fleet` (the fleet's lineage, its
// newest step and max_lag); nullopt when it may. A replica without a step (serving what it
// loaded itself) may serve only in a fleet with no step yet, or without max_lag.
std::optional<std::string> StalenessHold(const FleetStatus& fleet, const std::string& lineage,
                                         std::optional<int64_t> step);

// The published step `fleet` has earned from what its replicas serve (the quorum-th largest
// step among the serving replicas of its lineage), ignoring the stored one; nullopt when too
// few serve.
std::optional<int64_t> EarnedPublishedStep(const FleetStatus& fleet);

}  // namespace wtx::fleet
