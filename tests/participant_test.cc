// The rules of one rank: coverage, scope, staleness, the dirty rule, patches, rollback.
#include <catch2/catch.hpp>
#include <cstring>

#include "tests/test_util.h"
#include "wtx/content_hash.h"

using namespace wtx;
using namespace wtx::testing;

namespace {

Status WriteBox(Participant& p, const std::string& param, const std::string& shard,
                std::optional<Box> box, uint32_t seed = 1) {
  const Manifest& m = p.manifest();
  if (!m.FindParam(param)) {
    uint8_t byte = 0;
    WritePiece w{param, shard, box, &byte, 1};
    return p.Write({&w, 1});
  }
  const ParamSpec& ps = m.params()[*m.FindParam(param)];
  if (!shard.empty() && !m.FindShard(*m.FindParam(param), shard)) {
    uint8_t byte = 0;
    WritePiece w{param, shard, box, &byte, 1};
    return p.Write({&w, 1});
  }
  Box b = box ? *box
              : (shard.empty() ? WholeBox(ps.shape)
                               : ps.shards[*m.FindShard(*m.FindParam(param), shard)].box);
  auto bytes = Pattern(m, param, b, seed);
  WritePiece w{param, shard, box, bytes.data(), bytes.size()};
  return p.Write({&w, 1});
}

Status PatchIdx(Participant& p, const std::string& source, std::vector<int64_t> idx, uint8_t value,
                int part = 0, int parts = 1) {
  const Manifest& m = p.manifest();
  const auto& refs = m.ShardsOfSource(source);
  size_t esz = refs.empty() ? 1 : DTypeSize(m.params()[refs[0].param].dtype);
  std::vector<uint8_t> vals(idx.size() * esz, value);
  PatchRequest r;
  r.source = source;
  r.indices = idx;
  r.values = vals.data();
  r.value_bytes = vals.size();
  r.part = part;
  r.parts = parts;
  return p.Patch(r);
}

const MissingPiece* FindMissing(const Vote& v, const std::string& param, const std::string& shard) {
  for (const auto& m : v.missing) {
    if (m.param == param && m.shard == shard) return &m;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("EmptyTransactionIsNoopAndNeverCleans") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  REQUIRE(c.rank(0).status().serving);
  // A half-failed update: rank 1 writes only q of qkv.
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "", std::nullopt).ok());
  REQUIRE(WriteBox(c.rank(1), "qkv", "q", std::nullopt).ok());
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.status.code() == ErrorCode::kVoteNo);
  CHECK(o.decision == Decision::kAbort);
  for (int r = 0; r < 2; ++r) {
    CHECK(c.rank(r).status().dirty);
    CHECK_FALSE(c.rank(r).status().serving);
  }
  // An empty session afterwards reports success but cleans nothing.
  REQUIRE(c.coordinator().Begin(Req("t3", TxKind::kFull)).status.ok());
  CommitOutcome e = c.coordinator().Commit("t3");
  CHECK(e.status.ok());
  CHECK(e.decision == Decision::kNoop);
  for (int r = 0; r < 2; ++r) {
    CHECK(c.rank(r).status().dirty);
    CHECK_FALSE(c.rank(r).status().serving);
    CHECK_FALSE(c.rank(r).status().active_tx);
  }
  // Nor can a delta build on the mixed state.
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  BeginOutcome d = c.coordinator().Begin(Req("t4", TxKind::kDelta, v1, {}, {"k_proj"}));
  CHECK(d.status.code() == ErrorCode::kDirty);
  // Only a full commit cleans.
  REQUIRE(c.FullCommit("t5", 5).status.ok());
  CHECK_FALSE(c.rank(0).status().dirty);
  CHECK(c.rank(1).status().serving);
}

TEST_CASE("RankTurnsDirtyAtFirstWriteNotAtBegin") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"norm"})).status.ok());
  CHECK_FALSE(c.rank(0).status().dirty);
  CHECK(c.rank(0).status().serving);
  REQUIRE(PatchIdx(c.rank(0), "norm", {3}, 7).ok());
  CHECK(c.rank(0).status().dirty);
  CHECK_FALSE(c.rank(0).status().serving);
  CommitOutcome o = c.coordinator().Commit("t2");
  REQUIRE(o.status.ok());
  CHECK(o.decision == Decision::kCommit);
  CHECK(o.version != v1);
  CHECK_FALSE(c.rank(0).status().dirty);
  CHECK(c.rank(0).status().serving);
  CHECK(c.rank(0).status().version == o.version);
}

TEST_CASE("FusedQkvWithOnlyQIsIncompleteNamingKAndV") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  for (const char* p : {"kv_b", "norm", "packed"})
    REQUIRE(WriteBox(c.rank(0), p, "", std::nullopt).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "q", std::nullopt).ok());
  REQUIRE(c.RefreshAll().ok());
  auto v = c.rank(0).Prepare("t1");
  REQUIRE(v.ok());
  CHECK_FALSE(v->yes);
  CHECK(v->error == ErrorCode::kCoverageIncomplete);
  const MissingPiece* k = FindMissing(*v, "qkv", "k");
  const MissingPiece* vv = FindMissing(*v, "qkv", "v");
  REQUIRE(k);
  REQUIRE(vv);
  CHECK(k->box == Box{{16, 24}, {0, 8}});
  CHECK(vv->box == Box{{24, 32}, {0, 8}});
  CHECK_FALSE(FindMissing(*v, "qkv", "q"));
  CHECK(v->missing_total == 2);
}

