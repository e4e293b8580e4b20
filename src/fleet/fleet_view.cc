#include "src/fleet/fleet_view.h"

#include <algorithm>
#include <functional>
#include <map>

namespace wtx::fleet {

namespace {

// The fleet's lineage: the policy's, else the newest step's, else that of the rank with the
// largest step (the first in key order among equals).
std::string FleetLineage(const RegistryContents& c) {
  if (c.policy && !c.policy->lineage.empty()) return c.policy->lineage;
  if (c.newest) return c.newest->lineage;
  const RankRecord* best = nullptr;
  for (const RankRecord& r : c.ranks) {
    if (r.step && (best == nullptr || *r.step > *best->step)) best = &r;
  }
  return best ? best->lineage : std::string();
}

std::optional<int64_t> MaxStep(std::optional<int64_t> a, std::optional<int64_t> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

// One replica from its ranks' records (REQUIRES: non-empty, all of one replica).
FleetReplica Aggregate(const std::vector<const RankRecord*>& ranks) {
  FleetReplica out;
  out.replica = ranks.front()->replica;
  out.ranks = static_cast<int>(ranks.size());
  out.lineage = ranks.front()->lineage;
  out.version = ranks.front()->version;
  out.step = ranks.front()->step;
  std::string why;  // the first reason found, in order of precedence below
  bool mixed_lineage = false;
  bool mixed_version = false;
  bool any_updating = false;
  bool any_catching_up = false;
  std::vector<bool> present;
  for (const RankRecord* r : ranks) {
    out.world = std::max(out.world, r->world);
    mixed_lineage |= r->lineage != out.lineage;
    mixed_version |= r->version != out.version;
    if (!r->step || (out.step && *r->step < *out.step)) out.step = r->step;
    any_updating |= r->state == ReplicaState::kUpdating;
    any_catching_up |= r->state == ReplicaState::kCatchingUp;
    if (why.empty() && r->state != ReplicaState::kServing) {
      why = "rank " + std::to_string(r->rank) + ": " +
            (r->reason.empty() ? std::string(ReplicaStateName(r->state)) : r->reason);
    }
  }
  std::string missing;
  if (out.world > 0) {
    present.assign(static_cast<size_t>(out.world), false);
    for (const RankRecord* r : ranks) {
      if (r->rank < out.world) present[static_cast<size_t>(r->rank)] = true;
    }
    for (int i = 0; i < out.world; ++i) {
      if (!present[static_cast<size_t>(i)])
        missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    }
  }
  if (mixed_lineage) {
    out.lineage.clear();
    out.state = ReplicaState::kHeld;
    out.reason = "its ranks name different lineages";
  } else if (any_catching_up) {
    out.state = ReplicaState::kCatchingUp;
    out.reason = why;
  } else if (any_updating) {
    out.state = ReplicaState::kUpdating;
    out.reason = why;
  } else if (!missing.empty()) {
    out.state = ReplicaState::kHeld;
    out.reason = "rank(s) " + missing + " of " + std::to_string(out.world) +
                 " not registered (a lease ended, or it has not joined)";
  } else if (!why.empty()) {
    out.state = ReplicaState::kHeld;
    out.reason = why;
  } else if (mixed_version) {
    out.state = ReplicaState::kHeld;
    out.reason = "its ranks serve different versions";
  } else {
    out.state = ReplicaState::kServing;
  }
  if (mixed_version) out.version.reset();
  return out;
}

}  // namespace

std::optional<std::string> StalenessHold(const FleetStatus& fleet, const std::string& lineage,
                                         std::optional<int64_t> step) {
  const std::string where = "fleet '" + fleet.fleet + "': ";
  if (!step) {
    // Serving what it loaded itself (the base checkpoint): no step of any lineage. Admissible
    // only while the fleet has no step yet, or no bound.
    if (!fleet.newest_step || !fleet.policy.max_lag) return std::nullopt;
    return where + "no step committed here; the newest is " + std::to_string(*fleet.newest_step) +
           " (max_lag " + std::to_string(*fleet.policy.max_lag) + ")";
  }
  if (!fleet.lineage.empty() && lineage != fleet.lineage) {
    return where + "it serves lineage '" + fleet.lineage + "'; this replica is of '" + lineage +
           "'";
  }
  if (!fleet.newest_step || !fleet.policy.max_lag) return std::nullopt;
  const int64_t lag = *fleet.newest_step - *step;
  if (lag <= *fleet.policy.max_lag) return std::nullopt;
  return where + "step " + std::to_string(*step) + " is " + std::to_string(lag) +
         " behind the newest step " + std::to_string(*fleet.newest_step) + " (max_lag " +
         std::to_string(*fleet.policy.max_lag) + ")";
}

std::optional<int64_t> EarnedPublishedStep(const FleetStatus& fleet) {
  std::vector<int64_t> steps;
  for (const FleetReplica& r : fleet.replicas) {
    if (r.state == ReplicaState::kServing && r.step && r.lineage == fleet.lineage) {
      steps.push_back(*r.step);
    }
  }
  const size_t quorum =
      fleet.policy.quorum > 0 ? static_cast<size_t>(fleet.policy.quorum) : fleet.replicas.size();
  if (quorum == 0 || steps.size() < quorum) return std::nullopt;
  std::sort(steps.begin(), steps.end(), std::greater<>());
  return steps[quorum - 1];
}

FleetStatus ComputeFleetStatus(const std::string& fleet, const RegistryContents& c) {
  FleetStatus out;
  out.fleet = fleet;
  if (c.policy) out.policy = *c.policy;
  out.lineage = FleetLineage(c);
  if (c.newest && c.newest->lineage == out.lineage) out.newest_step = c.newest->step;
  std::map<std::string, std::vector<const RankRecord*>> by_replica;
  for (const RankRecord& r : c.ranks) {
    by_replica[r.replica].push_back(&r);
    if (r.lineage == out.lineage) out.newest_step = MaxStep(out.newest_step, r.step);
  }
  for (const auto& [id, ranks] : by_replica) {
    FleetReplica r = Aggregate(ranks);
    if (r.lineage == out.lineage && r.step && out.newest_step) r.lag = *out.newest_step - *r.step;
    if (r.state == ReplicaState::kServing) {
      if (auto hold = StalenessHold(out, r.lineage, r.step)) {
        r.state = ReplicaState::kHeld;
        r.reason = *hold;
      } else if (!r.step) {
        r.state = ReplicaState::kHeld;
        r.reason = "no step committed";
      }
    }
    out.replicas.push_back(std::move(r));
  }
  std::optional<int64_t> stored;
  if (c.published && c.published->lineage == out.lineage) stored = c.published->step;
  out.published_step = MaxStep(stored, EarnedPublishedStep(out));
  return out;
}

}  // namespace wtx::fleet
