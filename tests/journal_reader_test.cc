// include/wtx/journal_reader.h: typed history of participant and coordinator journals, and
// verification, through the public API only (plus the test cluster).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"
#include "wtx/journal_reader.h"

using namespace wtx;
using namespace wtx::testing;

namespace {

const HistoryEntry* Find(const JournalHistory& h, const std::string& tx) {
  for (const auto& e : h.entries) {
    if (e.tx == tx) return &e;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("JournalReaderGivesTypedParticipantAndCoordinatorHistory") {
  Cluster c(2, SmallManifest());
  CommitOutcome ok = c.FullCommit("t1", 1);
  REQUIRE(ok.status.ok());
  REQUIRE(ok.decision == Decision::kCommit);
  // A second, full transaction that writes only `norm`: aborted, coverage incomplete.
  BeginRequest b;
  b.tx = "t2";
  b.kind = TxKind::kFull;
  REQUIRE(c.coordinator().Begin(b).status.ok());
  for (int r = 0; r < 2; ++r) {
    Box box = WholeBox(c.manifest().params()[2].shape);
    auto bytes = Pattern(c.manifest(), "norm", box, 2);
    WritePiece w{"norm", "", box, bytes.data(), bytes.size()};
    REQUIRE(c.rank(r).Write({&w, 1}).ok());
  }
  CommitOutcome aborted = c.coordinator().Commit("t2");
  REQUIRE(aborted.decision == Decision::kAbort);

  auto rank = ReadJournalHistory(c.rank_dir(1));
  REQUIRE(rank.ok());
  CHECK(rank->owner == JournalOwner{"participant", 1});
  CHECK(rank->records > 0);
  REQUIRE(rank->entries.size() == 2);
  const HistoryEntry* t1 = Find(*rank, "t1");
  REQUIRE(t1 != nullptr);
  CHECK(t1->outcome == "committed");
  CHECK(t1->kind == TxKind::kFull);
  CHECK(t1->version == ok.version);
  CHECK(t1->vote == std::optional<std::string>("yes"));
  CHECK(t1->coverage.pieces == 4);
  CHECK(t1->coverage.bytes == c.manifest().TotalBytes());
  CHECK(t1->coverage.elements == c.manifest().TotalElements());
  CHECK(t1->coverage.shards == static_cast<int64_t>(c.manifest().TotalShards()));
  CHECK(t1->coverage.missing == 0);
  CHECK(t1->refreshed.size() == 2);
  CHECK(t1->dirty_after == std::optional<bool>(false));
  CHECK(t1->time_micros > 0);
  CHECK(t1->json.find("\"tx\":\"t1\"") != std::string::npos);
  const HistoryEntry* t2 = Find(*rank, "t2");
  REQUIRE(t2 != nullptr);
  CHECK(t2->outcome == "aborted");
  CHECK_FALSE(t2->version.has_value());
  CHECK(t2->reason.find("E_COVERAGE_INCOMPLETE") != std::string::npos);
  CHECK(t2->coverage.missing > 0);
  CHECK(t2->vote == std::optional<std::string>("no"));

  auto coord = ReadJournalHistory(c.coordinator_dir());
  REQUIRE(coord.ok());
  CHECK(coord->owner.role == "coordinator");
  REQUIRE(coord->entries.size() == 2);
  const HistoryEntry* d1 = Find(*coord, "t1");
  REQUIRE(d1 != nullptr);
  CHECK(d1->decision == Decision::kCommit);
  CHECK(d1->outcome == "committed");
  CHECK(d1->version == ok.version);
  REQUIRE(d1->votes.size() == 2);
  for (const auto& v : d1->votes) CHECK(v.vote == "yes");
  const HistoryEntry* d2 = Find(*coord, "t2");
  REQUIRE(d2 != nullptr);
  CHECK(d2->decision == Decision::kAbort);
  REQUIRE(d2->votes.size() == 2);
  CHECK(d2->votes[0].vote == "no");
  CHECK(d2->votes[0].error == "E_COVERAGE_INCOMPLETE");
}

TEST_CASE("JournalReaderVerifiesOwnerAndRefusesCorruptOrMissingJournals") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());

  JournalVerification v = VerifyJournal(c.rank_dir(0));
  CHECK(v.status.ok());
  CHECK(v.owner == JournalOwner{"participant", 0});
  CHECK(v.owner_checked);  // inferred from the directory name "rank-0"
  CHECK(v.records > 0);

  // The wrong expected owner is corruption, naming both.
  JournalVerifyOptions wrong;
  wrong.expect = JournalOwner{"participant", 1};
  JournalVerification w = VerifyJournal(c.rank_dir(0), wrong);
  CHECK(w.status.code() == ErrorCode::kJournalCorrupt);

  // No journal at all.
  TempDir empty;
  JournalVerification none = VerifyJournal(empty.sub("nothing-here"));
  CHECK(none.status.code() == ErrorCode::kNotFound);
  auto missing = ReadJournalHistory(empty.sub("nothing-here"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == ErrorCode::kNotFound);

  // A deleted table/CURRENT file: history is refused, not returned half-read.
  c.Kill(0, /*power_loss=*/false);
  std::filesystem::remove(c.rank_dir(0) + "/CURRENT");
  auto corrupt = ReadJournalHistory(c.rank_dir(0));
  REQUIRE_FALSE(corrupt.ok());
  CHECK(corrupt.status().code() == ErrorCode::kJournalCorrupt);
}

TEST_CASE("JournalReaderGivesATransactionsRecordsTheStoredStateAndAReplay") {
  Cluster c(2, SmallManifest());
  CommitOutcome ok = c.FullCommit("t1", 1);
  REQUIRE(ok.decision == Decision::kCommit);
  auto clean = ReadJournalState(c.rank_dir(1));
  REQUIRE(clean.ok());
  CHECK(clean->serving);
  CHECK_FALSE(clean->dirty);
  CHECK(clean->loaded);
  // t2 begins and writes on rank 0, then stays active: the rank is dirty and not serving.
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  Box box = WholeBox(c.manifest().params()[2].shape);
  auto bytes = Pattern(c.manifest(), "norm", box, 2);
  WritePiece w{"norm", "", box, bytes.data(), bytes.size()};
  REQUIRE(c.rank(0).Write({&w, 1}).ok());

  auto recs = ReadJournalRecords(c.rank_dir(0), "t1");
  REQUIRE(recs.ok());
  std::vector<std::string> types;
  for (const StoredRecord& r : recs->records) {
    CHECK(r.tx == "t1");
    CHECK(nlohmann::json::parse(r.json)["type"] == r.type);
    types.push_back(r.type);
  }
  REQUIRE(types.size() >= 3);
  CHECK(types.front() == "BEGIN");
  CHECK(std::count(types.begin(), types.end(), "PREPARED") == 1);
  auto none = ReadJournalRecords(c.rank_dir(0), "never");
  REQUIRE(none.ok());
  CHECK(none->records.empty());

  auto st = ReadJournalState(c.rank_dir(0));
  REQUIRE(st.ok());
  CHECK(st->owner == JournalOwner{"participant", 0});
  CHECK(st->version == ok.version);
  CHECK(st->committed_tx == std::optional<std::string>("t1"));
  CHECK(st->active_tx == std::optional<std::string>("t2"));
  CHECK(st->dirty);
  CHECK_FALSE(st->in_doubt.has_value());
  CHECK_FALSE(st->serving);
  auto coord = ReadJournalState(c.coordinator_dir());
  REQUIRE(coord.ok());
  CHECK(coord->owner.role == "coordinator");
  CHECK(coord->decisions == 1);
  CHECK(coord->pending.empty());

  auto replay = ReplayJournal(c.rank_dir(0));
  REQUIRE(replay.ok());
  CHECK(replay->matches_stored_state);
  CHECK(replay->records == st->records);
  CHECK(nlohmann::json::parse(replay->state_json)["dirty"] == true);

  // Each view refuses a missing journal as the history does.
  TempDir empty;
  CHECK(ReadJournalState(empty.sub("x")).status().code() == ErrorCode::kNotFound);
  CHECK(ReplayJournal(empty.sub("x")).status().code() == ErrorCode::kNotFound);
  CHECK(ReadJournalRecords(empty.sub("x"), "t1").status().code() == ErrorCode::kNotFound);
}