TEST_CASE("DuplicateShardIsRejectedAndChangesNothing") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "q", std::nullopt, 1).ok());
  std::vector<uint8_t> before = LiveBytes(c.rank(0).memory(), 0);
  Status s = WriteBox(c.rank(0), "qkv", "q", std::nullopt, 2);
  CHECK(s.code() == ErrorCode::kDuplicateWrite);
  // An overlapping sub-box of another write is a duplicate too.
  CHECK(WriteBox(c.rank(0), "qkv", "", Box{{15, 17}, {0, 8}}, 3).code() ==
        ErrorCode::kDuplicateWrite);
  std::vector<uint8_t> after = LiveBytes(c.rank(0).memory(), 0);
  CHECK(before == after);
  // A duplicated shard must not complete the module early: k and v are still missing.
  for (const char* p : {"kv_b", "norm", "packed"})
    REQUIRE(WriteBox(c.rank(0), p, "", std::nullopt).ok());
  REQUIRE(c.RefreshAll().ok());
  auto v = c.rank(0).Prepare("t1");
  REQUIRE(v.ok());
  CHECK(v->error == ErrorCode::kCoverageIncomplete);
  CHECK(FindMissing(*v, "qkv", "k"));
}

TEST_CASE("OverlappingPiecesOfOneWriteAreRejectedAtomically") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  auto a = Pattern(c.manifest(), "qkv", Box{{0, 4}, {0, 8}}, 1);
  auto b = Pattern(c.manifest(), "qkv", Box{{3, 6}, {0, 8}}, 1);
  WritePiece w[2] = {{"qkv", "", Box{{0, 4}, {0, 8}}, a.data(), a.size()},
                     {"qkv", "", Box{{3, 6}, {0, 8}}, b.data(), b.size()}};
  CHECK(c.rank(0).Write(w).code() == ErrorCode::kDuplicateWrite);
  // Nothing landed: the first piece alone is still writable.
  CHECK(c.rank(0).Write({&w[0], 1}).ok());
  CHECK(c.rank(0).status().dirty);
}

TEST_CASE("PartialRowWritesCoverExactlyAndGapsAreReportedAsBoxes") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  for (const char* p : {"kv_b", "norm", "packed"})
    REQUIRE(WriteBox(c.rank(0), p, "", std::nullopt).ok());
  // Columns 0-3 of every row, then columns 3-8 except element (5, 6).
  REQUIRE(WriteBox(c.rank(0), "qkv", "", Box{{0, 32}, {0, 3}}).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "", Box{{0, 5}, {3, 8}}).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "", Box{{5, 6}, {3, 6}}).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "", Box{{5, 6}, {7, 8}}).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "", Box{{6, 32}, {3, 8}}).ok());
  REQUIRE(c.RefreshAll().ok());
  auto v = c.rank(0).Prepare("t1");
  REQUIRE(v.ok());
  REQUIRE(v->missing.size() == 1);
  CHECK(v->missing[0].shard == "q");
  CHECK(v->missing[0].box == Box{{5, 6}, {6, 7}});
}

TEST_CASE("CompletedPiecewiseWritesCommit") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  for (const char* p : {"kv_b", "norm", "packed"})
    REQUIRE(WriteBox(c.rank(0), p, "", std::nullopt).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "", Box{{0, 32}, {0, 3}}).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "", Box{{0, 32}, {3, 8}}).ok());
  REQUIRE(c.RefreshAll().ok());
  CommitOutcome o = c.coordinator().Commit("t1");
  CHECK(o.status.ok());
  CHECK(o.decision == Decision::kCommit);
  CHECK(c.rank(0).CoverageMemoryBytes() < 4096);
}

TEST_CASE("WritesOutsideTheParameterOrShardAreRejected") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  CHECK(WriteBox(c.rank(0), "qkv", "", Box{{30, 33}, {0, 8}}).code() == ErrorCode::kOutOfRange);
  CHECK(WriteBox(c.rank(0), "qkv", "k", Box{{15, 17}, {0, 8}}).code() == ErrorCode::kOutOfRange);
  CHECK(WriteBox(c.rank(0), "nope", "", Box{{0, 1}}).code() == ErrorCode::kUnknownParam);
  CHECK(WriteBox(c.rank(0), "qkv", "z", std::nullopt).code() == ErrorCode::kUnknownParam);
  // Wrong rank of box, empty box, wrong byte count.
  std::vector<uint8_t> bytes(16);
  WritePiece w{"qkv", "", Box{{0, 1}}, bytes.data(), bytes.size()};
  CHECK(c.rank(0).Write({&w, 1}).code() == ErrorCode::kBadWrite);
  w.box = Box{{2, 2}, {0, 8}};
  CHECK(c.rank(0).Write({&w, 1}).code() == ErrorCode::kBadWrite);
  w.box = Box{{0, 1}, {0, 8}};
  w.bytes = 15;
  CHECK(c.rank(0).Write({&w, 1}).code() == ErrorCode::kBadWrite);
  CHECK_FALSE(c.rank(0).status().dirty);
}

TEST_CASE("MisuseOutsideATransactionIsRefused") {
  Cluster c(1, SmallManifest());
  CHECK(WriteBox(c.rank(0), "norm", "", std::nullopt).code() == ErrorCode::kNoTx);
  CHECK(PatchIdx(c.rank(0), "norm", {0}, 1).code() == ErrorCode::kNoTx);
  CHECK(c.coordinator().Commit("ghost").status.code() == ErrorCode::kNoTx);
  CHECK(c.coordinator().Abort("ghost").status.code() == ErrorCode::kNoTx);
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  CHECK(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.code() == ErrorCode::kTxActive);
  // After prepare, no more changes.
  REQUIRE(c.WriteAll(1).ok());
  REQUIRE(c.RefreshAll().ok());
  REQUIRE(c.rank(0).Prepare("t1").ok());
  CHECK(WriteBox(c.rank(0), "norm", "", std::nullopt).code() == ErrorCode::kTxActive);
}

