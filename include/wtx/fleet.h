// Fleets (docs/fleet.md): many replicas of one model, each one transaction group (the ranks of
// one server, or one data-parallel replica), seen as one versioned system through a registry in
// etcd, next to the decision log (keys under PREFIX/fleet/<fleet>/).
//
// Contract:
//  * Every rank of a replica registers itself (FleetMember) under a lease of its own: replica
//    id, rank, lineage, step, version, state and why it is not serving, rewritten when any of
//    them changes (its time: when that state began). A rank that dies disappears when its lease
//    ends; a replica missing a rank is held.
//  * The fleet's newest step (the largest step any replica of the fleet's lineage committed) is
//    kept in etcd and never goes back, even when the replica that committed it dies. A step is
//    published once `quorum` replicas (every live replica by default) serve it or a newer one;
//    the published step never goes back either.
//  * Bounded staleness: with FleetPolicy::max_lag set, a replica more than max_lag steps
//    behind the newest step is held (its participants' SetHold: status().serving is false, the
//    engines' serving gate holds) until it serves an admissible step. A member holds its rank
//    from the start until it has read the registry and found its step admissible, and again
//    when the registry has not answered for a lease TTL (its record is gone by then): a
//    replica is never routable before it serves an admissible step.
//  * ReadFleetStatus applies the same rules to what is registered, so a router that asks it
//    (ServingReplicas) never gets a replica its own member would hold.
//  * An unreachable registry is E_DECISION_LOG_UNAVAILABLE naming each member; a malformed url,
//    fleet name or replica id is kInvalidArgument naming it; a stored value that does not
//    decode is kJournalCorrupt naming its key (and a member skips it).
//
// Thread-safety: the functions are safe from any thread; a FleetMember's methods are safe from
// any thread, and its own thread reports until it is destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wtx/participant.h"
#include "wtx/status.h"
#include "wtx/tls_files.h"

namespace wtx {

struct FleetPolicy {
  // How many steps a serving replica may be behind the fleet's newest step; 0: strictly
  // on-policy. nullopt: no bound.
  std::optional<int64_t> max_lag;
  // How many replicas must serve a step before it is published; 0: every live replica.
  int quorum = 0;
  // The fleet's lineage; "": the lineage of the first step committed in the fleet. A replica of
  // another lineage is held.
  std::string lineage;

  bool operator==(const FleetPolicy&) const = default;
};

enum class ReplicaState { kServing, kUpdating, kHeld, kCatchingUp };

// The prefix of a catch-up transaction's id ("catch-up.<peer replica>.<step>", `wtx fleet
// catch-up`): a rank in such a transaction is catching_up, not updating.
inline constexpr std::string_view kCatchUpTxPrefix = "catch-up.";
// "serving", "updating", "held", "catching_up".
const char* ReplicaStateName(ReplicaState state);

struct FleetReplica {
  std::string replica;
  std::string lineage;
  std::optional<int64_t> step;  // the step every rank serves; the smallest when they differ
  std::optional<std::string> version;
  ReplicaState state = ReplicaState::kHeld;
  std::optional<int64_t> lag;  // newest_step - step; nullopt without either
  std::string reason;          // why it is not serving; "" when it is
  int ranks = 0;               // ranks registered
  int world = 0;               // ranks the replica has (the largest any rank declared)
};

struct FleetStatus {
  std::string fleet;
  std::string lineage;
  std::optional<int64_t> newest_step;
  std::optional<int64_t> published_step;
  FleetPolicy policy;
  std::vector<FleetReplica> replicas;  // by replica id
};

struct FleetOptions {
  // The decision log's url, "etcd://HOST:PORT[,HOST:PORT...]/PREFIX" (wtx/decision_log.h): the
  // registry lives under PREFIX/fleet/<fleet>/.
  std::string url;
  TlsFiles tls;
  std::chrono::milliseconds request_timeout{2000};
  // The fleet's name: 1 to 128 characters of [A-Za-z0-9._-].
  std::string fleet;
};

// What the registry holds for the fleet, with the rules above applied.
Result<FleetStatus> ReadFleetStatus(const FleetOptions& options);
// The replicas a router may send requests to: serving, admissible, and at `min_step` or newer.
Result<std::vector<FleetReplica>> ServingReplicas(const FleetOptions& options,
                                                  std::optional<int64_t> min_step = std::nullopt);
// Stores the fleet's policy (replacing the one before) and returns it. kInvalidArgument for a
// negative max_lag or quorum (naming it).
Result<FleetPolicy> SetFleetPolicy(const FleetOptions& options, const FleetPolicy& policy);

struct FleetMemberOptions {
  FleetOptions fleet;
  std::string replica;  // 1 to 128 characters of [A-Za-z0-9._-]
  int rank = 0;         // this rank within the replica
  // Where this rank's control port answers (HOST:PORT, `wtx rank --control`), so that a lagging
  // replica can catch up from it; "" when it has none.
  std::string control;
  int world = 0;  // ranks in the replica; 0: unknown (a missing rank is not noticed)
  std::chrono::milliseconds ttl{6000};  // the lease (whole seconds, at least 1 s)
  std::chrono::milliseconds period{0};  // between reports; 0: a third of the TTL
};

// One rank of one replica in a fleet: registers it, keeps its record and the fleet's newest and
// published steps current, and holds its participant while the fleet's policy does not admit it.
class FleetMember {
 public:
  // Starts reporting `participant` (held from now until a report finds it admissible).
  // kInvalidArgument for a malformed url, fleet, replica, rank or world.
  // REQUIRES: participant outlives the member.
  static Result<std::unique_ptr<FleetMember>> Start(FleetMemberOptions options,
                                                    Participant* participant);
  // Stops reporting and revokes the lease (the record goes at once), releasing the hold.
  virtual ~FleetMember() = default;

  // One report now (a commit just happened): registers, raises the newest and published steps,
  // and holds or releases the participant. The error when the registry did not answer.
  virtual Status ReportNow() = 0;
  // Why the member holds its participant now; nullopt when it does not.
  virtual std::optional<std::string> hold() const = 0;
  // The fleet as the last successful report read it; nullopt before one. Its replicas are
  // listed only when that report read them (a report reads the policy and the newest and
  // published steps, and every replica only when this rank serves a step newer than the
  // published one); ReadFleetStatus reads everything.
  virtual std::optional<FleetStatus> last_status() const = 0;
};

}  // namespace wtx
