// Issue 51, lineage (docs/fleet.md): every commit is a step of a lineage; a rank never commits a
// step at or below its committed one, across power loss and coordinator restarts; a journal
// belongs to one lineage of one model; the records that carry it decode as they encode.
#include <catch2/catch.hpp>

#include "src/txn/coordinator_records.h"
#include "src/txn/decision_log_records.h"
#include "src/txn/participant_records.h"
#include "tests/test_util.h"
#include "wtx/content_hash.h"
#include "wtx/journal_reader.h"

using namespace wtx;
using namespace wtx::testing;

namespace {

CommitOutcome StepCommit(Cluster& c, const std::string& tx, std::optional<int64_t> step,
                         const std::string& lineage = "", uint32_t seed = 1) {
  BeginRequest b = Req(tx, TxKind::kFull);
  b.step = step;
  b.lineage = lineage;
  BeginOutcome bo = c.coordinator().Begin(b);
  if (!bo.status.ok()) {
    CommitOutcome o;
    o.status = bo.status;
    return o;
  }
  REQUIRE(bo.step.has_value());
  REQUIRE(c.WriteAll(seed).ok());
  REQUIRE(c.RefreshAll().ok());
  return c.coordinator().Commit(tx);
}

// A participant alone on `dir` that commits one full update (it is its own coordinator).
Status CommitAlone(Participant& p, const std::string& tx, std::optional<int64_t> step) {
  BeginRequest b = Req(tx, TxKind::kFull);
  b.step = step;
  WTX_RETURN_IF_ERROR(p.Begin(b));
  const Manifest& m = p.manifest();
  for (const auto& ps : m.params()) {
    auto bytes = Pattern(m, ps.name, WholeBox(ps.shape), 5);
    WritePiece w{ps.name, "", std::nullopt, bytes.data(), bytes.size()};
    WTX_RETURN_IF_ERROR(p.Write({&w, 1}));
  }
  WTX_RETURN_IF_ERROR(p.Refresh("*").status());
  WTX_ASSIGN_OR_RETURN(v, p.Prepare(tx));
  if (!v.yes) return Status(v.error, v.message);
  return p.Decide(tx, Decision::kCommit, CombineRankDigests({&v.digest, 1}));
}

ParticipantOptions AloneOptions(const std::string& dir) {
  ParticipantOptions o;
  o.journal_dir = dir;
  o.kernel_identity = "k1";
  return o;
}

}  // namespace

TEST_CASE("StepRegressionIsRefusedAndChangesNothing") {
  Cluster c(2, SmallManifest());
  CommitOutcome o = StepCommit(c, "t1", 5, "policy");
  REQUIRE(o.status.ok());
  CHECK(o.step == 5);
  const RankStatus before = c.rank(1).status();
  for (int64_t step : {5, 4, 0}) {
    CommitOutcome back = StepCommit(c, "back" + std::to_string(step), step);
    CHECK(back.status.code() == ErrorCode::kStepRegression);
    CHECK_THAT(back.status.message(), Catch::Contains("step " + std::to_string(step)));
  }
  const RankStatus after = c.rank(1).status();
  CHECK(after.version == before.version);
  CHECK(after.step == 5);
  CHECK(after.serving);
  CHECK(StepCommit(c, "t2", 6).status.ok());
}

TEST_CASE("StepSurvivesPowerLossOfARank") {
  Cluster c(2, SmallManifest());
  REQUIRE(StepCommit(c, "t1", 3, "policy").status.ok());
  c.Kill(0, /*power_loss=*/true);
  REQUIRE(c.Restart(0).ok());
  const RankStatus s = c.rank(0).status();
  CHECK(s.step == 3);
  CHECK(s.lineage == "policy");
  CommitOutcome back = StepCommit(c, "t2", 3);
  CHECK(back.status.code() == ErrorCode::kStepRegression);
  // The restarted rank is not loaded: only a full update of a later step serves it again.
  CommitOutcome next = StepCommit(c, "t3", std::nullopt);
  REQUIRE(next.status.ok());
  CHECK(next.step == 4);
  CHECK(c.rank(0).status().serving);
}

TEST_CASE("RestartedCoordinatorNumbersFromTheHighestLoggedStep") {
  Cluster c(2, SmallManifest());
  REQUIRE(StepCommit(c, "t1", 9, "policy").status.ok());
  REQUIRE(c.RestartCoordinator().ok());
  auto decisions = c.coordinator().decisions();
  REQUIRE(!decisions.empty());
  CHECK(decisions.back().step == 9);
  CHECK(decisions.back().lineage == "policy");
  CommitOutcome o = StepCommit(c, "t2", std::nullopt);
  REQUIRE(o.status.ok());
  CHECK(o.step == 10);
  CHECK(o.lineage == "policy");
}