TEST_CASE("PartialScopeRequiresCleanMatchingBaseAndStaysInScope") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  CHECK(c.coordinator().Begin(Req("t2", TxKind::kPartial, "bogus", {"attn"})).status.code() ==
        ErrorCode::kBaseMismatch);
  CHECK(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"ghost"})).status.code() ==
        ErrorCode::kUnknownParam);
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"attn"})).status.ok());
  CHECK(WriteBox(c.rank(0), "norm", "", std::nullopt).code() == ErrorCode::kOutOfScope);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(WriteBox(c.rank(r), "qkv", "", std::nullopt, 2).ok());
    REQUIRE(WriteBox(c.rank(r), "kv_b", "", std::nullopt, 2).ok());
  }
  // Written sources make W_UK_T and scales stale until refreshed after the writes.
  auto v = c.rank(0).Prepare("t2");
  REQUIRE(v.ok());
  CHECK(v->error == ErrorCode::kStaleDerived);
  CHECK(v->stale.size() == 2);
  REQUIRE(c.coordinator().Abort("t2").status.ok());
  CHECK(c.rank(0).status().dirty);
  REQUIRE(c.FullCommit("t3", 1).status.ok());
  // The same bytes as t1: the same version.
  CHECK(c.coordinator().CommittedVersion("t3") == v1);
  REQUIRE(c.coordinator().Begin(Req("t4", TxKind::kPartial, v1, {"attn"})).status.ok());
  for (int r = 0; r < 2; ++r) {
    REQUIRE(WriteBox(c.rank(r), "qkv", "", std::nullopt, 2).ok());
    REQUIRE(WriteBox(c.rank(r), "kv_b", "", std::nullopt, 2).ok());
  }
  REQUIRE(c.RefreshAll().ok());
  CommitOutcome o = c.coordinator().Commit("t4");
  REQUIRE(o.status.ok());
  CHECK(o.version != v1);
  CHECK(c.rank(1).status().serving);
}

TEST_CASE("PartialMissingAParamInScopeIsIncomplete") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"attn", "rest"})).status.ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "", std::nullopt, 2).ok());
  REQUIRE(WriteBox(c.rank(0), "norm", "", std::nullopt, 2).ok());
  REQUIRE(WriteBox(c.rank(0), "packed", "", std::nullopt, 2).ok());
  REQUIRE(c.RefreshAll().ok());
  auto v = c.rank(0).Prepare("t2");
  REQUIRE(v.ok());
  CHECK(v->error == ErrorCode::kCoverageIncomplete);
  REQUIRE(FindMissing(*v, "kv_b", "0"));
}

TEST_CASE("StaleDerivedOrderMattersRefreshBeforeWriteDoesNotCount") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"kv_b"})).status.ok());
  REQUIRE(c.rank(0).Refresh("W_UK_T").ok());
  REQUIRE(PatchIdx(c.rank(0), "kv_b", {0, 5}, 9).ok());
  CHECK(c.rank(0).status().stale_derived == std::vector<std::string>{"W_UK_T"});
  auto v = c.rank(0).Prepare("t2");
  REQUIRE(v.ok());
  CHECK(v->error == ErrorCode::kStaleDerived);
  REQUIRE(v->stale.size() == 1);
  CHECK(v->stale[0].name == "W_UK_T");
  CHECK(v->stale[0].phase == Phase::kAttention);
  CHECK(v->stale[0].written_sources == std::vector<std::string>{"kv_b"});
}

TEST_CASE("RefreshOfUnknownDerivedIsRejected") {
  Cluster c(1, SmallManifest());
  CHECK(c.rank(0).Refresh("nope").status().code() == ErrorCode::kUnknownParam);
}

TEST_CASE("PatchesMapSourceIndicesThroughShardTranslation") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"k_proj"})).status.ok());
  // k_proj [8, 8] lands at qkv rows 16..24: source index 19 = (2, 3) -> live (18, 3).
  REQUIRE(PatchIdx(c.rank(0), "k_proj", {19}, 0xAB).ok());
  auto qkv = LiveBytes(c.rank(0).memory(), 0);
  const size_t off = (18 * 8 + 3) * 2;
  CHECK(qkv[off] == 0xAB);
  CHECK(qkv[off + 1] == 0xAB);
  CHECK(PatchIdx(c.rank(0), "k_proj", {64}, 1).code() ==
        ErrorCode::kDuplicateWrite);  // part 0 again
}

TEST_CASE("PatchIndexOutsideSourceOrDuplicatedIsRejected") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(
      c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"k_proj", "q_proj"})).status.ok());
  CHECK(PatchIdx(c.rank(0), "k_proj", {64}, 1).code() == ErrorCode::kOutOfRange);
  CHECK(PatchIdx(c.rank(0), "k_proj", {3, 3}, 1).code() == ErrorCode::kDuplicateWrite);
  CHECK(PatchIdx(c.rank(0), "v_proj", {3}, 1).code() == ErrorCode::kOutOfScope);
  CHECK(PatchIdx(c.rank(0), "k_proj", {3}, 1, 2, 2).code() == ErrorCode::kBadWrite);
  REQUIRE(PatchIdx(c.rank(0), "k_proj", {3}, 1, 0, 2).ok());
  CHECK(PatchIdx(c.rank(0), "k_proj", {3}, 1, 1, 2).code() == ErrorCode::kDuplicateWrite);
  CHECK(PatchIdx(c.rank(0), "k_proj", {4}, 1, 1, 3).code() == ErrorCode::kBadWrite);
  CHECK(WriteBox(c.rank(0), "qkv", "k", std::nullopt).code() == ErrorCode::kOutOfScope);
  CHECK_FALSE(c.rank(0).status().serving);
}

TEST_CASE("PackedLayoutRefusesCheckpointCoordinatePatches") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"packed_src"})).status.ok());
  CHECK(PatchIdx(c.rank(0), "packed_src", {1}, 1).code() == ErrorCode::kLayoutMismatch);
  CHECK_FALSE(c.rank(0).status().dirty);
  CHECK(c.rank(0).RecomputeDigest().value().size() == 32);
}

