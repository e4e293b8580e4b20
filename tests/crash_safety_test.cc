// Crash safety: an injected I/O error in a journal never turns into a silent success (the
// participant or coordinator that hit it answers E_CRASHED from then on and recovers from its
// journal after a restart), synced records survive power loss, and lost synced records are
// detected when a journal is opened.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "journal/journal.h"
#include "src/testing/armed_crash_point.h"
#include "src/testing/fault_injection_fs.h"
#include "src/testing/inproc_cluster.h"
#include "src/txn/journal_check.h"
#include "src/txn/test_hooks.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"
#include "wtx/participant.h"

using nlohmann::json;
using namespace wtx;
namespace fs = std::filesystem;

namespace {

class Scratch {
 public:
  Scratch() {
    std::random_device rd;
    path_ =
        (fs::temp_directory_path() / ("wtx-crash-" + std::to_string(rd()) + std::to_string(rd())))
            .string();
    fs::create_directories(path_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string sub(const std::string& s) const { return path_ + "/" + s; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

ManifestPtr Manifest2() {
  return ParseManifest(json::parse(R"({
    "params": [
      {"name": "w", "dtype": "bf16", "shape": [4, 4]},
      {"name": "kv", "dtype": "f32", "shape": [4]}
    ],
    "modules": [{"name": "m", "params": ["w", "kv"]}],
    "derived": [{"name": "W_UK_T", "sources": ["kv"], "phase": "attention"}]
  })"))
      .value();
}

// Two ranks and a coordinator, each journal on its own fault-injecting filesystem (the
// library's InProcCluster).
struct Rig {
  Scratch dir;
  InProcCluster cluster{Options(dir)};

  static InProcClusterOptions Options(const Scratch& d) {
    InProcClusterOptions o;
    o.dir = d.path();
    o.manifests = {Manifest2(), Manifest2()};
    o.kernel_identity = "k";
    return o;
  }
  Rig() {
    for (int r = 0; r < 2; ++r) REQUIRE(OpenRank(r).ok());
    REQUIRE(OpenCoordinator().ok());
  }
  Participant& p(int r) { return cluster.rank(r); }
  Coordinator& c() { return cluster.coordinator(); }
  FaultInjectionFileSystem& fs(int r) { return cluster.rank_fs(r); }
  FaultInjectionFileSystem& cfs() { return cluster.coordinator_fs(); }
  InProcTransport& transport() { return cluster.transport(); }
  Status OpenRank(int r) { return cluster.OpenRank(r); }
  Status OpenCoordinator(CrashPoints* crash = nullptr) { return cluster.OpenCoordinator(crash); }
  void KillRank(int r, bool power_loss) { cluster.KillRank(r, PowerLoss::Of(power_loss)); }
  void KillCoordinator(bool power_loss) { cluster.KillCoordinator(PowerLoss::Of(power_loss)); }
  Status Begin(const std::string& tx) {
    BeginRequest b;
    b.tx = tx;
    return c().Begin(b).status;
  }
  void WriteAll(int r, uint8_t v) {
    std::vector<uint8_t> w(32, v), kv(16, v);
    WritePiece pieces[] = {{"w", "", std::nullopt, w.data(), w.size()},
                           {"kv", "", std::nullopt, kv.data(), kv.size()}};
    REQUIRE(p(r).Write(pieces).ok());
    REQUIRE(p(r).Refresh("*").ok());
  }
  bool Crashed(int r) {
    BeginRequest b;
    b.tx = "probe";
    return p(r).CheckBegin(b).code() == ErrorCode::kCrashed;
  }
};

}  // namespace

TEST_CASE("FailedBeginWriteCrashesTheRankAndRefusesTheBegin") {
  Rig rig;
  rig.fs(1).FailNextWrites(1);
  Status s = rig.Begin("t1");
  CHECK(rig.fs(1).injected_errors() == 1);
  CHECK_FALSE(s.ok());
  CHECK(rig.Crashed(1));
  std::vector<uint8_t> w(32, 1);
  WritePiece piece{"w", "", std::nullopt, w.data(), w.size()};
  CHECK(rig.p(1).Write({&piece, 1}).code() == ErrorCode::kCrashed);
  CHECK(rig.p(1).Prepare("t1").status().code() == ErrorCode::kCrashed);
  // Rank 0 began and was told to abort: nothing is active anywhere that could commit.
  CHECK_FALSE(rig.p(0).status().active_tx);
  rig.KillRank(1, /*power_loss=*/false);
  REQUIRE(rig.OpenRank(1).ok());
  CHECK_FALSE(rig.p(1).status().active_tx);
}

TEST_CASE("FailedPreparedSyncNeverBecomesAYesVote") {
  Rig rig;
  REQUIRE(rig.Begin("t1").ok());
  rig.WriteAll(0, 1);
  rig.WriteAll(1, 1);
  rig.fs(0).FailNextSyncs(1);
  CommitOutcome out = rig.c().Commit("t1");
  CHECK(rig.fs(0).injected_errors() == 1);
  REQUIRE(out.votes.size() == 2);
  CHECK(out.votes[0].kind == VoteReport::Kind::kCrashed);
  CHECK(out.decision == Decision::kAbort);
  CHECK(rig.Crashed(0));
  // Rank 1 voted yes and heard the abort.
  CHECK_FALSE(rig.p(1).status().in_doubt);
  CHECK(rig.p(1).status().dirty);
  // Restart (the PREPARED record may or may not be on disk): the abort wins.
  rig.KillRank(0, /*power_loss=*/false);
  REQUIRE(rig.OpenRank(0).ok());
  REQUIRE(rig.p(0).ResolveInDoubt(rig.c()).ok());
  CHECK_FALSE(rig.p(0).status().in_doubt);
  CHECK_FALSE(rig.p(0).status().version);
}

TEST_CASE("FailedWatermarkAfterASyncedPrepareCrashesTheRank") {
  Rig rig;
  REQUIRE(rig.Begin("t1").ok());
  rig.WriteAll(0, 1);
  rig.WriteAll(1, 1);
  // The PREPARED write succeeds; the sync watermark written after its sync fails.
  rig.fs(1).FailNextWrites(1, /*after=*/1);
  CommitOutcome out = rig.c().Commit("t1");
  CHECK(rig.fs(1).injected_errors() == 1);
  CHECK(out.votes[1].kind == VoteReport::Kind::kCrashed);
  CHECK(out.decision == Decision::kAbort);
  CHECK(rig.Crashed(1));
}

TEST_CASE("FailedOutcomeWriteCrashesTheRankWhichLearnsTheCommitAfterRestart") {
  Rig rig;
  REQUIRE(rig.Begin("t1").ok());
  rig.WriteAll(0, 1);
  rig.WriteAll(1, 1);
  // Prepare (PREPARED record + watermark) succeeds, the OUTCOME write fails.
  rig.fs(1).FailNextWrites(1, /*after=*/2);
  CommitOutcome out = rig.c().Commit("t1");
  CHECK(rig.fs(1).injected_errors() == 1);
  REQUIRE(out.decision == Decision::kCommit);
  CHECK(out.unacknowledged == std::vector<int>{1});
  CHECK(rig.Crashed(1));
  rig.KillRank(1, /*power_loss=*/true);
  REQUIRE(rig.OpenRank(1).ok());
  CHECK(rig.p(1).status().in_doubt == std::optional<std::string>("t1"));
  REQUIRE(rig.p(1).ResolveInDoubt(rig.c()).ok());
  CHECK(rig.p(1).status().version == std::optional<std::string>(out.version));
  CHECK(rig.p(0).status().version == std::optional<std::string>(out.version));
}

TEST_CASE("FailedDecisionWriteIsNotACommitAndCrashesTheCoordinator") {
  Rig rig;
  REQUIRE(rig.Begin("t1").ok());
  rig.WriteAll(0, 1);
  rig.WriteAll(1, 1);
  rig.cfs().FailNextWrites(1);
  CommitOutcome out = rig.c().Commit("t1");
  CHECK(rig.cfs().injected_errors() == 1);
  CHECK(out.status.code() == ErrorCode::kCrashed);
  CHECK_FALSE(out.decision_logged);
  CHECK_FALSE(out.decision);
  CHECK(rig.Begin("t2").code() == ErrorCode::kCrashed);
  CHECK(rig.p(0).status().in_doubt == std::optional<std::string>("t1"));
  // Recovery: the decision never reached the journal; presumed abort, everywhere.
  rig.KillCoordinator(/*power_loss=*/true);
  REQUIRE(rig.OpenCoordinator().ok());
  REQUIRE(rig.c().Recover().ok());
  for (int r = 0; r < 2; ++r) {
    REQUIRE(rig.p(r).ResolveInDoubt(rig.c()).ok());
    CHECK_FALSE(rig.p(r).status().in_doubt);
    CHECK_FALSE(rig.p(r).status().version);
  }
  CHECK_FALSE(rig.c().CommittedVersion("t1"));
}

TEST_CASE("FailedDecisionSyncLeavesTheOutcomeToRecoveryAndAllRanksAgree") {
  for (bool power_loss : {false, true}) {
    Rig rig;
    REQUIRE(rig.Begin("t1").ok());
    rig.WriteAll(0, 1);
    rig.WriteAll(1, 1);
    rig.cfs().FailNextSyncs(1);
    CommitOutcome out = rig.c().Commit("t1");
    CHECK(rig.cfs().injected_errors() == 1);
    CHECK(out.status.code() == ErrorCode::kCrashed);
    CHECK_FALSE(out.decision);
    rig.KillCoordinator(power_loss);
    REQUIRE(rig.OpenCoordinator().ok());
    REQUIRE(rig.c().Recover().ok());
    for (int r = 0; r < 2; ++r) REQUIRE(rig.p(r).ResolveInDoubt(rig.c()).ok());
    // Unsynced, the decision may survive a plain crash; never a power loss. Either way every
    // rank ends with what the recovered coordinator says.
    auto v = rig.c().CommittedVersion("t1");
    if (power_loss) CHECK_FALSE(v);
    for (int r = 0; r < 2; ++r) {
      CHECK_FALSE(rig.p(r).status().in_doubt);
      CHECK(rig.p(r).status().version == v);
    }
  }
}

TEST_CASE("FailedAbortRecordCrashesTheCoordinator") {
  Rig rig;
  REQUIRE(rig.Begin("t1").ok());
  rig.cfs().FailNextWrites(1);
  BeginOutcome out = rig.c().Abort("t1");
  CHECK(rig.cfs().injected_errors() == 1);
  CHECK(out.status.code() == ErrorCode::kCrashed);
  CHECK(rig.c().Commit("t2").status.code() == ErrorCode::kCrashed);
  // The ranks heard the abort before the coordinator logged it.
  CHECK_FALSE(rig.p(0).status().active_tx);
}

TEST_CASE("FailedRefusedBeginRecordCrashesTheCoordinator") {
  // Issue 45, 8: the audit record of a refused begin is a journal write like any other; its
  // failure is fail-stop, not a best effort the coordinator goes on after.
  Rig rig;
  REQUIRE(rig.Begin("t1").ok());
  rig.cfs().FailNextWrites(1);
  const Status refused = rig.Begin("t2");  // the ranks refuse: t1 is active
  CHECK(rig.cfs().injected_errors() == 1);
  CHECK(refused.code() == ErrorCode::kCrashed);
  CHECK(refused.message().find("refused begin of 't2'") != std::string::npos);
  CHECK(rig.c().Commit("t1").status.code() == ErrorCode::kCrashed);
  // Nothing of t2 reached a rank; t1 is still theirs to resolve after recovery.
  CHECK(rig.p(0).status().active_tx == std::optional<std::string>("t1"));
}

TEST_CASE("FailedEndRecordCrashesTheCoordinatorButTheCommitStands") {
  Rig rig;
  REQUIRE(rig.Begin("t1").ok());
  rig.WriteAll(0, 1);
  rig.WriteAll(1, 1);
  // DECISION and its watermark succeed; END fails.
  rig.cfs().FailNextWrites(1, /*after=*/2);
  CommitOutcome out = rig.c().Commit("t1");
  CHECK(rig.cfs().injected_errors() == 1);
  CHECK(out.decision == Decision::kCommit);
  CHECK(out.decision_logged);
  CHECK(rig.Begin("t2").code() == ErrorCode::kCrashed);
  rig.KillCoordinator(/*power_loss=*/true);
  REQUIRE(rig.OpenCoordinator().ok());
  CHECK(rig.c().CommittedVersion("t1") == std::optional<std::string>(out.version));
}

TEST_CASE("RestartWhoseJournalWriteFailsDoesNotComeUp") {
  Rig rig;
  rig.KillRank(0, false);
  rig.fs(0).FailNextWrites(1);
  Status s = rig.OpenRank(0);
  CHECK(rig.fs(0).injected_errors() == 1);
  CHECK_FALSE(s.ok());
  rig.fs(0).FailNextWrites(0);
  CHECK(rig.OpenRank(0).ok());
}

namespace {

class CrashAt : public CrashPoints {
 public:
  explicit CrashAt(std::string point) : point_(std::move(point)) {}
  bool ShouldCrash(std::string_view point) override { return point == point_; }

 private:
  std::string point_;
};

}  // namespace

// A silent rank during a commit whose coordinator died before deciding: after the restart the
// in-doubt rank's query logs a presumed abort, and the rank that never prepared must hear it
// too (from the presumed abort, or from the sender's abort), or it keeps the transaction
// active and refuses every later begin.
TEST_CASE("PresumedAbortReachesARankThatNeverPrepared") {
  Rig rig;
  CrashAt crash("before_decision_logged");
  rig.KillCoordinator(false);
  REQUIRE(rig.OpenCoordinator(&crash).ok());
  REQUIRE(rig.Begin("t1").ok());
  rig.WriteAll(0, 1);
  rig.WriteAll(1, 1);
  rig.transport().SetSilent({1});
  CommitOutcome out = rig.c().Commit("t1");
  rig.transport().SetSilent({});
  CHECK(out.status.code() == ErrorCode::kCrashed);
  rig.KillCoordinator(/*power_loss=*/true);
  REQUIRE(rig.OpenCoordinator().ok());
  REQUIRE(rig.c().Recover().ok());
  for (int r = 0; r < 2; ++r) REQUIRE(rig.p(r).ResolveInDoubt(rig.c()).ok());
  CHECK_FALSE(rig.p(0).status().active_tx);
  // The sender gives up on t1 (nothing left to abort is fine): no rank keeps it.
  BeginOutcome ab = rig.c().Abort("t1");
  CHECK((ab.status.ok() || ab.status.code() == ErrorCode::kNoTx));
  CHECK_FALSE(rig.p(1).status().active_tx);
  CHECK(rig.Begin("t2").ok());
}

namespace {

JournalOptions Jo(std::shared_ptr<FaultInjectionFileSystem> f) {
  JournalOptions o;
  o.env.fs = std::move(f);
  o.identity = {"participant", 0};
  return o;
}

json Rec(int i) { return json{{"type", "X"}, {"i", i}}; }

}  // namespace

TEST_CASE("SyncedRecordsSurviveEveryKindOfPowerLoss") {
  using Mode = FaultInjectionFileSystem::DropMode;
  for (Mode mode : {Mode::kAllUnsynced, Mode::kRandomPrefix, Mode::kTearLastRecord}) {
    for (uint64_t seed = 0; seed < 8; ++seed) {
      Scratch dir;
      auto f = std::make_shared<FaultInjectionFileSystem>();
      uint64_t synced = 0;
      {
        auto j = Journal::Open(dir.sub("j"), Jo(f));
        REQUIRE(j.ok());
        for (int i = 0; i < 20; ++i) {
          const bool sync = (i + seed) % 4 == 0;
          REQUIRE(j.value()->Append(Rec(i), json{{"n", i}}, sync).ok());
          if (sync) synced = j.value()->last_seq();
        }
        f->SetActive(false);
      }
      f->DropUnsyncedData(mode, seed);
      f->SetActive(true);
      auto j = Journal::Open(dir.sub("j"), Jo(f));
      REQUIRE(j.ok());
      CHECK(j.value()->last_seq() >= synced);
      CHECK(j.value()->Verify().ok());
    }
  }
}

TEST_CASE("LostSyncedRecordsAreDetectedAtOpen") {
  Scratch dir;
  {
    auto j = Journal::Open(dir.sub("j"), Jo(nullptr));
    REQUIRE(j.ok());
    for (int i = 0; i < 10; ++i) REQUIRE(j.value()->Append(Rec(i), json{{"n", i}}, true).ok());
  }
  // Cut the write-ahead log after its first few hundred bytes: a torn tail to RocksDB, but
  // records the watermark says were synced are gone.
  for (const auto& e : fs::directory_iterator(dir.sub("j"))) {
    if (e.path().extension() == ".log") fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
  }
  auto j = Journal::Open(dir.sub("j"), Jo(nullptr));
  REQUIRE_FALSE(j.ok());
  CHECK(j.status().code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(j.status().message(), Catch::Contains("synced records lost"));
}

TEST_CASE("CleanCloseLeavesAWatermarkNamingTheLastRecord") {
  Scratch dir;
  {
    auto j = Journal::Open(dir.sub("j"), Jo(nullptr));
    REQUIRE(j.ok());
    REQUIRE(j.value()->Append(Rec(0), json{{"n", 0}}, true).ok());
    REQUIRE(j.value()->Append(Rec(1), json{{"n", 1}}, false).ok());
  }
  WatermarkReading w = ReadWatermark(dir.sub("j"), nullptr);
  REQUIRE(w.newest);
  CHECK(w.newest->seq == 2);
  INFO(w.Problems());
  CHECK(w.problems.empty());
  CHECK(w.copy_valid[0]);
  CHECK(w.copy_valid[1]);
}

TEST_CASE("WatermarkCopiesAreRewrittenAlternatelyInPlaceAfterEverySyncedAppend") {
  // Both copies are created once, durably, and then rewritten in place, one per synced append
  // and alternately: after each synced append the newest names exactly that record and the
  // other the synced record before it; no stray file is left beside them.
  Scratch dir;
  auto f = std::make_shared<FaultInjectionFileSystem>();
  {
    auto j = Journal::Open(dir.sub("j"), Jo(f));
    REQUIRE(j.ok());
    uint64_t previous_synced = 0;
    for (int i = 0; i < 30; ++i) {
      const bool sync = i % 3 != 1;
      const uint64_t syncs_before = f->syncs();
      REQUIRE(j.value()->Append(Rec(i), json{{"n", i}}, sync).ok());
      // The watermark adds no sync: a synced append costs the write-ahead log's only.
      CHECK(f->syncs() - syncs_before == (sync ? 1u : 0u));
      WatermarkReading w = ReadWatermark(dir.sub("j"), nullptr);
      INFO("append " << i << ": " << w.Problems());
      REQUIRE(w.newest);
      REQUIRE(w.valid.size() == 2);
      const uint64_t synced = sync ? j.value()->last_seq() : j.value()->last_seq() - 1;
      CHECK(w.newest->seq == synced);
      const uint64_t older = std::min(w.valid[0].seq, w.valid[1].seq);
      if (sync) CHECK(older == previous_synced);
      if (sync) previous_synced = synced;
    }
    CHECK_FALSE(fs::exists(dir.sub("j") + "/" + kWatermarkCopies[0] + ".tmp"));
    CHECK_FALSE(fs::exists(dir.sub("j") + "/" + kWatermarkCopies[1] + ".tmp"));
    CHECK_FALSE(fs::exists(dir.sub("j") + "/" + kWatermarkFile));
    // Power loss: the rewrites were never synced, so what survives may be older but never
    // names a record that is not there, and the copies created durably are not lost.
    f->SetActive(false);
  }
  f->DropUnsyncedData(FaultInjectionFileSystem::DropMode::kAllUnsynced, 1);
  f->SetActive(true);
  auto j = Journal::Open(dir.sub("j"), Jo(f));
  REQUIRE(j.ok());
  REQUIRE(j.value()->watermark_at_open());
  CHECK(j.value()->watermark_at_open()->seq <= j.value()->last_seq());
}

TEST_CASE("PowerLossRightAfterTheFirstSyncedAppendLeavesAValidWatermark") {
  // Before: the watermark file was created unsynced on the first synced append, so a power
  // loss took it and left records without a watermark. Now both copies exist durably from the
  // journal's creation on.
  using Mode = FaultInjectionFileSystem::DropMode;
  for (Mode mode : {Mode::kAllUnsynced, Mode::kRandomPrefix, Mode::kTearLastRecord}) {
    Scratch dir;
    auto f = std::make_shared<FaultInjectionFileSystem>();
    {
      auto j = Journal::Open(dir.sub("j"), Jo(f));
      REQUIRE(j.ok());
      REQUIRE(j.value()->Append(Rec(0), json{{"n", 0}}, true).ok());
      REQUIRE(j.value()->Append(Rec(1), json{{"n", 1}}, false).ok());
      f->SetActive(false);
    }
    f->DropUnsyncedData(mode, 7);
    f->SetActive(true);
    WatermarkReading w = ReadWatermark(dir.sub("j"), f);
    INFO(w.Problems());
    CHECK(w.copy_valid[0]);
    CHECK(w.copy_valid[1]);
    // A read-write open refuses a journal with records and no valid watermark: this one opens.
    auto j = Journal::Open(dir.sub("j"), Jo(f));
    INFO(j.status().ToString());
    REQUIRE(j.ok());
    CHECK(j.value()->last_seq() >= 1);
    REQUIRE(j.value()->watermark_at_open());
    CHECK(j.value()->watermark_at_open()->seq <= j.value()->last_seq());
  }
}

TEST_CASE("ReadWriteOpenRefusesRecordsWithoutAValidWatermarkUnlessAccepted") {
  Scratch dir;
  {
    auto j = Journal::Open(dir.sub("j"), Jo(nullptr));
    REQUIRE(j.ok());
    for (int i = 0; i < 3; ++i) REQUIRE(j.value()->Append(Rec(i), json{{"n", i}}, true).ok());
  }
  for (const char* f : kWatermarkCopies) fs::remove(dir.sub("j") + "/" + f);
  auto refused = Journal::Open(dir.sub("j"), Jo(nullptr));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(refused.status().message(), Catch::Contains("no valid sync watermark"));
  CHECK_FALSE(fs::exists(dir.sub("j") + "/" + kWatermarkCopies[0]));  // nothing written
  JournalOptions o = Jo(nullptr);
  o.accept_unverified = true;
  {
    auto j = Journal::Open(dir.sub("j"), o);
    REQUIRE(j.ok());
    CHECK_THAT(j.value()->unverified_at_open(), Catch::Contains(kWatermarkCopies[1]));
  }
  // The accepted open wrote both copies again, naming the last record.
  auto j = Journal::Open(dir.sub("j"), Jo(nullptr));
  REQUIRE(j.ok());
  CHECK(j.value()->unverified_at_open().empty());
  REQUIRE(j.value()->watermark_at_open());
  CHECK(j.value()->watermark_at_open()->seq == 3);
}

TEST_CASE("WatermarkCopyDecodeRejectsEveryDamage") {
  const std::string good = EncodeWatermarkCopy(7, 42, 0x1234);
  REQUIRE(good.size() == kWatermarkCopyBytes);
  auto w = DecodeWatermarkCopy(good, "A");
  REQUIRE(w.ok());
  CHECK(w.value().generation == 7);
  CHECK(w.value().seq == 42);
  CHECK(w.value().head == "0000000000001234");
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x01;
    CHECK(DecodeWatermarkCopy(bad, "A").status().code() == ErrorCode::kJournalCorrupt);
  }
  CHECK_THAT(DecodeWatermarkCopy(good.substr(0, 17), "A").status().message(),
             Catch::Contains("17 bytes"));
  CHECK_FALSE(DecodeWatermarkCopy(good + "x", "A").ok());
}

TEST_CASE("ArmedCrashPointFiresOnceAtItsPointAndDisarmReportsIt") {
  ArmedCrashPoint crash;
  CHECK_FALSE(crash.ShouldCrash("after_prepare_logged"));  // nothing armed
  crash.Arm("after_prepare_logged");
  CHECK_FALSE(crash.ShouldCrash("before_prepare_logged"));  // another point
  CHECK(crash.ShouldCrash("after_prepare_logged"));
  CHECK_FALSE(crash.ShouldCrash("after_prepare_logged"));  // once only
  CHECK(crash.Disarm());                                   // it fired
  CHECK_FALSE(crash.Disarm());                             // and that is forgotten
  crash.Arm("before_decision_logged");
  CHECK_FALSE(crash.Disarm());  // armed but never reached
  CHECK_FALSE(crash.ShouldCrash("before_decision_logged"));
}
