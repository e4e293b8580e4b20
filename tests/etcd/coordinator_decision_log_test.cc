// The coordinator on a shared decision log (issue 27), in one process over the in-process
// transport against a real 3-member etcd (tests/etcd/etcd_cluster.h): the commit point in etcd,
// leadership and its fence, the takeover that aborts what a dead coordinator left undecided,
// the embedded journal's restart doing the same, ranks resolving from the log, and the audit
// journal checked against the log. Process-level failover: tests/etcd/test_failover.py.
#include <catch2/catch.hpp>

#include <thread>

#include "src/net/codec.h"
#include "src/net/epoch_fence.h"
#include "src/net/rank_service.h"
#include "src/txn/resolve_from_log.h"
#include "tests/etcd/etcd_cluster.h"
#include "tests/test_util.h"
#include "wtx/coordinator.h"
#include "wtx/decision_log.h"

namespace wtx {
namespace {

using std::chrono::milliseconds;
using testing::Cluster;
using testing::EtcdCluster;
using testing::SmallManifest;
using testing::TempDir;

std::unique_ptr<EtcdCluster> StartEtcd() {
  auto c = EtcdCluster::Start();
  REQUIRE(c.ok());
  return std::move(c).value();
}

std::shared_ptr<DecisionLog> OpenLog(const EtcdCluster& etcd, const std::string& prefix) {
  DecisionLogOptions o;
  o.url = etcd.url(prefix);
  o.request_timeout = milliseconds(1500);
  auto log = OpenDecisionLog(o);
  REQUIRE(log.ok());
  return log.value();
}

CoordinatorOptions SharedOptions(const std::string& journal, std::shared_ptr<DecisionLog> log,
                                 const std::string& holder) {
  CoordinatorOptions o;
  o.journal_dir = journal;
  o.decision_log = std::move(log);
  o.lease_ttl = milliseconds(1000);
  o.leader_wait = milliseconds(6000);
  o.holder = holder;
  o.prepare_timeout = milliseconds(3000);
  return o;
}

std::unique_ptr<Coordinator> Open(const CoordinatorOptions& o, Transport* t) {
  auto c = Coordinator::Open(o, t);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(c).value();
}

// A real etcd, `ranks` in-process ranks (their embedded coordinator closed: each test opens
// its own on the shared log) and a folder for the coordinators' audit journals.
struct Setup {
  explicit Setup(int ranks) : etcd(StartEtcd()), c(ranks, SmallManifest()) {
    c.cluster().CloseCoordinator();
  }
  std::unique_ptr<EtcdCluster> etcd;
  Cluster c;
  TempDir d;
};

BeginRequest Full(const std::string& tx) {
  BeginRequest b;
  b.tx = tx;
  b.kind = TxKind::kFull;
  return b;
}

// A leadership that still believes it leads with an epoch etcd has moved past: a coordinator
// that paused while its lease ran out.
class StaleLeadership : public Leadership {
 public:
  explicit StaleLeadership(int64_t epoch) : epoch_(epoch) {}
  Result<int64_t> Acquire(std::chrono::milliseconds) override { return epoch_; }
  bool Leads() const override { return true; }
  int64_t epoch() const override { return epoch_; }
  void Resign() override {}