TEST_CASE("DeltaPartsMustAllArriveExactlyOnce") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"norm"})).status.ok());
  for (int r = 0; r < 2; ++r) REQUIRE(PatchIdx(c.rank(r), "norm", {1}, 3, 0, 3).ok());
  for (int r = 0; r < 2; ++r) REQUIRE(PatchIdx(c.rank(r), "norm", {2}, 3, 2, 3).ok());
  REQUIRE(PatchIdx(c.rank(0), "norm", {5}, 3, 1, 3).ok());
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.status.code() == ErrorCode::kVoteNo);
  const Vote& v = o.votes[1].vote;
  CHECK(v.error == ErrorCode::kCoverageIncomplete);
  REQUIRE(v.missing.size() == 1);
  CHECK(v.missing[0].source == "norm");
  CHECK(v.missing[0].missing_parts == std::vector<int>{1});
  CHECK(v.missing[0].parts == 3);
  CHECK(o.votes[0].kind == VoteReport::Kind::kYes);
}

TEST_CASE("DeltaSourceHeldByNoRankIsRejectedAtBegin") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  CHECK(c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"ghost"})).status.code() ==
        ErrorCode::kUnknownParam);
  CHECK_FALSE(c.rank(0).status().active_tx);
}

TEST_CASE("KernelIdentityChangedDuringTransactionVotesNo") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  REQUIRE(c.WriteAll(1).ok());
  REQUIRE(c.RefreshAll().ok());
  c.rank(1).SetKernelIdentity("k2");
  CommitOutcome o = c.coordinator().Commit("t1");
  CHECK(o.status.code() == ErrorCode::kVoteNo);
  CHECK(o.votes[1].vote.error == ErrorCode::kKernelIdentityChanged);
  // Ranks now disagree: nothing can begin, and a refused begin changes nothing.
  BeginOutcome b = c.coordinator().Begin(Req("t2", TxKind::kFull));
  CHECK(b.status.code() == ErrorCode::kManifestMismatch);
  CHECK_FALSE(c.rank(0).status().active_tx);
  c.rank(0).SetKernelIdentity("k2");
  CHECK(c.FullCommit("t3", 1).status.ok());
}

// Two ranks whose manifests differ (rank 1's third parameter has another shape), and a
// coordinator over them.
struct MismatchedRanks {
  TempDir dir;
  ManifestPtr m0, m1;
  InProcTransport t{2};
  std::vector<std::unique_ptr<Participant>> ps;
  std::unique_ptr<Coordinator> c;
  MismatchedRanks() {
    auto j = SmallManifestJson();
    m0 = ParseManifest(j).value();
    j["params"][2]["shape"] = nlohmann::json::array({16});
    m1 = ParseManifest(j).value();
    for (int r = 0; r < 2; ++r) {
      ps.push_back(Open(r, "rank-" + std::to_string(r), r ? m1 : m0));
      t.SetParticipant(r, ps.back().get());
    }
    CoordinatorOptions co;
    co.journal_dir = dir.sub("coordinator");
    c = std::move(Coordinator::Open(co, &t).value());
  }
  std::unique_ptr<Participant> Open(int rank, const std::string& sub, ManifestPtr m) {
    ParticipantOptions o;
    o.rank = rank;
    o.journal_dir = dir.sub(sub);
    return std::move(Participant::Open(std::move(o), std::move(m)).value());
  }
};

TEST_CASE("ManifestFingerprintMismatchRefusesBegin") {
  MismatchedRanks x;
  BeginOutcome b = x.c->Begin(Req("t1", TxKind::kFull));
  CHECK(b.status.code() == ErrorCode::kManifestMismatch);
  REQUIRE(b.errors.size() == 1);
  CHECK(b.errors[0].rank == 1);
  CHECK_FALSE(x.ps[0]->status().active_tx);
}

TEST_CASE("RanksOfDifferentManifestGroupsMayHoldDifferentManifests") {
  // Pipeline stages: ranks 0 and 2 hold one manifest, rank 1 another; with the groups declared
  // the begin goes through, and a rank that disagrees with its own group is refused.
  TempDir dir;
  auto j = SmallManifestJson();
  ManifestPtr a = ParseManifest(j).value();
  j["params"][2]["shape"] = nlohmann::json::array({16});
  ManifestPtr b = ParseManifest(j).value();
  InProcTransport t{3};
  std::vector<std::unique_ptr<Participant>> ps;
  for (int r = 0; r < 3; ++r) {
    ParticipantOptions o;
    o.rank = r;
    o.journal_dir = dir.sub("rank-" + std::to_string(r));
    ps.push_back(std::move(Participant::Open(std::move(o), r == 1 ? b : a).value()));
    t.SetParticipant(r, ps.back().get());
  }
  CoordinatorOptions co;
  co.journal_dir = dir.sub("coordinator");
  co.manifest_groups = {0, 1, 0};
  auto c = std::move(Coordinator::Open(co, &t).value());
  BeginOutcome ok = c->Begin(Req("t1", TxKind::kFull));
  CHECK(ok.status.ok());
  REQUIRE(c->Abort("t1").status.ok());
  // Rank 2 declared with rank 1's group: it disagrees with rank 1, which is named.
  CoordinatorOptions wrong = co;
  wrong.journal_dir = dir.sub("coordinator-2");
  wrong.manifest_groups = {0, 1, 1};
  auto c2 = std::move(Coordinator::Open(wrong, &t).value());
  BeginOutcome refused = c2->Begin(Req("t2", TxKind::kFull));
  CHECK(refused.status.code() == ErrorCode::kManifestMismatch);
  REQUIRE(refused.errors.size() == 1);
  CHECK(refused.errors[0].rank == 2);
  CHECK(refused.errors[0].status.message().find("rank 1's") != std::string::npos);
}

