// InProcCluster (src/testing/inproc_cluster.h), the one in-process cluster of the tests, the
// simulator and torture: process death with and without power loss, restarts on the same
// journals, crash points, and in-doubt resolution after a coordinator restart.
#include <catch2/catch.hpp>

#include "src/testing/inproc_cluster.h"
#include "tests/test_util.h"

namespace wtx {
namespace {

using testing::Pattern;
using testing::Req;
using testing::SmallManifest;
using testing::TempDir;

InProcClusterOptions TwoRanks(const TempDir& dir) {
  InProcClusterOptions o;
  o.dir = dir.path();
  o.manifests = {SmallManifest(), SmallManifest()};
  o.kernel_identity = "k1";
  return o;
}

// Begins a full transaction and writes and refreshes everything on every rank.
void WriteEverything(InProcCluster& c, const std::string& tx, uint32_t seed) {
  REQUIRE(c.coordinator().Begin(Req(tx, TxKind::kFull)).status.ok());
  for (int r = 0; r < c.ranks(); ++r) {
    const Manifest& m = c.manifest(r);
    for (const auto& ps : m.params()) {
      Box box = WholeBox(ps.shape);
      auto bytes = Pattern(m, ps.name, box, seed);
      WritePiece w{ps.name, "", box, bytes.data(), bytes.size()};
      REQUIRE(c.rank(r).Write({&w, 1}).ok());
    }
    REQUIRE(c.rank(r).Refresh("*").ok());
  }
}

TEST_CASE("InProcClusterRestartsAKilledRankOnItsJournalWithoutItsLiveBytes") {
  TempDir dir;
  InProcCluster c(TwoRanks(dir));
  REQUIRE(c.Start().ok());
  WriteEverything(c, "t1", 1);
  CommitOutcome o = c.coordinator().Commit("t1");
  REQUIRE(o.decision == Decision::kCommit);

  c.KillRank(1, PowerLoss::AllUnsynced());
  CHECK_FALSE(c.RankAlive(1));
  // The transport no longer reaches it: a begin fails on that rank.
  BeginOutcome refused = c.coordinator().Begin(Req("t2", TxKind::kFull));
  CHECK_FALSE(refused.status.ok());

  REQUIRE(c.RestartRank(1).ok());
  RankStatus s = c.rank(1).status();
  CHECK(s.version == o.version);  // the synced commit survived the power loss
  CHECK_FALSE(s.loaded);          // a new process: its live bytes are gone
  CHECK_FALSE(s.serving);
  CHECK(c.rank(0).status().serving);
}

TEST_CASE("InProcClusterCoordinatorRestartResolvesRanksLeftInDoubt") {
  TempDir dir;
  InProcCluster c(TwoRanks(dir));
  REQUIRE(c.Start().ok());
  WriteEverything(c, "t1", 2);
  // The coordinator dies right after logging its commit decision: no rank heard it.
  c.coordinator_crash_point().Arm("after_decision_logged");
  CommitOutcome o = c.coordinator().Commit("t1");
  REQUIRE(c.coordinator_crash_point().Disarm());
  c.KillCoordinator(PowerLoss::AllUnsynced());
  CHECK_FALSE(c.CoordinatorAlive());
  CHECK(c.rank(0).status().in_doubt == "t1");

  std::vector<std::pair<int, Status>> resolve_errors;
  REQUIRE(c.RestartCoordinator(nullptr, &resolve_errors).ok());
  CHECK(resolve_errors.empty());
  for (int r = 0; r < c.ranks(); ++r) {
    RankStatus s = c.rank(r).status();
    CHECK_FALSE(s.in_doubt.has_value());
    CHECK(s.version == o.version);
    CHECK(s.serving);
  }
}

TEST_CASE("InProcClusterReportsAMemoryFactoryFailureAsTheRankStartsError") {
  TempDir dir;
  InProcClusterOptions o = TwoRanks(dir);
  o.memory = [](int rank, const Manifest&) -> Result<std::shared_ptr<LiveMemory>> {
    if (rank == 1) return Status::InvalidArgument("rank 1: no device");
    return std::shared_ptr<LiveMemory>();
  };
  InProcCluster c(std::move(o));
  Status s = c.Start();
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK(s.message() == "rank 1: no device");
  CHECK(c.RankAlive(0));
  CHECK_FALSE(c.RankAlive(1));
}

}  // namespace
}  // namespace wtx