 private:
  int64_t epoch_;
};

TEST_CASE("CommitIsDecidedInEtcdOnceAndCopiedToTheAuditJournal") {
  Setup setup(2);
  auto& [etcd, c, d] = setup;
  auto log = OpenLog(*etcd, "wtx/commit");
  auto coord = Open(SharedOptions(d.sub("coord"), log, "coordinator A"), &c.transport());
  CHECK(coord->epoch() > 0);
  CHECK(coord->leads());
  REQUIRE(coord->Begin(Full("t1")).status.ok());
  REQUIRE(c.WriteAll(7).ok());
  REQUIRE(c.RefreshAll().ok());
  CommitOutcome out = coord->Commit("t1");
  INFO(out.status.ToString());
  REQUIRE(out.status.ok());
  REQUIRE(out.decision == Decision::kCommit);
  auto logged = log->Read("t1");
  REQUIRE(logged.ok());
  REQUIRE(logged.value());
  CHECK(logged.value()->decision == Decision::kCommit);
  CHECK(logged.value()->version == out.version);
  CHECK(logged.value()->epoch == coord->epoch());
  CHECK(logged.value()->writer == "coordinator A");
  CHECK(logged.value()->votes.size() == 2);
  // Every rank acknowledged: ended in the shared log (in the background, off the commit
  // path), so no takeover re-sends it.
  auto unended = log->ListUnended();
  for (int i = 0; i < 100 && unended.ok() && !unended->empty(); ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    unended = log->ListUnended();
  }
  REQUIRE(unended.ok());
  CHECK(unended->empty());
  CHECK(c.rank(0).status().serving);
  CHECK(*c.rank(0).status().version == out.version);
  // The audit copy agrees (the coordinator reopens on it and on the log).
  coord.reset();
  auto again = Open(SharedOptions(d.sub("coord"), log, "coordinator A"), &c.transport());
  CHECK(again->CommittedVersion("t1") == out.version);
}

TEST_CASE("SecondCoordinatorWaitsForTheLeaderAndTimesOutNamingIt") {
  Setup setup(1);
  auto& [etcd, c, d] = setup;
  auto log = OpenLog(*etcd, "wtx/two");
  auto a = Open(SharedOptions(d.sub("a"), log, "coordinator A"), &c.transport());
  CoordinatorOptions ob = SharedOptions(d.sub("b"), log, "coordinator B");
  ob.leader_wait = milliseconds(1500);
  auto b = Coordinator::Open(ob, &c.transport());
  REQUIRE_FALSE(b.ok());
  CHECK(b.status().code() == ErrorCode::kTimeout);
  CHECK(b.status().message().find("coordinator A") != std::string::npos);
  // A clean close hands over at once.
  const int64_t epoch_a = a->epoch();
  a.reset();
  auto b2 = Open(ob, &c.transport());
  CHECK(b2->epoch() > epoch_a);
}

TEST_CASE("DeposedLeaderCannotDecideEvenBeforeRanksHearOfTheNewEpoch") {
  Setup setup(2);
  auto& [etcd, c, d] = setup;
  auto log = OpenLog(*etcd, "wtx/fence");
  // A leads, then its lease is gone (revoked) while it does not know: B takes over.
  auto lead_a = log->NewLeadership("coordinator A", milliseconds(1000));
  REQUIRE(lead_a.ok());
  auto epoch_a = lead_a.value()->Acquire(milliseconds(3000));
  REQUIRE(epoch_a.ok());
  lead_a.value()->Resign();
  CoordinatorOptions oa = SharedOptions(d.sub("a"), log, "coordinator A");
  oa.leadership = std::make_shared<StaleLeadership>(epoch_a.value());
  auto a = Open(oa, &c.transport());
  auto b_lead = log->NewLeadership("coordinator B", milliseconds(1000));
  REQUIRE(b_lead.ok());
  auto epoch_b = b_lead.value()->Acquire(milliseconds(3000));
  REQUIRE(epoch_b.ok());
  CHECK(epoch_b.value() > epoch_a.value());

  REQUIRE(a->Begin(Full("t1")).status.ok());
  REQUIRE(c.WriteAll(3).ok());
  REQUIRE(c.RefreshAll().ok());
  CommitOutcome out = a->Commit("t1");
  INFO(out.status.ToString());
  CHECK(out.status.code() == ErrorCode::kStaleCoordinator);
  CHECK(out.status.message().find(std::to_string(epoch_a.value())) != std::string::npos);
  CHECK(out.status.message().find(std::to_string(epoch_b.value())) != std::string::npos);
  CHECK_FALSE(out.decision.has_value());
  auto logged = log->Read("t1");
  REQUIRE(logged.ok());
  CHECK_FALSE(logged.value().has_value());  // nothing written by the deposed leader
  // Deposed for good: every later call is refused.
  CHECK(a->Begin(Full("t2")).status.code() == ErrorCode::kStaleCoordinator);
  CHECK_FALSE(a->leads());
  // The ranks prepared and wait; the new leader aborts what nobody decided.
  CHECK(c.rank(0).status().in_doubt == std::optional<std::string>("t1"));
  a.reset();
  CoordinatorOptions ob = SharedOptions(d.sub("b"), log, "coordinator B");
  ob.leadership = std::shared_ptr<Leadership>(std::move(b_lead).value());
  auto b = Open(ob, &c.transport());
  REQUIRE(b->Recover().ok());
  for (int r = 0; r < 2; ++r) {
    CHECK_FALSE(c.rank(r).status().in_doubt.has_value());
    CHECK_FALSE(c.rank(r).status().active_tx.has_value());
  }
  logged = log->Read("t1");
  REQUIRE(logged.ok());
  REQUIRE(logged.value());
  CHECK(logged.value()->decision == Decision::kAbort);
  CHECK(logged.value()->epoch == b->epoch());
}

TEST_CASE("TakeoverAbortsATransactionBegunButNeverDecided") {
  Setup setup(2);
  auto& [etcd, c, d] = setup;
  auto log = OpenLog(*etcd, "wtx/orphan");
  auto a = Open(SharedOptions(d.sub("a"), log, "coordinator A"), &c.transport());
  REQUIRE(a->Begin(Full("t1")).status.ok());
  REQUIRE(c.WriteAll(5).ok());
  a.reset();  // gone between begin and its decision
  auto b = Open(SharedOptions(d.sub("b"), log, "coordinator B"), &c.transport());
  REQUIRE(b->Recover().ok());
  CHECK_FALSE(c.rank(0).status().active_tx.has_value());
  CHECK_FALSE(c.rank(1).status().active_tx.has_value());
  // No E_TX_ACTIVE: the next transaction begins and commits.
  BeginOutcome bo = b->Begin(Full("t2"));
  INFO(bo.status.ToString());
  REQUIRE(bo.status.ok());
  REQUIRE(c.WriteAll(6).ok());
  REQUIRE(c.RefreshAll().ok());
  CHECK(b->Commit("t2").status.ok());
}

TEST_CASE("EmbeddedJournalRestartAbortsATransactionItNeverDecided") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.coordinator().Begin(Full("t1")).status.ok());
  REQUIRE(c.WriteAll(5).ok());
  // Restarted between begin and decision (the E_TX_ACTIVE hang of issue 27).
  REQUIRE(c.RestartCoordinator().ok());
  CHECK_FALSE(c.rank(0).status().active_tx.has_value());
  BeginOutcome bo = c.coordinator().Begin(Full("t2"));
  INFO(bo.status.ToString());
  CHECK(bo.status.ok());
  // A transaction begun by this coordinator is not taken for an orphan by a later recovery.
  REQUIRE(c.WriteAll(6).ok());
  REQUIRE(c.coordinator().Recover().ok());
  CHECK(c.rank(0).status().active_tx == std::optional<std::string>("t2"));
  REQUIRE(c.RefreshAll().ok());
  CHECK(c.coordinator().Commit("t2").status.ok());
}