TEST_CASE("ManifestGroupsOfTheWrongSizeAreRefusedAtOpen") {
  TempDir dir;
  InProcTransport t{2};
  CoordinatorOptions co;
  co.journal_dir = dir.sub("coordinator");
  co.manifest_groups = {0, 1, 2};
  auto c = Coordinator::Open(co, &t);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == ErrorCode::kInvalidArgument);
  CHECK(c.status().message().find("manifest_groups has 3 entries for 2 ranks") !=
        std::string::npos);
}

TEST_CASE("ManifestMismatchIsReportedAloneWhenARankWouldAlsoRefuseTheBegin") {
  // Describe and CheckBegin go out in one round, but the result is as if the checks followed
  // the comparison: a mismatch is the only error, not rank 0's refusal behind it; once the
  // manifests agree, the refusal is what is reported.
  MismatchedRanks x;
  REQUIRE(x.ps[0]->Begin(Req("elsewhere", TxKind::kFull)).ok());  // rank 0 refuses a new begin
  BeginOutcome b = x.c->Begin(Req("t1", TxKind::kFull));
  CHECK(b.status.code() == ErrorCode::kManifestMismatch);
  REQUIRE(b.errors.size() == 1);
  CHECK(b.errors[0].rank == 1);
  // Rank 1 back on the common manifest: now rank 0's refusal is the error.
  x.t.SetParticipant(1, nullptr);
  x.ps[1] = x.Open(1, "rank-1b", x.m0);
  x.t.SetParticipant(1, x.ps[1].get());
  b = x.c->Begin(Req("t2", TxKind::kFull));
  CHECK(b.status.code() == ErrorCode::kTxActive);
  REQUIRE(b.errors.size() == 1);
  CHECK(b.errors[0].rank == 0);
  CHECK_FALSE(x.ps[1]->status().active_tx);
}

TEST_CASE("RollbackDeltaAbortRestoresBytesAndStaysClean") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  const std::string d0 = c.rank(0).RecomputeDigest().value();
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kDelta, v1, {}, {"kv_b", "k_proj"}, true))
              .status.ok());
  for (int r = 0; r < 2; ++r) {
    REQUIRE(PatchIdx(c.rank(r), "kv_b", {0, 31}, 0xEE).ok());
    REQUIRE(PatchIdx(c.rank(r), "k_proj", {7}, 0xEE).ok());
  }
  REQUIRE(c.rank(0).Refresh("*").ok());  // derived recomputed from the patched bytes
  CHECK(c.rank(0).RecomputeDigest().value() != d0);
  REQUIRE(c.coordinator().Abort("t2").status.ok());
  CHECK(c.rank(0).RecomputeDigest().value() == d0);
  CHECK_FALSE(c.rank(1).status().dirty);
  CHECK(c.rank(1).status().serving);
  // Rank 0 refreshed from the aborted bytes: its derived copies are stale again.
  CHECK_FALSE(c.rank(0).status().stale_derived.empty());
  CHECK_FALSE(c.rank(0).status().serving);
  REQUIRE(c.rank(0).Refresh("*").ok());
  CHECK(c.rank(0).status().serving);
  // The old version is still the base.
  REQUIRE(c.coordinator().Begin(Req("t3", TxKind::kDelta, v1, {}, {"norm"})).status.ok());
}

TEST_CASE("RollbackPartialAbortRestoresBytes") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  const std::string d0 = c.rank(0).RecomputeDigest().value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"rest"}, {}, true)).status.ok());
  REQUIRE(WriteBox(c.rank(0), "norm", "", std::nullopt, 9).ok());
  REQUIRE(WriteBox(c.rank(0), "packed", "", Box{{0, 2}, {0, 4}}, 9).ok());
  CommitOutcome o = c.coordinator().Commit("t2");  // packed incomplete: votes no
  CHECK(o.decision == Decision::kAbort);
  CHECK(c.rank(0).RecomputeDigest().value() == d0);
  CHECK(c.rank(0).status().serving);
}

TEST_CASE("RollbackOverBudgetIsRefusedAtBegin") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.Restart(0, nullptr, /*rollback_budget=*/16).ok());
  REQUIRE(c.FullCommit("t1b", 1).status.ok());
  BeginOutcome b = c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"attn"}, {}, true));
  CHECK(b.status.code() == ErrorCode::kBudgetExceeded);
  CHECK_THAT(b.status.message(), Catch::Contains("budget"));
  CHECK(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"attn"}, {}, false)).status.ok());
}

TEST_CASE("SilentRankTimesOutAndAborts") {
  Cluster c(3, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  REQUIRE(c.WriteAll(1).ok());
  REQUIRE(c.RefreshAll().ok());
  c.transport().SetSilent({2});
  CommitOutcome o = c.coordinator().Commit("t1");
  c.transport().SetSilent({});
  CHECK(o.status.code() == ErrorCode::kTimeout);
  CHECK(o.decision == Decision::kAbort);
  CHECK(o.votes[2].kind == VoteReport::Kind::kTimeout);
  for (int r = 0; r < 3; ++r) {
    CHECK_FALSE(c.rank(r).status().active_tx);
    CHECK(c.rank(r).status().dirty);
  }
}

TEST_CASE("JournalIoErrorNeverBecomesSilentSuccess") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  REQUIRE(c.WriteAll(1).ok());
  REQUIRE(c.RefreshAll().ok());
  c.fs(0).FailNextSyncs(1);
  auto v = c.rank(0).Prepare("t1");
  CHECK_FALSE(v.ok());
  CHECK(v.status().code() == ErrorCode::kCrashed);
  CHECK_FALSE(c.rank(0).status().serving);
  // The coordinator sees no vote and aborts.
  CommitOutcome o = c.coordinator().Commit("t1");
  CHECK(o.decision == Decision::kAbort);
}