TEST_CASE("AbortedStepCanBeRetried") {
  Cluster c(2, SmallManifest());
  REQUIRE(StepCommit(c, "t1", 1).status.ok());
  BeginRequest b = Req("t2", TxKind::kFull);
  b.step = 2;
  REQUIRE(c.coordinator().Begin(b).status.ok());
  REQUIRE(c.coordinator().Abort("t2").status.ok());
  CHECK(c.rank(0).status().step == 1);
  CHECK(StepCommit(c, "t3", 2).status.ok());
}

TEST_CASE("JournalOfAnotherModelOrLineageIsRefusedUnlessStartedAnew") {
  TempDir dir;
  {
    ParticipantOptions o = AloneOptions(dir.path());
    o.lineage = "policy-a";
    auto p = Participant::Open(o, SmallManifest());
    REQUIRE(p.ok());
    REQUIRE(CommitAlone(*p.value(), "t1", 7).ok());
    CHECK(p.value()->status().step == 7);
  }
  nlohmann::json other_json = SmallManifestJson();
  other_json["params"][2]["shape"] = {16};  // another model: norm is twice as long
  ManifestPtr other = ParseManifest(other_json).value();
  REQUIRE(other->Fingerprint() != SmallManifest()->Fingerprint());
  {
    auto p = Participant::Open(AloneOptions(dir.path()), other);
    REQUIRE(!p.ok());
    CHECK(p.status().code() == ErrorCode::kManifestMismatch);
    CHECK_THAT(p.status().message(), Catch::Contains(other->Fingerprint()));
    CHECK_THAT(p.status().message(), Catch::Contains(SmallManifest()->Fingerprint()));
    CHECK_THAT(p.status().message(), Catch::Contains("step 7"));
  }
  {
    ParticipantOptions o = AloneOptions(dir.path());
    o.lineage = "policy-b";
    auto p = Participant::Open(o, SmallManifest());
    REQUIRE(!p.ok());
    CHECK(p.status().code() == ErrorCode::kLineageMismatch);
  }
  {
    ParticipantOptions o = AloneOptions(dir.path());
    o.lineage = "policy-b";
    o.new_lineage = true;
    auto p = Participant::Open(o, other);
    REQUIRE(p.ok());
    const RankStatus s = p.value()->status();
    CHECK(s.lineage == "policy-b");
    CHECK(!s.step);
    CHECK(!s.version);
    CHECK(!s.serving);
    // A step of the new lineage may be any: nothing of it is committed.
    REQUIRE(CommitAlone(*p.value(), "t2", 0).ok());
    CHECK(p.value()->status().serving);
  }
  {
    // Reopened (its journal verified: replay equals the stored state) as the new lineage.
    ParticipantOptions o = AloneOptions(dir.path());
    o.lineage = "policy-b";
    auto p = Participant::Open(o, other);
    REQUIRE(p.ok());
    CHECK(p.value()->status().step == 0);
    BeginRequest b = Req("t3", TxKind::kFull);
    b.lineage = "policy-a";
    Status s = p.value()->Begin(b);
    CHECK(s.code() == ErrorCode::kLineageMismatch);
  }
}

TEST_CASE("StepRecordsRoundTrip") {
  BeginRecord b;
  b.tx = "t";
  b.lineage = "L";
  b.step = 42;
  nlohmann::json j = Encode(b);
  j["seq"] = 2;
  auto back = DecodeBegin(j);
  REQUIRE(back.ok());
  CHECK(back.value().lineage == "L");
  CHECK(back.value().step == 42);
  j["step"] = -1;
  CHECK(DecodeBegin(j).status().code() == ErrorCode::kJournalCorrupt);

  LineageRecord l{"new", "fp2", "old", "fp1", 9, 123};
  nlohmann::json lj = Encode(l);
  lj["seq"] = 3;
  auto lback = DecodeLineage(lj);
  REQUIRE(lback.ok());
  CHECK(lback.value().previous_step == 9);
  CHECK(lback.value().previous_fingerprint == "fp1");

  DecisionRecord d;
  d.tx = "t";
  d.decision = Decision::kCommit;
  d.version = "v";
  d.lineage = "L";
  d.step = 7;
  nlohmann::json dj = Encode(d);
  dj["seq"] = 4;
  auto dback = DecodeDecision(dj);
  REQUIRE(dback.ok());
  CHECK(dback.value().step == 7);
  CHECK(dback.value().lineage == "L");

  LoggedDecision ld;
  ld.tx = "t";
  ld.decision = Decision::kCommit;
  ld.version = "v";
  ld.lineage = "L";
  ld.step = 11;
  auto enc = EncodeDecisionRecord(ld);
  REQUIRE(enc.ok());
  auto ldback = DecodeDecisionRecord(enc.value(), "t");
  REQUIRE(ldback.ok());
  CHECK(ldback.value().step == 11);
  CHECK(ldback.value().lineage == "L");
}