TEST_CASE("RankResolvesFromTheLogOnlyWhenNoCoordinatorLeads") {
  Setup setup(1);
  auto& [etcd, c, d] = setup;
  auto log = OpenLog(*etcd, "wtx/resolve");
  auto lead = log->NewLeadership("coordinator A", milliseconds(1000));
  REQUIRE(lead.ok());
  REQUIRE(lead.value()->Acquire(milliseconds(3000)).ok());
  REQUIRE(c.rank(0).Begin(Full("t1")).ok());
  REQUIRE(c.WriteAll(9).ok());
  REQUIRE(c.RefreshAll().ok());
  REQUIRE(c.rank(0).Prepare("t1").ok());
  // A coordinator leads: the rank waits for it.
  auto r = ResolveFromDecisionLog(c.rank(0), *log, 0);
  CHECK(r.status().code() == ErrorCode::kTxActive);
  CHECK(c.rank(0).status().in_doubt == std::optional<std::string>("t1"));
  // Its lease ends without a decision: the rank's cooperative abort wins.
  lead.value().reset();  // stops renewing, does not revoke
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    r = ResolveFromDecisionLog(c.rank(0), *log, 0);
    if (r.ok() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r.value());
  CHECK(r.value()->decision == Decision::kAbort);
  CHECK(r.value()->writer == "rank 0");
  CHECK_FALSE(c.rank(0).status().in_doubt.has_value());
}

