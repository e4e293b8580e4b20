// Many transactions across real OS processes (`wtx coordinator` + 3 x `wtx rank` on loopback),
// with a random participant or the coordinator SIGKILLed at a random moment of a random
// transaction (and, on some transactions, a crash point armed with power loss). After every
// transaction everything dead is restarted on its journal, the sender gives up on an
// undecided transaction, and the ranks must agree: no one in doubt, every rank's committed
// version equals the coordinator's last committed version, and no rank serves while dirty.
//
// Bounded: a fixed number of transactions, every wait has a timeout. WTX_FAULT_SEED picks the
// random seed (printed on failure).
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdlib>
#include <random>
#include <thread>

#include "src/conformance/tcp_simulator.h"
#include "tests/test_util.h"

namespace wtx::sim {
namespace {

using std::chrono::milliseconds;

std::optional<std::string> LastCommitted(const std::vector<DecisionEntry>& ds) {
  std::optional<std::string> v;
  for (const auto& d : ds) {
    if (d.decision == Decision::kCommit) v = d.version;
  }
  return v;
}

TEST_CASE("RandomKillsLeaveRanksAgreeing", "[tcp][faults]") {
  const char* env = std::getenv("WTX_FAULT_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : 20240611;
  INFO("WTX_FAULT_SEED=" << seed);
  std::mt19937_64 rng(seed);

  constexpr int kRanks = 3;
  constexpr int kTransactions = 40;
  Scenario sc;
  sc.ranks = kRanks;
  sc.kernel_identity = "k1";
  sc.manifests.assign(kRanks, testing::SmallManifest());
  testing::TempDir dir;
  TcpSimOptions o;
  o.journal_dir = dir.sub("journals");
  o.binary = WTX_BINARY;
  o.prepare_timeout = milliseconds(1500);
  o.start_timeout = milliseconds(20000);
  REQUIRE(PrepareJournalDir(o.journal_dir).ok());
  TcpProcesses procs(sc, o);
  REQUIRE(procs.Start().ok());

  auto restart_dead = [&] {
    if (!procs.CoordinatorAlive()) REQUIRE(procs.RestartCoordinator().ok());
    for (int r = 0; r < kRanks; ++r) {
      if (!procs.RankAlive(r)) REQUIRE(procs.RestartRank(r).ok());
    }
  };

  int kills = 0, crash_points = 0, committed = 0, aborted = 0, unknown = 0;
  for (int i = 0; i < kTransactions; ++i) {
    const std::string tx = "t" + std::to_string(i);
    INFO("transaction " << tx);
    restart_dead();

    // A random SIGKILL at a random moment of this transaction (most transactions).
    std::uniform_int_distribution<int> victim_d(-1, kRanks - 1);  // -1: the coordinator
    std::uniform_int_distribution<int> delay_d(0, 25);
    const bool kill = rng() % 4 != 0;
    const int victim = victim_d(rng);
    const milliseconds delay(delay_d(rng));
    std::thread killer;
    if (kill) {
      killer = std::thread([&procs, victim, delay] {
        std::this_thread::sleep_for(delay);
        const pid_t pid = victim < 0 ? procs.CoordinatorPid() : procs.RankPid(victim);
        if (pid > 0) ::kill(pid, SIGKILL);
      });
      ++kills;
    }

    Step commit;
    commit.op = "commit";
    commit.tx = tx;
    if (rng() % 5 == 0) {
      // A crash point inside the commit, with power loss.
      static const char* kPoints[] = {"before_prepare_logged", "after_prepare_logged",
                                      "before_decision_logged", "after_decision_logged"};
      const int p = static_cast<int>(rng() % 4);
      CrashSpec c;
      c.at = kPoints[p];
      c.power_loss = true;
      if (p < 2) {
        c.rank = static_cast<int>(rng() % kRanks);
        c.who = std::to_string(c.rank);
      } else {
        c.who = "coordinator";
      }
      commit.crash = c;
      ++crash_points;
    }

    std::optional<CommitOutcome> outcome;
    if (procs.CoordinatorAlive()) {
      BeginRequest req;
      req.tx = tx;
      BeginOutcome b = procs.Begin(req);
      if (b.status.ok()) {
        Step w;
        w.op = "write";
        w.param = "*";
        w.fill.seed = static_cast<uint64_t>(i + 1);
        Step refresh;
        refresh.op = "refresh";
        refresh.derived = "*";
        bool wrote = true;
        for (int r = 0; r < kRanks && wrote; ++r) {
          wrote = procs.RankAlive(r) && procs.RankStep(r, w, req).ok() &&
                  procs.RankStep(r, refresh, req).ok();
        }
        if (procs.CoordinatorAlive()) {
          bool died = false;
          outcome = procs.Commit(commit, &died);
        }
      }
    }
    if (killer.joinable()) {
      killer.join();
      // SIGKILL is asynchronous: wait until the controller sees the victim gone.
      for (int k = 0; k < 5000; ++k) {
        if (!(victim < 0 ? procs.CoordinatorAlive() : procs.RankAlive(victim))) break;
        std::this_thread::sleep_for(milliseconds(1));
      }
    }
    if (outcome && outcome->status.ok() && outcome->decision == Decision::kCommit) {
      ++committed;
    } else if (outcome && outcome->decision == Decision::kAbort) {
      ++aborted;
    } else {
      ++unknown;
    }

    // Recovery: bring everything back, and the sender gives up on anything undecided.
    restart_dead();
    procs.Abort(tx);  // E_NO_TX when already decided: nothing changes
    const std::vector<DecisionEntry> ds = procs.Decisions();
    const std::optional<std::string> want = LastCommitted(ds);
    INFO("kill "
         << kill << " victim " << victim << " after " << delay.count() << " ms; crash "
         << (commit.crash ? commit.crash->who + "@" + commit.crash->at : "-") << "; outcome "
         << (outcome
                 ? outcome->status.ToString() + " decision " +
                       (outcome->decision ? std::string(DecisionName(*outcome->decision)) : "none")
                 : "none")
         << "; last decision "
         << (ds.empty() ? "-" : ds.back().tx + " " + std::string(DecisionName(ds.back().decision)))
         << " want " << want.value_or("null"));
    for (int r = 0; r < kRanks; ++r) {
      INFO("rank " << r);
      REQUIRE(procs.RankAlive(r));
      RankStatus s = procs.RankState(r);
      INFO("status " << s.version.value_or("null") << " in_doubt " << s.in_doubt.value_or("-")
                     << " active " << s.active_tx.value_or("-") << " dirty " << s.dirty);
      CHECK_FALSE(s.in_doubt.has_value());
      CHECK_FALSE(s.active_tx.has_value());
      CHECK(s.version == want);
      if (s.serving) {
        CHECK_FALSE(s.dirty);
        CHECK(s.loaded);
      }
    }
  }

  // A last, undisturbed full update makes every rank serve the same version.
  restart_dead();
  BeginRequest req;
  req.tx = "final";
  REQUIRE(procs.Begin(req).status.ok());
  Step w;
  w.op = "write";
  w.param = "*";
  w.fill.seed = 999;
  Step refresh;
  refresh.op = "refresh";
  refresh.derived = "*";
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(procs.RankStep(r, w, req).ok());
    REQUIRE(procs.RankStep(r, refresh, req).ok());
  }
  Step commit;
  commit.op = "commit";
  commit.tx = "final";
  bool died = false;
  CommitOutcome fin = procs.Commit(commit, &died);
  REQUIRE(fin.status.ok());
  REQUIRE(fin.decision == Decision::kCommit);
  for (int r = 0; r < kRanks; ++r) {
    RankStatus s = procs.RankState(r);
    CHECK(s.serving);
    CHECK_FALSE(s.dirty);
    CHECK(s.version == std::optional<std::string>(fin.version));
  }
  WARN("transactions: " << kTransactions << ", SIGKILLs: " << kills
                        << ", crash points with power loss: " << crash_points
                        << ", committed: " << committed << ", aborted: " << aborted
                        << ", outcome unknown to the sender: " << unknown);
}

}  // namespace
}  // namespace wtx::sim