namespace {

// Device memory whose operations fail from a chosen moment on (a device error).
class FailingMemory : public LiveMemory {
 public:
  explicit FailingMemory(const Manifest& m) : inner_(NewReferenceDeviceLiveMemory(m)) {}
  void FailFromNow() { failing_ = true; }
  std::span<uint8_t> Param(uint32_t i) override { return inner_->Param(i); }
  void Discard() override { inner_->Discard(); }
  bool HostAddressable() const override { return false; }
  size_t Size(uint32_t i) override { return inner_->Size(i); }
  Status Store(uint32_t i, size_t off, const void* src, size_t len) override {
    return failing_ ? Broken() : inner_->Store(i, off, src, len);
  }
  Status Load(uint32_t i, size_t off, void* dst, size_t len) override {
    return failing_ ? Broken() : inner_->Load(i, off, dst, len);
  }
  Status Scatter(uint32_t i, std::span<const int64_t> flat, const void* values, size_t esz,
                 void* before) override {
    return failing_ ? Broken() : inner_->Scatter(i, flat, values, esz, before);
  }
  Status ChunkDigests(uint32_t i, size_t first, size_t n, uint64_t* out) override {
    return failing_ ? Broken() : inner_->ChunkDigests(i, first, n, out);
  }

 private:
  static Status Broken() { return Status::IOError("injected device error"); }
  std::unique_ptr<LiveMemory> inner_;
  bool failing_ = false;
};

// Restarts rank 0 of `c` on a FailingMemory (working until told otherwise).
std::shared_ptr<FailingMemory> StartOnFailingMemory(Cluster& c) {
  std::shared_ptr<FailingMemory> memory;
  c.SetMemoryFactory([&](const Manifest& m) {
    memory = std::make_shared<FailingMemory>(m);
    return memory;
  });
  REQUIRE(c.Restart(0).ok());
  c.SetMemoryFactory(nullptr);
  return memory;
}

}  // namespace

TEST_CASE("LiveMemoryFailureCrashesTheRankAndKeepsTheCommittedVersion") {
  Cluster c(1, SmallManifest());
  std::shared_ptr<FailingMemory> memory = StartOnFailingMemory(c);
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();

  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  memory->FailFromNow();
  Status s = c.WriteAll(2);
  CHECK(s.code() == ErrorCode::kCrashed);
  CHECK_THAT(s.message(),
             Catch::Contains("live memory failed") && Catch::Contains("injected device error"));
  // The rank refuses everything from now on; the transaction cannot commit.
  CHECK(WriteBox(c.rank(0), "norm", "", std::nullopt).code() == ErrorCode::kCrashed);
  CHECK(c.coordinator().Commit("t2").decision != Decision::kCommit);
  // A restarted process (working memory) still knows t1 as committed, and is dirty.
  REQUIRE(c.Restart(0).ok());
  const RankStatus st = c.rank(0).status();
  CHECK(st.committed_tx == "t1");
  CHECK(st.version == v1);
  CHECK(st.dirty);
  CHECK_FALSE(st.serving);
  CHECK(c.coordinator().CommittedVersion("t1") == v1);
}

TEST_CASE("LiveMemoryFailureAtPrepareVotesNothing") {
  Cluster c(1, SmallManifest());
  std::shared_ptr<FailingMemory> memory = StartOnFailingMemory(c);
  // verify "all": prepare rehashes every chunk from live memory (the chunks the writes
  // covered whole were hashed when written, on device memory as on the host).
  REQUIRE(c.coordinator()
              .Begin(Req("t1", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  REQUIRE(c.WriteAll(1).ok());
  REQUIRE(c.RefreshAll().ok());
  memory->FailFromNow();  // the digest at prepare cannot be computed
  auto vote = c.rank(0).Prepare("t1");
  REQUIRE_FALSE(vote.ok());
  CHECK(vote.status().code() == ErrorCode::kCrashed);
  CHECK_FALSE(c.rank(0).RecomputeDigest().ok());
}

TEST_CASE("LiveMemoryOfTheWrongSizeIsRefusedAtOpen") {
  auto m = SmallManifest();
  auto other = ParseManifest(nlohmann::json::parse(
                                 R"({"params": [{"name": "x", "dtype": "f32", "shape": [3]}]})"))
                   .value();
  ParticipantOptions o;
  TempDir dir;
  o.journal_dir = dir.sub("r0");
  o.memory = NewReferenceDeviceLiveMemory(*other);
  auto p = Participant::Open(std::move(o), m);
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == ErrorCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Issue 12: a restoring abort and derived state.

namespace {

// W_UK_T and W_UV both derive from kv_b (MLA); lm_scale from lm_head.
ManifestPtr MlaManifest() {
  return ParseManifest(nlohmann::json::parse(R"({
    "params": [{"name": "kv_b", "dtype": "bf16", "shape": [8, 4]},
               {"name": "lm_head", "dtype": "bf16", "shape": [4, 4]}],
    "derived": [{"name": "W_UK_T", "sources": ["kv_b"], "phase": "attention"},
                {"name": "W_UV", "sources": ["kv_b"], "phase": "attention"},
                {"name": "lm_scale", "sources": ["lm_head"], "phase": "post_load"}]
  })"))
      .value();
}

std::vector<std::string> Stale(Participant& p) {
  auto s = p.status().stale_derived;
  std::sort(s.begin(), s.end());
  return s;
}

}  // namespace

TEST_CASE("RollbackAbortLeavesDerivedStateOfUnwrittenSourcesFresh") {
  Cluster c(1, MlaManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"lm_head"}, true)).status.ok());
  REQUIRE(PatchIdx(c.rank(0), "lm_head", {3}, 0xEE).ok());
  // The engine refreshes W_UK_T although kv_b was never written in this transaction.
  REQUIRE(c.rank(0).Refresh("W_UK_T").ok());
  REQUIRE(c.coordinator().Abort("t2").status.ok());
  // Nothing derived from kv_b is stale (W_UK_T was recomputed from the restored bytes, W_UV
  // was never touched), and lm_scale is as fresh as before the transaction.
  CHECK(Stale(c.rank(0)).empty());
  CHECK_FALSE(c.rank(0).status().dirty);
  CHECK(c.rank(0).status().serving);
  // The next delta on the same base commits without refreshing what it did not write.
  REQUIRE(c.coordinator().Begin(Req("t3", TxKind::kDelta, v1, {}, {"lm_head"}, true)).status.ok());
  REQUIRE(PatchIdx(c.rank(0), "lm_head", {3}, 0xEE).ok());
  REQUIRE(c.rank(0).Refresh("lm_scale").ok());
  CommitOutcome o = c.coordinator().Commit("t3");
  CHECK(o.status.ok());
  CHECK(o.decision == Decision::kCommit);
}

TEST_CASE("RollbackAbortMakesStaleOnlyDerivedStateRefreshedFromAbortedBytes") {
  Cluster c(1, MlaManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kDelta, v1, {}, {"lm_head", "kv_b"}, true))
              .status.ok());
  REQUIRE(PatchIdx(c.rank(0), "kv_b", {0}, 0xEE).ok());
  REQUIRE(c.rank(0).Refresh("W_UK_T").ok());    // recomputed from the patched kv_b
  REQUIRE(c.rank(0).Refresh("lm_scale").ok());  // lm_head not written yet: from the old bytes
  REQUIRE(PatchIdx(c.rank(0), "lm_head", {1}, 0xEE).ok());
  REQUIRE(c.coordinator().Abort("t2").status.ok());
  // Only W_UK_T holds aborted bytes. W_UV (same source, not refreshed) keeps its standing, and
  // lm_scale's refresh came before lm_head's write, so it matches the restored bytes.
  CHECK(Stale(c.rank(0)) == std::vector<std::string>{"W_UK_T"});
  CHECK_FALSE(c.rank(0).status().dirty);
  CHECK_FALSE(c.rank(0).status().serving);
  // The stale state is reported with the restored source, and a refresh makes it serve again.
  REQUIRE(c.coordinator().Begin(Req("t3", TxKind::kDelta, v1, {}, {"lm_head"})).status.ok());
  REQUIRE(PatchIdx(c.rank(0), "lm_head", {1}, 0xEE).ok());
  REQUIRE(c.rank(0).Refresh("lm_scale").ok());
  auto vote = c.rank(0).CheckPrepare("t3");
  REQUIRE(vote.ok());
  REQUIRE(vote->stale.size() == 1);
  CHECK(vote->stale[0].name == "W_UK_T");
  CHECK(vote->stale[0].written_sources == std::vector<std::string>{"kv_b"});
  REQUIRE(c.rank(0).Refresh("*").ok());
  CommitOutcome o = c.coordinator().Commit("t3");
  CHECK(o.decision == Decision::kCommit);
  CHECK(c.rank(0).status().serving);
}