TEST_CASE("NoStepFollowsTheLargestOne") {
  Cluster c(2, SmallManifest());
  REQUIRE(StepCommit(c, "t1", INT64_MAX).status.ok());
  CommitOutcome next = StepCommit(c, "t2", std::nullopt);
  CHECK(next.status.code() == ErrorCode::kStepRegression);
  CHECK_THAT(next.status.message(), Catch::Contains("no step follows"));
  CHECK(c.rank(0).status().serving);
}

namespace {

HistoryEntry Entry(std::string tx, int64_t begin, int64_t total, std::string outcome,
                   std::optional<std::string> version = std::nullopt, bool dirty_after = false) {
  HistoryEntry e;
  e.tx = std::move(tx);
  e.time_micros = begin;
  e.outcome = std::move(outcome);
  if (e.outcome != "active" && e.outcome != "prepared") e.timings_us["total"] = total;
  e.version = std::move(version);
  e.dirty_after = dirty_after;
  e.reason = e.outcome == "aborted" ? "E_COVERAGE_INCOMPLETE" : "";
  e.lineage = "grpo";
  return e;
}

}  // namespace

TEST_CASE("ServedAtFollowsCommitsOpenUpdatesAndAborts") {
  JournalHistory h;
  h.owner.role = "participant";
  h.entries = {Entry("t1", 100, 10, "committed", "v1"),        // serves v1 from 110
               Entry("t2", 200, 10, "aborted", std::nullopt),  // clean abort: v1 again from 210
               Entry("t3", 300, 10, "aborted", std::nullopt, true),  // dirty from 310
               Entry("t4", 400, 10, "committed", "v4"),              // v4 from 410
               Entry("t5", 500, 0, "active")};                       // open from 500 on
  h.entries[0].step = 1;
  h.entries[3].step = 4;
  auto at = [&](int64_t t) {
    auto r = ServedAtTime(h, t);
    REQUIRE(r.ok());
    return r.value();
  };
  ServedAt s = at(50);
  CHECK_FALSE(s.serving);
  CHECK(s.reason == "no version committed yet");
  CHECK(s.until_micros == 100);
  s = at(105);
  CHECK_FALSE(s.serving);
  CHECK_THAT(s.reason, Catch::Contains("update 't1' in progress"));
  s = at(150);
  CHECK(s.serving);
  CHECK(s.version == "v1");
  CHECK(s.step == 1);
  CHECK(s.since_micros == 110);
  CHECK(s.until_micros == 200);
  s = at(250);
  CHECK(s.serving);
  CHECK(s.version == "v1");
  CHECK(s.since_micros == 210);
  s = at(350);
  CHECK_FALSE(s.serving);
  CHECK(s.version == "v1");  // still the committed one, held
  CHECK_THAT(s.reason, Catch::Contains("dirty: 't3' aborted"));
  s = at(450);
  CHECK(s.serving);
  CHECK(s.version == "v4");
  CHECK(s.committed_tx == "t4");
  CHECK(s.step == 4);
  s = at(10'000);
  CHECK_FALSE(s.serving);
  CHECK_THAT(s.reason, Catch::Contains("update 't5' in progress"));
  CHECK_FALSE(s.until_micros.has_value());
  h.owner.role = "coordinator";
  CHECK(ServedAtTime(h, 150).status().code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("ServedAtReadsARanksRealJournal") {
  Cluster c(1, SmallManifest());
  REQUIRE(StepCommit(c, "t1", 3, "policy").status.ok());
  auto h = ReadJournalHistory(c.rank_dir(0));
  REQUIRE(h.ok());
  auto s = ServedAtTime(h.value(), INT64_MAX / 2);
  REQUIRE(s.ok());
  CHECK(s->serving);
  CHECK(s->committed_tx == "t1");
  CHECK(s->step == 3);
  CHECK(s->lineage == "policy");
  CHECK(s->version == c.rank(0).status().version);
}
