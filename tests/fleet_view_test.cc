// The fleet registry's rules without etcd (src/fleet/fleet_view.h, fleet_records.h): what a
// fleet status says of each replica, the newest and published steps, the staleness hold, and
// the one codec of each stored record. The registry in etcd: tests/python/test_fleet_registry.py.
#include <catch2/catch.hpp>

#include "src/fleet/fleet_records.h"
#include "src/fleet/fleet_view.h"

namespace wtx::fleet {
namespace {

RankRecord Rank(std::string replica, int rank, int world, std::optional<int64_t> step,
                std::string version = "v", ReplicaState state = ReplicaState::kServing,
                std::string lineage = "grpo") {
  RankRecord r;
  r.replica = std::move(replica);
  r.rank = rank;
  r.world = world;
  r.step = step;
  r.version = std::move(version);
  r.state = state;
  r.lineage = std::move(lineage);
  return r;
}

const FleetReplica& Of(const FleetStatus& s, const std::string& id) {
  for (const FleetReplica& r : s.replicas) {
    if (r.replica == id) return r;
  }
  FAIL("no replica " << id);
  return s.replicas.front();
}

TEST_CASE("NewestStepIsTheLargestOfTheLineageAndOutlivesItsReplica", "[fleet]") {
  RegistryContents c;
  c.ranks = {Rank("a", 0, 1, 3), Rank("b", 0, 1, 5)};
  FleetStatus s = ComputeFleetStatus("f", c);
  CHECK(s.lineage == "grpo");
  CHECK(s.newest_step == 5);
  CHECK(Of(s, "a").lag == 2);
  CHECK(Of(s, "b").lag == 0);
  c.ranks.pop_back();  // b's lease ended
  c.newest = StepMark{"grpo", 5, "v5", "b", 0};
  s = ComputeFleetStatus("f", c);
  CHECK(s.newest_step == 5);
  CHECK(Of(s, "a").lag == 2);
}

TEST_CASE("PublishedStepNeedsTheQuorumAndNeverGoesBack", "[fleet]") {
  RegistryContents c;
  c.ranks = {Rank("a", 0, 1, 2), Rank("b", 0, 1, 2), Rank("c", 0, 1, 1)};
  CHECK(ComputeFleetStatus("f", c).published_step == 1);  // every live replica
  c.policy = FleetPolicy{std::nullopt, 2, ""};
  CHECK(ComputeFleetStatus("f", c).published_step == 2);
  c.policy = FleetPolicy{std::nullopt, 4, ""};  // more than live: nothing earned
  CHECK(EarnedPublishedStep(ComputeFleetStatus("f", c)) == std::nullopt);
  c.published = StepMark{"grpo", 2, "v", "a", 0};
  CHECK(ComputeFleetStatus("f", c).published_step == 2);  // the stored one stays
  // A replica that does not serve counts as live, not as serving.
  c.policy.reset();
  c.published.reset();
  c.ranks[2].state = ReplicaState::kUpdating;
  CHECK(ComputeFleetStatus("f", c).published_step == std::nullopt);
}

TEST_CASE("MaxLagHoldsAServingReplicaTooFarBehind", "[fleet]") {
  RegistryContents c;
  c.policy = FleetPolicy{0, 0, ""};
  c.ranks = {Rank("a", 0, 1, 4), Rank("b", 0, 1, 3)};
  FleetStatus s = ComputeFleetStatus("f", c);
  CHECK(Of(s, "a").state == ReplicaState::kServing);
  CHECK(Of(s, "b").state == ReplicaState::kHeld);
  CHECK_THAT(Of(s, "b").reason,
             Catch::Contains("step 3 is 1 behind the newest step 4 (max_lag 0)"));
  CHECK(StalenessHold(s, "grpo", 3).has_value());
  CHECK_FALSE(StalenessHold(s, "grpo", 4).has_value());
  c.policy->max_lag = 1;
  s = ComputeFleetStatus("f", c);
  CHECK(Of(s, "b").state == ReplicaState::kServing);
  CHECK_FALSE(StalenessHold(s, "grpo", 3).has_value());
  CHECK(StalenessHold(s, "grpo", 2).has_value());
  // No step at all (what the engine loaded itself): held once the fleet has a step and a bound.
  CHECK_THAT(StalenessHold(s, "", std::nullopt).value_or(""),
             Catch::Contains("no step committed here; the newest is 4 (max_lag 1)"));
  c.policy->max_lag.reset();
  CHECK_FALSE(StalenessHold(ComputeFleetStatus("f", c), "", std::nullopt).has_value());
}

TEST_CASE("AReplicaIsHeldForAMissingRankMixedVersionsOrAnotherLineage", "[fleet]") {
  RegistryContents c;
  c.ranks = {Rank("a", 0, 2, 1),       Rank("b", 0, 2, 1, "v1"),
             Rank("b", 1, 2, 1, "v2"), Rank("c", 0, 1, 1, "v", ReplicaState::kServing, "other"),
             Rank("d", 0, 2, 1),       Rank("d", 1, 2, 1, "v", ReplicaState::kUpdating)};
  c.policy = FleetPolicy{std::nullopt, 0, "grpo"};
  FleetStatus s = ComputeFleetStatus("f", c);
  CHECK(Of(s, "a").state == ReplicaState::kHeld);
  CHECK_THAT(Of(s, "a").reason, Catch::Contains("rank(s) 1 of 2 not registered"));
  CHECK(Of(s, "b").state == ReplicaState::kHeld);
  CHECK(Of(s, "b").version == std::nullopt);
  CHECK_THAT(Of(s, "b").reason, Catch::Contains("different versions"));
  CHECK(Of(s, "c").state == ReplicaState::kHeld);
  CHECK_THAT(Of(s, "c").reason, Catch::Contains("it serves lineage 'grpo'"));
  CHECK(Of(s, "c").lag == std::nullopt);
  CHECK(Of(s, "d").state == ReplicaState::kUpdating);
  CHECK_THAT(Of(s, "d").reason, Catch::Contains("rank 1"));
}

TEST_CASE("EveryFleetRecordRoundTripsAndAForeignValueIsCorrupt", "[fleet]") {
  RankRecord r = Rank("r-1", 1, 4, 7, "abc", ReplicaState::kCatchingUp);
  r.reason = "copying from r-0";
  r.time_micros = 42;
  r.control = "10.0.0.7:7071";
  auto enc = EncodeRankRecord(r);
  REQUIRE(enc.ok());
  auto dec = DecodeRankRecord(enc.value());
  REQUIRE(dec.ok());
  CHECK(dec.value() == r);
  r.step.reset();
  r.version.reset();
  CHECK(DecodeRankRecord(EncodeRankRecord(r).value()).value() == r);

  FleetPolicy p{3, 2, "grpo"};
  CHECK(DecodePolicy(EncodePolicy(p).value()).value() == p);
  p.max_lag.reset();
  CHECK(DecodePolicy(EncodePolicy(p).value()).value() == p);
  StepMark m{"grpo", 9, "v9", "r0", 5};
  CHECK(DecodeStepMark(EncodeStepMark(m).value()).value() == m);

  for (const std::string& bad :
       {std::string("not json"), std::string("{}"),
        std::string(R"({"format":"wtx-fleet-rank","v":2})"),
        std::string(R"({"format":"wtx-fleet-step","v":1,"lineage":"g","step":-1,"version":"",)"
                    R"("replica":"","time_micros":0})"),
        std::string(R"({"format":"wtx-fleet-policy","v":1,"max_lag":null,"quorum":0,)"
                    R"("lineage":"","extra":1})")}) {
    INFO(bad);
    CHECK(DecodeRankRecord(bad).status().code() == ErrorCode::kJournalCorrupt);
    CHECK(DecodeStepMark(bad).status().code() == ErrorCode::kJournalCorrupt);
    CHECK(DecodePolicy(bad).status().code() == ErrorCode::kJournalCorrupt);
  }
  auto rank_beyond_world = EncodeRankRecord(Rank("x", 0, 1, 1)).value();
  rank_beyond_world.replace(rank_beyond_world.find("\"rank\":0"), 8, "\"rank\":3");
  CHECK_THAT(DecodeRankRecord(rank_beyond_world).status().message(),
             Catch::Contains("does not fit"));
}

TEST_CASE("FleetAndReplicaNamesAreCheckedByName", "[fleet]") {
  CHECK(CheckFleetName("fleet", "rollout-1.a_b").ok());
  for (const std::string& bad : {std::string(), std::string("a/b"), std::string(129, 'x'),
                                 std::string(".."), std::string("a b")}) {
    Status s = CheckFleetName("replica", bad);
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::StartsWith("replica"));
  }
}

}  // namespace
}  // namespace wtx::fleet
