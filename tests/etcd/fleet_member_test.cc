// FleetMember (wtx/fleet.h) against a real etcd (tests/etcd/etcd_cluster.h), with in-process
// replicas: each member's report thread, ReportNow from the test's thread and the participant's
// own callers at once (ctest `fleet.*`; the sanitizer pass runs it under TSan). Exits 77
// (skipped) without an etcd binary. The same rules through Python, the CLI and the engines:
// tests/python/test_fleet_registry.py.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "tests/etcd/etcd_cluster.h"
#include "tests/test_util.h"
#include "wtx/coordinator.h"
#include "wtx/fleet.h"

namespace wtx {
namespace {

using std::chrono::milliseconds;
using testing::Cluster;
using testing::EtcdCluster;
using testing::SmallManifest;

std::unique_ptr<EtcdCluster> StartEtcd() {
  auto c = EtcdCluster::Start(1);
  REQUIRE(c.ok());
  return std::move(c).value();
}

// One replica: one rank and its embedded coordinator.
struct Replica {
  Replica() : c(1, SmallManifest()) {}

  void Step(int64_t step, uint32_t seed) {
    BeginRequest b;
    b.tx = "s" + std::to_string(step) + "-" + std::to_string(seed);
    b.kind = TxKind::kFull;
    b.lineage = "grpo";
    b.step = step;
    REQUIRE(c.coordinator().Begin(b).status.ok());
    REQUIRE(c.WriteAll(seed).ok());
    REQUIRE(c.RefreshAll().ok());
    CommitOutcome out = c.coordinator().Commit(b.tx);
    INFO(out.status.ToString());
    REQUIRE(out.decision == Decision::kCommit);
  }

  Cluster c;
};

FleetOptions Options(const EtcdCluster& etcd, const std::string& prefix) {
  FleetOptions o;
  o.url = etcd.url(prefix);
  o.fleet = "rollout";
  o.request_timeout = milliseconds(1500);
  return o;
}

std::unique_ptr<FleetMember> Join(const FleetOptions& fleet, const std::string& replica,
                                  Participant* p) {
  FleetMemberOptions o;
  o.fleet = fleet;
  o.replica = replica;
  o.world = 1;
  o.ttl = milliseconds(1000);
  o.period = milliseconds(50);
  auto m = FleetMember::Start(o, p);
  INFO(m.status().ToString());
  REQUIRE(m.ok());
  return std::move(m).value();
}

TEST_CASE("FleetMembersHoldALaggingReplicaAndReleaseItWhenItCommits") {
  auto etcd = StartEtcd();
  const FleetOptions fleet = Options(*etcd, "wtx/hold");
  Replica a, b;
  a.Step(1, 1);
  b.Step(1, 1);
  auto ma = Join(fleet, "a", &a.c.rank(0));
  auto mb = Join(fleet, "b", &b.c.rank(0));
  REQUIRE(ma->ReportNow().ok());
  REQUIRE(mb->ReportNow().ok());
  CHECK(b.c.rank(0).status().serving);
  FleetPolicy policy;
  policy.max_lag = 0;
  REQUIRE(SetFleetPolicy(fleet, policy).ok());
  // The participants' own callers and the members' threads at once: a reads its status while
  // its member reports; b commits step 2 later.
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) (void)a.c.rank(0).status();
  });
  a.Step(2, 2);
  REQUIRE(ma->ReportNow().ok());
  REQUIRE(mb->ReportNow().ok());
  RankStatus held = b.c.rank(0).status();
  CHECK_FALSE(held.serving);
  REQUIRE(held.held);
  CHECK_THAT(*held.held, Catch::Contains("step 1 is 1 behind the newest step 2 (max_lag 0)"));
  CHECK(mb->hold() == held.held);
  auto st = ReadFleetStatus(fleet);
  REQUIRE(st.ok());
  CHECK(st->newest_step == 2);
  CHECK(st->published_step == 1);  // every live replica must serve step 2 first
  auto routable = ServingReplicas(fleet);
  REQUIRE(routable.ok());
  REQUIRE(routable->size() == 1);
  CHECK(routable->front().replica == "a");
  b.Step(2, 2);
  REQUIRE(mb->ReportNow().ok());
  CHECK(b.c.rank(0).status().serving);
  CHECK_FALSE(mb->hold());
  REQUIRE(ma->ReportNow().ok());
  st = ReadFleetStatus(fleet);
  REQUIRE(st.ok());
  CHECK(st->published_step == 2);
  stop = true;
  reader.join();
  // Leaving revokes the lease: the replica is gone at once, the newest step stays.
  mb.reset();
  CHECK(b.c.rank(0).status().serving);  // the hold is released with the member
  st = ReadFleetStatus(fleet);
  REQUIRE(st.ok());
  REQUIRE(st->replicas.size() == 1);
  CHECK(st->newest_step == 2);
}

TEST_CASE("FleetNewestStepNeverGoesBackUnderConcurrentMembers") {
  auto etcd = StartEtcd();
  const FleetOptions fleet = Options(*etcd, "wtx/newest");
  Replica replicas[3];
  std::vector<std::unique_ptr<FleetMember>> members;
  for (int i = 0; i < 3; ++i) {
    replicas[i].Step(i + 1, static_cast<uint32_t>(i + 1));
    members.push_back(Join(fleet, "r" + std::to_string(i), &replicas[i].c.rank(0)));
  }
  // Every member reports from its own thread and from these at once.
  std::vector<std::thread> threads;
  for (auto& m : members) {
    threads.emplace_back([&m] {
      for (int k = 0; k < 10; ++k) (void)m->ReportNow();
    });
  }
  for (auto& t : threads) t.join();
  auto st = ReadFleetStatus(fleet);
  REQUIRE(st.ok());
  CHECK(st->newest_step == 3);
  // The replica that committed step 3 dies (its member gone): the newest step stays 3.
  members[2].reset();
  st = ReadFleetStatus(fleet);
  REQUIRE(st.ok());
  CHECK(st->replicas.size() == 2);
  CHECK(st->newest_step == 3);
  for (const FleetReplica& r : st->replicas) CHECK(r.lag == 3 - *r.step);
}

}  // namespace
}  // namespace wtx