TEST_CASE("RankDoesNotAbortOnItsOwnInAPrefixNoCoordinatorOpened") {
  Setup setup(1);
  auto& [etcd, c, d] = setup;
  DecisionLogOptions o;
  o.url = etcd->url("wtx/never-used");
  o.create = false;  // as a rank opens it: nothing written
  auto log = OpenDecisionLog(o);
  REQUIRE(log.ok());
  REQUIRE(c.rank(0).Begin(Full("t1")).ok());
  auto r = ResolveFromDecisionLog(c.rank(0), *log.value(), 0);
  CHECK(r.status().code() == ErrorCode::kInvalidArgument);
  CHECK(r.status().message().find("wtx/never-used/meta") != std::string::npos);
  CHECK(c.rank(0).status().active_tx == std::optional<std::string>("t1"));
  // A rank's log opens even while etcd is unreachable (it is needed only later).
  DecisionLogOptions dead;
  dead.url = "etcd://127.0.0.1:1/wtx";
  dead.create = false;
  dead.request_timeout = milliseconds(200);
  CHECK(OpenDecisionLog(dead).ok());
  dead.create = true;  // a coordinator's does not
  CHECK(OpenDecisionLog(dead).status().code() == ErrorCode::kDecisionLogUnavailable);
}

TEST_CASE("AuditJournalThatTheLogLacksIsRefusedAsTheWrongPrefix") {
  Setup setup(1);
  auto& [etcd, c, d] = setup;
  auto right = OpenLog(*etcd, "wtx/right");
  {
    auto a = Open(SharedOptions(d.sub("a"), right, "coordinator A"), &c.transport());
    REQUIRE(a->Begin(Full("t1")).status.ok());
    REQUIRE(a->Abort("t1").status.ok());  // every rank answered: ended
  }
  auto wrong = OpenLog(*etcd, "wtx/wrong");
  // The ended abort may have been compacted: the empty prefix is accepted for it.
  {
    auto again =
        Coordinator::Open(SharedOptions(d.sub("a"), wrong, "coordinator A"), &c.transport());
    CHECK(again.ok());
  }
  // A pending (unended) decision the log lacks is refused, naming the transaction.
  {
    auto a = Open(SharedOptions(d.sub("p"), right, "coordinator A"), &c.transport());
    REQUIRE(a->Begin(Full("t2")).status.ok());
    REQUIRE(c.WriteAll(2).ok());
    REQUIRE(c.RefreshAll().ok());
    c.cluster().CloseRank(0);  // the decision cannot be delivered: it stays unended
    CHECK(a->Commit("t2").decision.has_value());
  }
  auto refused =
      Coordinator::Open(SharedOptions(d.sub("p"), wrong, "coordinator A"), &c.transport());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kJournalCorrupt);
  CHECK(refused.status().message().find("'t2'") != std::string::npos);
  CHECK(refused.status().message().find("wtx/wrong") != std::string::npos);
}

TEST_CASE("RankRefusesRequestsFromAnOlderEpoch") {
  Cluster c(1, SmallManifest());
  net::EpochFence fence;
  nlohmann::json req = {{"req", net::BeginRequestToJson(Full("t1"))}, {"epoch", 7}};
  auto first = net::ServeRankRequest(c.rank(0), "check_begin", req, &fence);
  INFO(first.status().ToString());
  CHECK(fence.seen() == 7);
  req["epoch"] = 5;
  auto stale = net::ServeRankRequest(c.rank(0), "begin", req, &fence);
  CHECK(stale.status().code() == ErrorCode::kStaleCoordinator);
  CHECK(stale.status().message().find("epoch 5") != std::string::npos);
  CHECK(stale.status().message().find("epoch 7") != std::string::npos);
  CHECK_FALSE(c.rank(0).status().active_tx.has_value());
  // Without an epoch, once one was seen: refused too (a coordinator off the shared log).
  req.erase("epoch");
  CHECK(net::ServeRankRequest(c.rank(0), "begin", req, &fence).status().code() ==
        ErrorCode::kStaleCoordinator);
  // describe only reads: a stale coordinator may still look.
  CHECK(net::ServeRankRequest(c.rank(0), "describe", {{"epoch", 5}}, &fence).ok());
  req["epoch"] = 8;
  CHECK(net::ServeRankRequest(c.rank(0), "begin", req, &fence).ok());
  CHECK(fence.seen() == 8);
}

}  // namespace
}  // namespace wtx