TEST_CASE("StaleDerivedStateBeforeARollbackStaysStaleUnlessRefreshedFromRestoredBytes") {
  Cluster c(1, MlaManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  // t2 leaves W_UK_T stale (refreshed from aborted kv_b bytes).
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kDelta, v1, {}, {"kv_b"}, true)).status.ok());
  REQUIRE(PatchIdx(c.rank(0), "kv_b", {0}, 0xEE).ok());
  REQUIRE(c.rank(0).Refresh("*").ok());
  REQUIRE(c.coordinator().Abort("t2").status.ok());
  REQUIRE(Stale(c.rank(0)) == std::vector<std::string>{"W_UK_T", "W_UV"});
  // t3 touches only lm_head and refreshes nothing of kv_b: its abort keeps both stale.
  REQUIRE(c.coordinator().Begin(Req("t3", TxKind::kDelta, v1, {}, {"lm_head"}, true)).status.ok());
  REQUIRE(PatchIdx(c.rank(0), "lm_head", {0}, 0xEE).ok());
  REQUIRE(c.coordinator().Abort("t3").status.ok());
  CHECK(Stale(c.rank(0)) == std::vector<std::string>{"W_UK_T", "W_UV"});
  // t4 refreshes W_UK_T before any write: that copy is of the restored bytes and stands.
  REQUIRE(c.coordinator().Begin(Req("t4", TxKind::kDelta, v1, {}, {"kv_b"}, true)).status.ok());
  REQUIRE(c.rank(0).Refresh("W_UK_T").ok());
  REQUIRE(PatchIdx(c.rank(0), "kv_b", {2}, 0xEE).ok());
  REQUIRE(c.coordinator().Abort("t4").status.ok());
  CHECK(Stale(c.rank(0)) == std::vector<std::string>{"W_UV"});
}

// ---------------------------------------------------------------------------------------------
// Issue 12: a box restricts every write form.

TEST_CASE("WriteBySourceHonoursBox") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  const Box half{{16, 20}, {0, 8}};  // the first half of shard k (fed by k_proj)
  auto bytes = Pattern(c.manifest(), "qkv", half, 3);
  WritePiece w;
  w.param = "qkv";
  w.source = "k_proj";
  w.box = half;
  w.data = bytes.data();
  w.bytes = bytes.size();
  REQUIRE(c.rank(0).Write({&w, 1}).ok());
  for (const char* p : {"kv_b", "norm", "packed"})
    REQUIRE(WriteBox(c.rank(0), p, "", std::nullopt).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "q", std::nullopt).ok());
  REQUIRE(WriteBox(c.rank(0), "qkv", "v", std::nullopt).ok());
  REQUIRE(c.RefreshAll().ok());
  auto v = c.rank(0).CheckPrepare("t1");
  REQUIRE(v.ok());
  CHECK_FALSE(v->yes);
  const MissingPiece* k = FindMissing(*v, "qkv", "k");
  REQUIRE(k);
  CHECK(k->box == Box{{20, 24}, {0, 8}});  // only the other half is missing
  CHECK(v->missing.size() == 1);
  // The other half by source completes it; writing the first half again is a duplicate.
  CHECK(c.rank(0).Write({&w, 1}).code() == ErrorCode::kDuplicateWrite);
  w.box = Box{{20, 24}, {0, 8}};
  bytes = Pattern(c.manifest(), "qkv", *w.box, 4);
  w.data = bytes.data();
  REQUIRE(c.rank(0).Write({&w, 1}).ok());
  REQUIRE(c.RefreshAll().ok());
  CHECK(c.rank(0).CheckPrepare("t1")->yes);
}

