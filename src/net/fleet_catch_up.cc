#include "src/net/fleet_catch_up.h"

#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "src/fleet/fleet_registry.h"
#include "src/net/codec.h"
#include "src/net/control.h"
#include "src/net/control_codec.h"

namespace wtx::net {

namespace {

using nlohmann::json;

// The control endpoints of a replica's ranks, in rank order; an error names a rank without one.
Result<std::vector<std::string>> Controls(const fleet::RegistryContents& c, const FleetReplica& r) {
  std::vector<std::string> out(static_cast<size_t>(std::max(r.world, r.ranks)));
  for (const fleet::RankRecord& rec : c.ranks) {
    if (rec.replica == r.replica && rec.rank < static_cast<int>(out.size())) {
      out[static_cast<size_t>(rec.rank)] = rec.control;
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) {
      return Status::InvalidArgument("rank " + std::to_string(i) + " of replica '" + r.replica +
                                     "' registered no control port (wtx rank --control)");
    }
  }
  return out;
}

const FleetReplica* Find(const FleetStatus& s, const std::string& id) {
  for (const FleetReplica& r : s.replicas) {
    if (r.replica == id) return &r;
  }
  return nullptr;
}

// The peer to copy from: `from`, or the serving replica of the fleet's lineage with the largest
// step and the same world (the first by id among equals).
Result<const FleetReplica*> ChoosePeer(const FleetStatus& s, const FleetReplica& lagging,
                                       const std::string& from) {
  auto fits = [&](const FleetReplica& r) -> std::optional<std::string> {
    if (r.state != ReplicaState::kServing || !r.step || !r.version) {
      return "it is " + std::string(ReplicaStateName(r.state)) +
             (r.reason.empty() ? "" : " (" + r.reason + ")");
    }
    if (r.lineage != s.lineage) return "it serves lineage '" + r.lineage + "'";
    if (r.world != lagging.world) {
      return "its world is " + std::to_string(r.world) + " ranks, this replica's " +
             std::to_string(lagging.world);
    }
    return std::nullopt;
  };
  if (!from.empty()) {
    const FleetReplica* r = Find(s, from);
    if (r == nullptr) {
      return Status::Error(
          ErrorCode::kNotFound,
          "peer replica '" + from + "' is not registered in fleet '" + s.fleet + "'");
    }
    if (auto why = fits(*r)) {
      return Status::InvalidArgument("peer replica '" + from + "' cannot be copied: " + *why);
    }
    return r;
  }
  const FleetReplica* best = nullptr;
  for (const FleetReplica& r : s.replicas) {
    if (r.replica == lagging.replica || fits(r)) continue;
    if (best == nullptr || *r.step > *best->step) best = &r;
  }
  if (best == nullptr) {
    return Status::Error(ErrorCode::kNotFound,
                         "no replica of fleet '" + s.fleet + "' serves lineage '" + s.lineage +
                             "' with " + std::to_string(lagging.world) + " ranks to catch up from");
  }
  return best;
}

Result<std::unique_ptr<ControlClient>> Connect(const std::string& where, const std::string& who,
                                               const FleetCatchUpRequest& req) {
  WTX_ASSIGN_OR_RETURN(hp, ParseHostPort(where));
  auto c = ControlClient::Connect(hp.first, hp.second, req.secret, req.net, "catch-up");
  if (!c.ok()) return Status(c.status().code(), who + " (" + where + "): " + c.status().message());
  return std::move(c).value();
}

// One rank's copy: its catch_up answer (the bytes) or its error naming the rank.
struct RankCopy {
  Status status;
  int64_t bytes = 0;
  std::string served_digest;  // the peer's, as its rank reported it
};

}  // namespace

Result<FleetCatchUpReport> CatchUpReplica(const FleetCatchUpRequest& req) {
  WTX_ASSIGN_OR_RETURN(registry, fleet::Registry::Open(req.fleet));
  WTX_ASSIGN_OR_RETURN(contents, registry->Read());
  const FleetStatus status = fleet::ComputeFleetStatus(req.fleet.fleet, contents);
  const FleetReplica* lagging = Find(status, req.replica);
  if (lagging == nullptr) {
    return Status::Error(ErrorCode::kNotFound,
                         "replica '" + req.replica + "' is not registered in " + registry->name());
  }
  WTX_ASSIGN_OR_RETURN(peer, ChoosePeer(status, *lagging, req.from));
  FleetCatchUpReport report;
  report.replica = lagging->replica;
  report.from = peer->replica;
  report.lineage = status.lineage;
  report.step = *peer->step;
  report.version = *peer->version;
  if (lagging->step && *lagging->step >= report.step && lagging->lineage == report.lineage &&
      lagging->state == ReplicaState::kServing) {
    report.already = true;
    return report;
  }
  WTX_ASSIGN_OR_RETURN(mine, Controls(contents, *lagging));
  WTX_ASSIGN_OR_RETURN(theirs, Controls(contents, *peer));
  report.tx = std::string(kCatchUpTxPrefix) + peer->replica + "." + std::to_string(report.step);

  WTX_ASSIGN_OR_RETURN(
      coordinator,
      Connect(req.coordinator, "the coordinator of replica '" + req.replica + "'", req));
  BeginRequest begin;
  begin.tx = report.tx;
  begin.kind = TxKind::kFull;
  begin.lineage = report.lineage;
  begin.step = report.step;
  WTX_ASSIGN_OR_RETURN(
      began_json,
      coordinator->Call("begin", json{{"req", BeginRequestToJson(begin)}}, req.timeout));
  WTX_ASSIGN_OR_RETURN(began, BeginOutcomeFromJson(began_json));
  if (!began.status.ok()) {
    return Status(began.status.code(), "catch-up of replica '" + req.replica + "' from '" +
                                           peer->replica + "': begin: " + began.status.message());
  }
  // Every rank copies from its peer rank at once.
  std::vector<RankCopy> copies(mine.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < mine.size(); ++r) {
    threads.emplace_back([&, r] {
      const std::string who = "rank " + std::to_string(r) + " of replica '" + req.replica + "'";
      auto rank = Connect(mine[r], who, req);
      if (!rank.ok()) {
        copies[r].status = rank.status();
        return;
      }
      auto answer = rank.value()->Call(
          "catch_up", json{{"peer", theirs[r]}, {"version", report.version}}, req.timeout);
      if (!answer.ok()) {
        copies[r].status = Status(answer.status().code(), who + ": " + answer.status().message());
        return;
      }
      copies[r].bytes = answer->value("bytes", int64_t{0});
      copies[r].served_digest = answer->value("served_digest", std::string());
    });
  }
  for (auto& t : threads) t.join();
  for (const RankCopy& c : copies) {
    if (c.status.ok()) {
      report.bytes += c.bytes;
      continue;
    }
    (void)coordinator->Call("abort", json{{"tx", report.tx}}, req.timeout);
    return Status(c.status.code(), "catch-up of replica '" + req.replica + "' from '" +
                                       peer->replica + "' aborted: " + c.status.message());
  }
  CommitOptions options;
  options.expect_version = report.version;
  // The peer's live bytes reproduced: its served digest, as every peer rank reported it.
  if (!copies.empty() && !copies[0].served_digest.empty()) {
    options.expect_served_digest = copies[0].served_digest;
  }
  WTX_ASSIGN_OR_RETURN(
      committed_json,
      coordinator->Call("commit",
                        json{{"tx", report.tx}, {"options", CommitOptionsToJson(options)}},
                        req.timeout));
  WTX_ASSIGN_OR_RETURN(committed, CommitOutcomeFromJson(committed_json));
  if (committed.decision != Decision::kCommit || committed.version != report.version) {
    const Status why =
        committed.status.ok()
            ? Status::Error(ErrorCode::kVersionMismatch,
                            "committed " + committed.version + ", not " + report.version)
            : committed.status;
    return Status(why.code(), "catch-up of replica '" + req.replica + "' from '" + peer->replica +
                                  "' aborted: " + why.message());
  }
  return report;
}

}  // namespace wtx::net