TEST_CASE("WriteBySourceWithBoxOutsideWhatTheSourceFeedsIsOutOfRange") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  std::vector<uint8_t> bytes(4 * 8 * 2);
  WritePiece w;
  w.param = "qkv";
  w.source = "k_proj";
  w.box = Box{{0, 4}, {0, 8}};  // inside qkv, but in shard q
  w.data = bytes.data();
  w.bytes = bytes.size();
  Status s = c.rank(0).Write({&w, 1});
  CHECK(s.code() == ErrorCode::kOutOfRange);
  CHECK_THAT(s.message(), Catch::Contains("k"));
  w.box = Box{{22, 26}, {0, 8}};  // straddles k and v
  CHECK(c.rank(0).Write({&w, 1}).code() == ErrorCode::kOutOfRange);
  // A shard together with a source is refused, an unknown source names it.
  w.box = Box{{16, 20}, {0, 8}};
  w.shard = "k";
  CHECK(c.rank(0).Write({&w, 1}).code() == ErrorCode::kBadWrite);
  w.shard.clear();
  w.source = "nope";
  CHECK(c.rank(0).Write({&w, 1}).code() == ErrorCode::kUnknownParam);
  // Nothing was written.
  CHECK_FALSE(c.rank(0).status().dirty);
}

TEST_CASE("WriteBySourceWithoutBoxWritesEveryShardItFeeds") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  auto bytes = Pattern(c.manifest(), "qkv", Box{{24, 32}, {0, 8}}, 5);
  WritePiece w;
  w.source = "v_proj";
  w.data = bytes.data();
  w.bytes = bytes.size();
  REQUIRE(c.rank(0).Write({&w, 1}).ok());
  auto v = c.rank(0).CheckPrepare("t1");
  REQUIRE(v.ok());
  CHECK_FALSE(FindMissing(*v, "qkv", "v"));
  CHECK(FindMissing(*v, "qkv", "k"));
  w.bytes = bytes.size() - 1;
  w.source = "k_proj";
  CHECK(c.rank(0).Write({&w, 1}).code() == ErrorCode::kBadWrite);
}

// ---------------------------------------------------------------------------------------------
// Issue 12: the missing list is never cut.

namespace {

// One parameter of `shards` one-row shards (fed by one source each), and a last parameter.
ManifestPtr ManyShardManifest(int shards, int cols) {
  nlohmann::json sh = nlohmann::json::array();
  for (int k = 0; k < shards; ++k) {
    sh.push_back({{"id", "e" + std::to_string(k)},
                  {"source", "experts." + std::to_string(k) + ".w"},
                  {"source_shape", {1, cols}},
                  {"box", {{k, k + 1}, {0, cols}}},
                  {"source_box", {{0, 1}, {0, cols}}}});
  }
  nlohmann::json m = {
      {"params",
       {{{"name", "experts.w"}, {"dtype", "bf16"}, {"shape", {shards, cols}}, {"shards", sh}},
        {{"name", "lm_head.weight"}, {"dtype", "bf16"}, {"shape", {4, 4}}}}}};
  return ParseManifest(m).value();
}

}  // namespace

TEST_CASE("MissingListNamesEveryMissingShardNeverCut") {
  Cluster c(1, ManyShardManifest(300, 2));
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  REQUIRE(WriteBox(c.rank(0), "experts.w", "e7", std::nullopt).ok());
  auto v = c.rank(0).Prepare("t1");
  REQUIRE(v.ok());
  CHECK(v->error == ErrorCode::kCoverageIncomplete);
  CHECK(v->missing.size() == 300);  // 299 experts and lm_head
  CHECK(v->missing_total == 300);
  CHECK(FindMissing(*v, "lm_head.weight", "0"));
  CHECK(FindMissing(*v, "experts.w", "e299"));
  CHECK_FALSE(FindMissing(*v, "experts.w", "e7"));
}

TEST_CASE("ManyGapsInOneShardAreMergedWithTheirCount") {
  Cluster c(1, ManyShardManifest(2, 64));
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  // Shard e0 (row 0): every other column written, 32 one-element gaps.
  for (int col = 0; col < 64; col += 2) {
    REQUIRE(WriteBox(c.rank(0), "experts.w", "e0", Box{{0, 1}, {col, col + 1}}).ok());
  }
  // Shard e1: two gaps, listed exactly.
  REQUIRE(WriteBox(c.rank(0), "experts.w", "e1", Box{{1, 2}, {1, 10}}).ok());
  REQUIRE(WriteBox(c.rank(0), "experts.w", "e1", Box{{1, 2}, {11, 64}}).ok());
  REQUIRE(WriteBox(c.rank(0), "lm_head.weight", "", std::nullopt).ok());
  auto v = c.rank(0).Prepare("t1");
  REQUIRE(v.ok());
  const MissingPiece* e0 = FindMissing(*v, "experts.w", "e0");
  REQUIRE(e0);
  CHECK(e0->boxes == 32);
  CHECK(e0->elements == 32);
  CHECK(e0->box == Box{{0, 1}, {1, 64}});
  int e1 = 0;
  for (const auto& m : v->missing) {
    if (m.shard == "e1") {
      ++e1;
      CHECK(m.boxes == 1);
      CHECK(m.elements == 1);
    }
  }
  CHECK(e1 == 2);
  CHECK(v->missing.size() == 3);
  CHECK(v->missing_total == 34);
}
