// In-place landings (Reserve/Landed), the verifier (verify all, Verify) and Reattach, through
// the public Participant API. Run on host memory and again on the reference device backend
// (CTest prefix "device.", WTX_TEST_MEMORY=reference-device).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>

#include "tests/test_util.h"
#include "wtx/content_hash.h"
#include "wtx/device_live_memory.h"
#include "wtx/hf_manifest.h"
#include "wtx/live_verify.h"

using namespace wtx;
using namespace wtx::testing;

namespace {

bool DeviceRun() {
  const char* name = std::getenv("WTX_TEST_MEMORY");
  return name != nullptr && std::string(name) == "reference-device";
}

// The engine's own copy of `bytes` (row-major over r.box) into the reserved destination,
// through the address Reserve returned (the reference device's address is a host address).
void EngineCopy(const Manifest& m, const Reservation& r, const std::vector<uint8_t>& bytes) {
  const ParamSpec& p = m.params()[r.param_index];
  const size_t esz = DTypeSize(p.dtype);
  auto* base = r.host ? static_cast<uint8_t*>(r.host) : reinterpret_cast<uint8_t*>(r.device_ptr);
  REQUIRE(base != nullptr);
  const uint8_t* src = bytes.data();
  ForEachFlatRun(p.shape, r.box, [&](int64_t b, int64_t len) {
    std::memcpy(base + b * esz, src, len * esz);
    src += len * esz;
  });
}

// Reserve, copy Pattern(seed) in, Landed.
Status Land(Participant& p, const LandingRegion& region, uint32_t seed) {
  auto res = p.Reserve(region);
  if (!res.ok()) return res.status();
  for (const Reservation& r : res.value()) {
    EngineCopy(p.manifest(), r, Pattern(p.manifest(), r.param, r.box, seed));
  }
  return p.Landed(region);
}

Status LandAll(Participant& p, uint32_t seed) {
  for (const auto& ps : p.manifest().params()) {
    WTX_RETURN_IF_ERROR(Land(p, {ps.name, "", "", std::nullopt}, seed));
  }
  return Status::OK();
}

// An undeclared write: bytes change in live memory, the participant is not told.
void Poke(Participant& p, const std::string& param, size_t offset, uint8_t value) {
  const uint32_t i = *p.manifest().FindParam(param);
  REQUIRE(p.memory().Store(i, offset, &value, 1).ok());
}

// A cluster whose ranks' live bytes are buffers the test owns (an engine's tensors): they
// survive a participant restart, as in an engine process that outlived wtx.
struct Borrowed {
  explicit Borrowed(const Manifest& m) {
    for (const auto& p : m.params()) bufs.emplace_back(static_cast<size_t>(p.num_bytes()), 0xAB);
  }
  std::shared_ptr<LiveMemory> Memory(const Manifest& m) {
    std::vector<std::span<uint8_t>> spans;
    for (auto& b : bufs) spans.emplace_back(b.data(), b.size());
    auto mem = DeviceRun() ? NewBorrowedReferenceDeviceLiveMemory(m, spans)
                           : NewBorrowedLiveMemory(m, spans);
    REQUIRE(mem.ok());
    return std::shared_ptr<LiveMemory>(std::move(mem).value());
  }
  // Rank 0 of `c` restarted over these buffers, as will be every later restart.
  void Attach(Cluster& c) {
    c.SetMemoryFactory([this](const Manifest& mm) { return Memory(mm); });
    REQUIRE(c.Restart(0).ok());
  }
  std::vector<std::vector<uint8_t>> bufs;
};

// Rank 1 of tiny-qwen3-moe at tp 2: vocabulary 250 padded to 256, so rows [122, 128) of its
// embed_tokens and lm_head ([128, 64] bf16, one hash chunk each) are padding rows.
ManifestPtr PaddedVocabManifest() {
  HfManifestOptions o;
  o.tp = 2;
  o.rank = 1;
  auto m = ManifestFromHfConfigFile(WTX_CONFORMANCE_DIR "/models/tiny-qwen3-moe/config.json", o);
  REQUIRE(m.ok());
  const uint32_t lm = *m.value()->FindParam("lm_head.weight");
  REQUIRE(m.value()->params()[lm].shards[*m.value()->FindShard(lm, "pad")].box ==
          Box{{122, 128}, {0, 64}});
  return std::move(m).value();
}
constexpr size_t kPaddingRowByte = 123 * 64 * 2 + 5;  // a byte of padding row 123

// Writes `param`'s shard `shard` (its box) with Pattern(seed).
Status WriteShard(Participant& p, const std::string& param, const std::string& shard,
                  uint32_t seed) {
  const Manifest& m = p.manifest();
  const uint32_t i = *m.FindParam(param);
  const Box box = m.params()[i].shards[*m.FindShard(i, shard)].box;
  auto bytes = Pattern(m, param, box, seed);
  WritePiece w{param, shard, box, bytes.data(), bytes.size()};
  return p.Write({&w, 1});
}

// Commits t1 on every rank of `c`, then begins t2: a partial update of module lm_head on top of
// it, under verify all.
void BeginLmHeadUpdate(Cluster& c) {
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kPartial, v1, {"lm_head"}, {}, false, VerifyMode::kAll))
              .status.ok());
}

}  // namespace

TEST_CASE("LandedFullUpdateCommitsTheSameVersionAsWritingTheSameBytes") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.FullCommit("t1", 3).status.ok());
  const std::string written = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  for (int r = 0; r < 2; ++r) REQUIRE(LandAll(c.rank(r), 3).ok());
  REQUIRE(c.RefreshAll().ok());
  CommitOutcome o = c.coordinator().Commit("t2");
  REQUIRE(o.status.ok());
  CHECK(o.decision == Decision::kCommit);
  CHECK(o.version == written);
  CHECK(c.rank(0).status().serving);
  CHECK(c.rank(1).RecomputeDigest().value() == c.rank(0).RecomputeDigest().value());
}

TEST_CASE("PrepareRehashesLandedChunksFromLiveMemory") {
  // The engine may rewrite the reserved bytes until Landed; the version is what is live then.
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"rest"})).status.ok());
  LandingRegion norm{"norm", "", "", std::nullopt, std::nullopt};
  auto res = c.rank(0).Reserve(norm);
  REQUIRE(res.ok());
  REQUIRE(res->size() == 1);
  CHECK(res->front().box == WholeBox({8}));
  CHECK(res->front().param_bytes == 32);
  CHECK(c.rank(0).status().dirty);  // dirty before the first byte changes
  CHECK_FALSE(c.rank(0).status().serving);
  EngineCopy(c.manifest(), res->front(), Pattern(c.manifest(), "norm", WholeBox({8}), 9));
  EngineCopy(c.manifest(), res->front(), Pattern(c.manifest(), "norm", WholeBox({8}), 5));
  REQUIRE(c.rank(0).Landed(norm).ok());
  REQUIRE(Land(c.rank(0), {"packed", "", "", std::nullopt}, 5).ok());
  CommitOutcome o = c.coordinator().Commit("t2");
  REQUIRE(o.decision == Decision::kCommit);
  // Writing the same final bytes through Write gives the same version.
  Cluster w(1, SmallManifest());
  REQUIRE(w.FullCommit("t1", 1).status.ok());
  REQUIRE(w.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"rest"})).status.ok());
  for (const char* name : {"norm", "packed"}) {
    const ParamSpec& ps = w.manifest().params()[*w.manifest().FindParam(name)];
    auto bytes = Pattern(w.manifest(), name, WholeBox(ps.shape), 5);
    WritePiece piece{name, "", std::nullopt, bytes.data(), bytes.size()};
    REQUIRE(w.rank(0).Write({&piece, 1}).ok());
  }
  CommitOutcome ow = w.coordinator().Commit("t2");
  REQUIRE(ow.decision == Decision::kCommit);
  CHECK(ow.version == o.version);
}

TEST_CASE("ReserveIsCheckedExactlyLikeAWrite") {
  Cluster c(1, SmallManifest());
  LandingRegion norm{"norm", "", "", std::nullopt, std::nullopt};
  CHECK(c.rank(0).Reserve(norm).status().code() == ErrorCode::kNoTx);
  CHECK(c.rank(0).Landed(norm).code() == ErrorCode::kNoTx);
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"attn"})).status.ok());
  Participant& p = c.rank(0);
  // Scope, names, range.
  CHECK(p.Reserve(norm).status().code() == ErrorCode::kOutOfScope);
  CHECK(p.Reserve({"nope", "", "", std::nullopt}).status().code() == ErrorCode::kUnknownParam);
  CHECK(p.Reserve({"qkv", "x", "", std::nullopt}).status().code() == ErrorCode::kUnknownParam);
  auto out = p.Reserve({"qkv", "", "", Box{{30, 40}, {0, 8}}});
  CHECK(out.status().code() == ErrorCode::kOutOfRange);
  CHECK(out.status().message().find("qkv") != std::string::npos);
  CHECK(p.Reserve({"qkv", "k", "", Box{{0, 4}, {0, 8}}}).status().code() == ErrorCode::kOutOfRange);
  CHECK(p.Reserve({"qkv", "", "", Box{{4, 2}, {0, 8}}}).status().code() == ErrorCode::kBadWrite);
  CHECK(p.Reserve({"", "", "", std::nullopt}).status().code() == ErrorCode::kBadWrite);
  CHECK_FALSE(p.status().dirty);  // refused reservations change nothing
  // Overlap with what the transaction wrote or reserved, both ways.
  auto q = Pattern(c.manifest(), "qkv", Box{{0, 16}, {0, 8}}, 2);
  WritePiece wq{"qkv", "q", std::nullopt, q.data(), q.size()};
  REQUIRE(p.Write({&wq, 1}).ok());
  auto dup = p.Reserve({"qkv", "", "", Box{{8, 20}, {0, 8}}});
  CHECK(dup.status().code() == ErrorCode::kDuplicateWrite);
  REQUIRE(p.Reserve({"qkv", "k", "", std::nullopt}).ok());
  CHECK(p.Reserve({"qkv", "k", "", std::nullopt}).status().code() == ErrorCode::kDuplicateWrite);
  CHECK(p.Reserve({"qkv", "", "k_proj", std::nullopt}).status().code() ==
        ErrorCode::kDuplicateWrite);
  auto k = Pattern(c.manifest(), "qkv", Box{{16, 24}, {0, 8}}, 2);
  WritePiece wk{"qkv", "k", std::nullopt, k.data(), k.size()};
  CHECK(p.Write({&wk, 1}).code() == ErrorCode::kDuplicateWrite);
}

TEST_CASE("LandingTwiceOrARegionNeverReservedIsRefused") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"rest"})).status.ok());
  Participant& p = c.rank(0);
  LandingRegion norm{"norm", "", "", std::nullopt, std::nullopt};
  Status never = p.Landed(norm);
  CHECK(never.code() == ErrorCode::kBadWrite);
  CHECK(never.message().find("not reserved") != std::string::npos);
  REQUIRE(p.Reserve(norm).ok());
  // Landed names the region exactly as reserved.
  CHECK(p.Landed({"norm", "", "", Box{{0, 8}}}).code() == ErrorCode::kBadWrite);
  REQUIRE(p.Landed(norm).ok());
  Status twice = p.Landed(norm);
  CHECK(twice.code() == ErrorCode::kDuplicateWrite);
  CHECK(twice.message().find("already landed") != std::string::npos);
}

TEST_CASE("ReservedButNeverLandedIsCoverageIncompleteNamingIt") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"rest"})).status.ok());
  REQUIRE(Land(c.rank(0), {"packed", "", "", std::nullopt}, 2).ok());
  REQUIRE(c.rank(0).Reserve({"norm", "", "", Box{{0, 8}}}).ok());
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.decision == Decision::kAbort);
  REQUIRE(o.votes.size() == 1);
  const Vote& v = o.votes[0].vote;
  CHECK(v.error == ErrorCode::kCoverageIncomplete);
  CHECK(v.message.find("reserved but never landed: 'norm' box [[0, 8]]") != std::string::npos);
  REQUIRE_FALSE(v.missing.empty());
  CHECK(v.missing[0].param == "norm");
  CHECK(c.rank(0).status().dirty);  // no rollback: the bytes may be mixed
}

TEST_CASE("AbortWithRollbackRestoresWhatTheEngineLanded") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  const auto before = LiveBytes(c.rank(0).memory(), *c.manifest().FindParam("qkv"));
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kPartial, v1, {"attn"}, {}, /*rollback=*/true))
              .status.ok());
  REQUIRE(Land(c.rank(0), {"qkv", "", "", std::nullopt}, 8).ok());
  CHECK(LiveBytes(c.rank(0).memory(), *c.manifest().FindParam("qkv")) != before);
  REQUIRE(c.coordinator().Abort("t2").status.ok());
  CHECK(LiveBytes(c.rank(0).memory(), *c.manifest().FindParam("qkv")) == before);
  CHECK_FALSE(c.rank(0).status().dirty);
  CHECK(c.rank(0).status().serving);
  CHECK(c.rank(0).RecomputeDigest().ok());
  auto rep = c.rank(0).Verify();
  REQUIRE(rep.ok());
  CHECK(rep->ok);
}

TEST_CASE("DeltaLandsInPlaceBySourceButNotOnAPackedLayout") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kDelta, v1, {}, {"packed_src", "k_proj"}))
              .status.ok());
  auto packed = c.rank(0).Reserve({"", "", "packed_src", std::nullopt});
  CHECK(packed.status().code() == ErrorCode::kLayoutMismatch);
  CHECK(packed.status().message().find("packed") != std::string::npos);
  CHECK(c.rank(0).Reserve({"qkv", "", "", std::nullopt}).status().code() == ErrorCode::kOutOfScope);
  CHECK(c.rank(0).Reserve({"", "", "q_proj", std::nullopt}).status().code() ==
        ErrorCode::kOutOfScope);
  REQUIRE(Land(c.rank(0), {"", "", "k_proj", std::nullopt}, 4).ok());
  // The landed source counts as all its parts; a patch of it now would land twice.
  std::vector<int64_t> idx{1};
  uint16_t val = 7;
  PatchRequest pr{"k_proj", idx, &val, 2, 0, 1};
  CHECK(c.rank(0).Patch(pr).code() == ErrorCode::kDuplicateWrite);
  // packed_src got nothing (its reservation was refused): missing.
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.decision == Decision::kAbort);
  CHECK(o.votes[0].vote.error == ErrorCode::kCoverageIncomplete);
  bool packed_missing = false, k_missing = false;
  for (const auto& m : o.votes[0].vote.missing) {
    packed_missing = packed_missing || m.source == "packed_src";
    k_missing = k_missing || m.source == "k_proj";
  }
  CHECK(packed_missing);
  CHECK_FALSE(k_missing);
}

TEST_CASE("EveryVerifierSeesAnUndeclaredWriteIntoPaddingRows") {
  // The padding rows are live bytes of the version: verify all, Verify and VerifyLive (wtx
  // verify) all compare them.
  Cluster c(1, PaddedVocabManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto live = VerifyLive(c.rank(0), c.rank_dir(0));
  REQUIRE(live.ok());
  CHECK(live->match);
  Poke(c.rank(0), "lm_head.weight", kPaddingRowByte, 0x5A);
  live = VerifyLive(c.rank(0), c.rank_dir(0));
  REQUIRE(live.ok());
  CHECK(live->comparable);
  CHECK_FALSE(live->match);
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  CommitOutcome o = c.coordinator().Commit("t2");  // nothing written: a would-be noop
  CHECK(o.decision == Decision::kAbort);
  CHECK(o.votes[0].vote.error == ErrorCode::kUndeclaredWrite);
  CHECK(o.votes[0].vote.message.find("'lm_head.weight'") != std::string::npos);
  CHECK(c.rank(0).status().dirty);
  CHECK_FALSE(c.rank(0).status().serving);

  Cluster d(1, PaddedVocabManifest());
  REQUIRE(d.FullCommit("t1", 1).status.ok());
  Poke(d.rank(0), "model.embed_tokens.weight", kPaddingRowByte, 0x5A);
  auto rep = d.rank(0).Verify();
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok);
  CHECK(rep->params == std::vector<std::string>{"model.embed_tokens.weight"});
}

TEST_CASE("PaddingChangedAroundAWriteOfTheRowsBesideItIsAnUndeclaredWrite") {
  // The write (or landing) of the vocabulary rows declares the chunk the padding rows share;
  // the padding bytes the engine changed before or after it are still compared with the
  // committed version.
  for (const bool land : {false, true}) {
    for (const bool poke_first : {true, false}) {
      INFO((land ? "land" : "write") << (poke_first ? ", poke first" : ", poke after"));
      Cluster c(1, PaddedVocabManifest());
      BeginLmHeadUpdate(c);
      if (poke_first) Poke(c.rank(0), "lm_head.weight", kPaddingRowByte, 0x5A);
      if (land) {
        REQUIRE(Land(c.rank(0), {"lm_head.weight", "0", "", std::nullopt}, 2).ok());
      } else {
        REQUIRE(WriteShard(c.rank(0), "lm_head.weight", "0", 2).ok());
      }
      if (!poke_first) Poke(c.rank(0), "lm_head.weight", kPaddingRowByte, 0x5A);
      REQUIRE(WriteShard(c.rank(0), "model.norm.weight", "0", 2).ok());
      CommitOutcome o = c.coordinator().Commit("t2");
      CHECK(o.decision == Decision::kAbort);
      CHECK(o.votes[0].vote.error == ErrorCode::kUndeclaredWrite);
      CHECK(o.votes[0].vote.message.find("'lm_head.weight' chunks [0, 1)") != std::string::npos);
      CHECK(c.rank(0).status().dirty);
    }
  }
}

TEST_CASE("WritingTheRowsBesideUntouchedPaddingCommitsUnderVerifyAll") {
  // No false alarm: the same partial update without the stray write commits, and a declared
  // whole-tensor write over changed padding is no undeclared write.
  Cluster c(1, PaddedVocabManifest());
  BeginLmHeadUpdate(c);
  REQUIRE(WriteShard(c.rank(0), "lm_head.weight", "0", 2).ok());
  REQUIRE(WriteShard(c.rank(0), "model.norm.weight", "0", 2).ok());
  CommitOutcome o = c.coordinator().Commit("t2");
  INFO(o.status.ToString());
  CHECK(o.decision == Decision::kCommit);
  Poke(c.rank(0), "lm_head.weight", kPaddingRowByte, 0x5A);
  REQUIRE(c.coordinator()
              .Begin(Req("t3", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  REQUIRE(c.WriteAll(3).ok());
  REQUIRE(c.RefreshAll().ok());
  CHECK(c.coordinator().Commit("t3").decision == Decision::kCommit);
  CHECK(c.rank(0).status().serving);
}

TEST_CASE("VerifyAllCatchesAnUndeclaredWriteInAWouldBeNoop") {
  // The issue's headline: a clean serving rank, the engine writes into its own tensor during a
  // transaction, commit. Verify all: abort, E_UNDECLARED_WRITE, dirty, not serving.
  Cluster c(2, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  Poke(c.rank(0), "kv_b", 3, 0x5A);
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.decision == Decision::kAbort);
  CHECK(o.status.code() == ErrorCode::kVoteNo);
  const Vote& v = o.votes[0].vote;
  CHECK_FALSE(v.yes);
  CHECK(v.error == ErrorCode::kUndeclaredWrite);
  CHECK(v.message.find("'kv_b'") != std::string::npos);
  CHECK(c.rank(0).status().dirty);
  CHECK_FALSE(c.rank(0).status().serving);
  CHECK(c.rank(1).status().serving);  // rank 1's bytes are what was committed
  // Durable: the rank is still dirty after a restart, and refuses a partial on top.
  c.Kill(0, /*power_loss=*/true);
  REQUIRE(c.Restart(0).ok());
  CHECK(c.rank(0).status().dirty);
  BeginOutcome b = c.coordinator().Begin(Req("t3", TxKind::kPartial, v1, {"attn"}));
  CHECK(b.status.code() == ErrorCode::kDirty);
  // Only a full commit cleans it.
  REQUIRE(c.FullCommit("t4", 1).status.ok());
  CHECK(c.rank(0).status().serving);
}

TEST_CASE("UndeclaredWriteKeepsTheRankDirtyEvenIfRollbackRestoresTheDeclaredBytes") {
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kPartial, v1, {"attn"}, {}, true, VerifyMode::kAll))
              .status.ok());
  REQUIRE(Land(c.rank(0), {"qkv", "", "", std::nullopt}, 2).ok());
  REQUIRE(Land(c.rank(0), {"kv_b", "", "", std::nullopt}, 2).ok());
  Poke(c.rank(0), "norm", 0, 0x11);  // outside the scope: undeclared
  REQUIRE(c.RefreshAll().ok());
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.decision == Decision::kAbort);
  CHECK(o.votes[0].vote.error == ErrorCode::kUndeclaredWrite);
  CHECK(o.votes[0].vote.message.find("'norm'") != std::string::npos);
  CHECK(c.rank(0).status().dirty);
  CHECK_FALSE(c.rank(0).status().serving);
}

TEST_CASE("TouchedModeDoesNotSeeAnUndeclaredWrite") {
  // Documented gap of the default mode: the write goes unseen (noop, still serving).
  Cluster c(1, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  Poke(c.rank(0), "kv_b", 3, 0x5A);
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.decision == Decision::kNoop);
  CHECK(c.rank(0).status().serving);
  // The on-demand verifier finds it.
  auto rep = c.rank(0).Verify();
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok);
  CHECK(c.rank(0).status().dirty);
}

TEST_CASE("VerifyOnDemandNamesParamsChunksAndBoxes") {
  Cluster c(1, SmallManifest());
  auto never = c.rank(0).Verify();
  REQUIRE(never.ok());
  CHECK_FALSE(never->comparable);
  CHECK(never->message.find("never committed") != std::string::npos);
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  auto clean = c.rank(0).Verify();
  REQUIRE(clean.ok());
  CHECK(clean->ok);
  CHECK(clean->comparable);
  CHECK(clean->chunks_checked == c.manifest().params().size());  // one chunk each here
  CHECK(clean->chunks_differing == 0);
  CHECK(c.rank(0).status().serving);
  Poke(c.rank(0), "qkv", 2 * 8 * 2 + 1, 0x77);  // row 2 of qkv (bf16 [32, 8])
  auto bad = c.rank(0).Verify();
  REQUIRE(bad.ok());
  CHECK_FALSE(bad->ok);
  CHECK(bad->params == std::vector<std::string>{"qkv"});
  REQUIRE(bad->differences.size() == 1);
  CHECK(bad->differences[0].first_chunk == 0);
  CHECK(bad->differences[0].chunks == 1);
  CHECK(bad->boxes[0] == Box{{0, 32}, {0, 8}});
  CHECK(c.rank(0).status().dirty);
  CHECK_FALSE(c.rank(0).status().serving);
  // A dirty rank is not comparable; during a transaction Verify is refused.
  auto dirty = c.rank(0).Verify();
  REQUIRE(dirty.ok());
  CHECK_FALSE(dirty->comparable);
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  CHECK(c.rank(0).Verify().status().code() == ErrorCode::kTxActive);
}

TEST_CASE("BorrowedMemoryIsNotZeroedAtOpen") {
  auto m = SmallManifest();
  Borrowed engine(*m);
  Cluster c(1, m);
  engine.Attach(c);
  for (const auto& b : engine.bufs) {
    CHECK(std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0xAB; }));
  }
  CHECK(LiveBytes(c.rank(0).memory(), 0)[0] == 0xAB);
  CHECK_FALSE(c.rank(0).status().loaded);
}

TEST_CASE("ReattachOverSurvivingBytesServesAgainDurably") {
  auto m = SmallManifest();
  Borrowed engine(*m);
  Cluster c(1, m);
  engine.Attach(c);
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  const std::string v1 = c.coordinator().CommittedVersion("t1").value();
  c.Kill(0, /*power_loss=*/false);  // wtx restarts, the engine (and its tensors) survive
  REQUIRE(c.Restart(0).ok());
  CHECK_FALSE(c.rank(0).status().loaded);
  CHECK_FALSE(c.rank(0).status().serving);
  auto rep = c.rank(0).Reattach();
  REQUIRE(rep.ok());
  CHECK(rep->ok);
  CHECK(rep->chunks_checked == m->params().size());
  CHECK(c.rank(0).status().loaded);
  CHECK_FALSE(c.rank(0).status().dirty);
  CHECK(c.rank(0).status().serving);
  CHECK(c.rank(0).status().version == v1);
  // A partial update builds on it.
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kPartial, v1, {"rest"})).status.ok());
  REQUIRE(c.coordinator().Abort("t2").status.ok());
  // Every wtx restart needs a new Reattach (a restart marks the rank dirty); it succeeds again.
  c.Kill(0, /*power_loss=*/true);
  REQUIRE(c.Restart(0).ok());
  auto again = c.rank(0).Reattach();
  REQUIRE(again.ok());
  CHECK(again->ok);
  CHECK(c.rank(0).status().serving);
}

TEST_CASE("ReattachWithChangedBytesStaysUnloadedNamingThem") {
  auto m = SmallManifest();
  Borrowed engine(*m);
  Cluster c(1, m);
  engine.Attach(c);
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  c.Kill(0, false);
  engine.bufs[*m->FindParam("norm")][5] ^= 0xFF;  // changed while wtx was down
  REQUIRE(c.Restart(0).ok());
  auto rep = c.rank(0).Reattach();
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok);
  CHECK(rep->comparable);
  CHECK(rep->params == std::vector<std::string>{"norm"});
  CHECK(rep->message.find("'norm'") != std::string::npos);
  CHECK_FALSE(c.rank(0).status().loaded);
  CHECK_FALSE(c.rank(0).status().serving);
  // Never committed / in a transaction: nothing to reattach to, or refused.
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  CHECK(c.rank(0).Reattach().status().code() == ErrorCode::kTxActive);
}

TEST_CASE("ReattachWithoutACommitIsNotComparable") {
  Cluster c(1, SmallManifest());
  auto rep = c.rank(0).Reattach();
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->comparable);
  CHECK_FALSE(c.rank(0).status().loaded);
}

TEST_CASE("WritesAndPatchesFromDeviceMemory") {
  auto m = SmallManifest();
  // Reference device live memory: "device" pointers are host addresses the backend copies from.
  Cluster dev(1, m);
  dev.SetMemoryFactory([](const Manifest& mm) {
    return std::shared_ptr<LiveMemory>(NewReferenceDeviceLiveMemory(mm));
  });
  REQUIRE(dev.Restart(0).ok());
  Cluster host(1, m);
  host.SetMemoryFactory([](const Manifest&) { return nullptr; });
  REQUIRE(host.Restart(0).ok());
  for (Cluster* c : {&dev, &host}) {
    REQUIRE(c->coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
    for (const auto& ps : m->params()) {
      auto bytes = Pattern(*m, ps.name, WholeBox(ps.shape), 4);
      WritePiece w{ps.name, "", std::nullopt, bytes.data(), bytes.size()};
      if (c == &dev) w.location = BufferLocation::kDevice;
      REQUIRE(c->rank(0).Write({&w, 1}).ok());
    }
    REQUIRE(c->RefreshAll().ok());
    REQUIRE(c->coordinator().Commit("t1").decision == Decision::kCommit);
  }
  CHECK(dev.coordinator().CommittedVersion("t1") == host.coordinator().CommittedVersion("t1"));
  // Host live memory refuses a device source, changing nothing.
  REQUIRE(host.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  uint8_t byte[32] = {};
  WritePiece w{"norm", "", std::nullopt, byte, 32};
  w.location = BufferLocation::kDevice;
  CHECK(host.rank(0).Write({&w, 1}).code() == ErrorCode::kInvalidArgument);
  CHECK_FALSE(host.rank(0).status().dirty);
  REQUIRE(host.coordinator().Abort("t2").status.ok());
  // Scatter with the index and value arrays on the device side.
  const std::string v1 = dev.coordinator().CommittedVersion("t1").value();
  for (Cluster* c : {&dev, &host}) {
    REQUIRE(c->coordinator().Begin(Req("t3", TxKind::kDelta, v1, {}, {"k_proj"})).status.ok());
    std::vector<int64_t> idx{0, 9, 63};
    std::vector<uint16_t> vals{1, 2, 3};
    PatchRequest pr{"k_proj", idx, vals.data(), vals.size() * 2, 0, 1};
    if (c == &dev) {
      pr.indices_location = BufferLocation::kDevice;
      pr.values_location = BufferLocation::kDevice;
    }
    REQUIRE(c->rank(0).Patch(pr).ok());
    REQUIRE(c->RefreshAll().ok());
    REQUIRE(c->coordinator().Commit("t3").decision == Decision::kCommit);
  }
  CHECK(dev.coordinator().CommittedVersion("t3") == host.coordinator().CommittedVersion("t3"));
}

namespace {

// big (bf16 [256, 512]: 256 KiB, four 64 KiB hash chunks of 64 rows each) and small
// (f32 [16], one short chunk).
ManifestPtr ChunkyManifest() {
  return ParseManifest(nlohmann::json::parse(R"({
    "params": [{"name": "big", "dtype": "bf16", "shape": [256, 512]},
               {"name": "small", "dtype": "f32", "shape": [16]}],
    "modules": [{"name": "all", "params": ["big", "small"]}]
  })"))
      .value();
}

constexpr size_t kBigRowBytes = 512 * 2;

LandingRegion Rows(int64_t begin, int64_t end) {
  return {"big", "", "", Box{{begin, end}, {0, 512}}};
}

// An undeclared write that surely changes the byte.
void Flip(Participant& p, const std::string& param, size_t offset) {
  const uint32_t i = *p.manifest().FindParam(param);
  uint8_t b = 0;
  REQUIRE(p.memory().Load(i, offset, &b, 1).ok());
  b ^= 0xFF;
  REQUIRE(p.memory().Store(i, offset, &b, 1).ok());
}

// The committed digest of rank 0 is a from-scratch hash of its live bytes.
bool VersionIsTheLiveBytes(Participant& p) {
  auto live = p.RecomputeDigest();
  REQUIRE(live.ok());
  return p.status().digest == live.value();
}

}  // namespace

TEST_CASE("LandedChunksHashedAtLandingMatchPrepareRehash") {
  // Buckets that cover chunks whole (hashed at Landed), end inside a chunk, or reach the short
  // last chunk; plus a Write sharing a chunk with a landing. verify "all" makes prepare rehash
  // every chunk and compare each chunk hashed at Landed with that digest: a yes vote means
  // they all matched the live bytes.
  auto m = ChunkyManifest();
  Cluster c(1, m);
  REQUIRE(c.coordinator()
              .Begin(Req("t1", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 64}, {64, 200}}) {
    REQUIRE(Land(c.rank(0), Rows(b, e), 3).ok());
  }
  auto tail = Pattern(*m, "big", Box{{200, 256}, {0, 512}}, 3);
  WritePiece w{"big", "", Box{{200, 256}, {0, 512}}, tail.data(), tail.size()};
  REQUIRE(c.rank(0).Write({&w, 1}).ok());
  REQUIRE(Land(c.rank(0), {"small", "", "", std::nullopt}, 3).ok());
  CommitOutcome o = c.coordinator().Commit("t1");
  REQUIRE(o.status.ok());
  REQUIRE(o.decision == Decision::kCommit);
  CHECK(VersionIsTheLiveBytes(c.rank(0)));
  // The same bytes through Write alone: the same version.
  Cluster wc(1, m);
  REQUIRE(wc.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  for (const Box& box :
       {Box{{0, 64}, {0, 512}}, Box{{64, 200}, {0, 512}}, Box{{200, 256}, {0, 512}}}) {
    auto bytes = Pattern(*m, "big", box, 3);
    WritePiece piece{"big", "", box, bytes.data(), bytes.size()};
    REQUIRE(wc.rank(0).Write({&piece, 1}).ok());
  }
  auto small = Pattern(*m, "small", WholeBox({16}), 3);
  WritePiece sp{"small", "", std::nullopt, small.data(), small.size()};
  REQUIRE(wc.rank(0).Write({&sp, 1}).ok());
  CommitOutcome ow = wc.coordinator().Commit("t1");
  REQUIRE(ow.decision == Decision::kCommit);
  CHECK(ow.version == o.version);
}

TEST_CASE("BytesChangedAfterLandedAreCaughtByVerifyAll") {
  auto m = ChunkyManifest();
  // On a clean committed rank: the landed chunk 1 of big changes after Landed.
  Cluster c(1, m);
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  REQUIRE(LandAll(c.rank(0), 2).ok());
  Flip(c.rank(0), "big", 70 * kBigRowBytes);  // row 70: chunk 1
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.decision == Decision::kAbort);
  const Vote& v = o.votes[0].vote;
  CHECK(v.error == ErrorCode::kUndeclaredWrite);
  CHECK(v.message.find("'big' chunks [1, 2)") != std::string::npos);
  CHECK(v.message.find("after this transaction declared them written or landed") !=
        std::string::npos);
  CHECK(c.rank(0).status().dirty);
  CHECK_FALSE(c.rank(0).status().serving);
  // Only a full commit cleans it.
  REQUIRE(c.FullCommit("t3", 1).status.ok());
  CHECK(c.rank(0).status().serving);

  // A rank with nothing committed to compare with still catches it: the landing's own digest.
  Cluster fresh(1, m);
  REQUIRE(fresh.coordinator()
              .Begin(Req("t1", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  REQUIRE(LandAll(fresh.rank(0), 2).ok());
  Flip(fresh.rank(0), "big", 200 * kBigRowBytes);  // chunk 3
  CommitOutcome of = fresh.coordinator().Commit("t1");
  CHECK(of.decision == Decision::kAbort);
  CHECK(of.votes[0].vote.error == ErrorCode::kUndeclaredWrite);
  CHECK(of.votes[0].vote.message.find("'big' chunks [3, 4)") != std::string::npos);

  // The same for bytes a Write copied whole, on every memory: into host memory they are
  // hashed in the copy's pass, into device memory right after the store (the outcome must not
  // depend on where the live bytes are).
  Cluster wc(1, m);
  REQUIRE(wc.FullCommit("t1", 1).status.ok());
  REQUIRE(wc.coordinator()
              .Begin(Req("t2", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  REQUIRE(wc.WriteAll(2).ok());
  Flip(wc.rank(0), "big", 130 * kBigRowBytes);  // chunk 2
  CommitOutcome ow = wc.coordinator().Commit("t2");
  CHECK(ow.decision == Decision::kAbort);
  CHECK(ow.votes[0].vote.error == ErrorCode::kUndeclaredWrite);
  CHECK(ow.votes[0].vote.message.find("'big' chunks [2, 3)") != std::string::npos);
}

TEST_CASE("BytesChangedAfterLandedGoUnseenByTouchedUntilVerify") {
  // The default mode trusts the landing: the version describes the bytes as landed. The next
  // Verify() finds the difference and makes the rank dirty.
  Cluster c(1, ChunkyManifest());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  REQUIRE(LandAll(c.rank(0), 2).ok());
  Flip(c.rank(0), "big", 70 * kBigRowBytes);  // chunk 1, landed whole
  CommitOutcome o = c.coordinator().Commit("t1");
  REQUIRE(o.decision == Decision::kCommit);
  CHECK_FALSE(VersionIsTheLiveBytes(c.rank(0)));
  CHECK(c.rank(0).status().serving);
  auto rep = c.rank(0).Verify();
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok);
  REQUIRE(rep->differences.size() == 1);
  CHECK(rep->differences[0].param == "big");
  CHECK(rep->differences[0].first_chunk == 1);
  CHECK(c.rank(0).status().dirty);
  CHECK_FALSE(c.rank(0).status().serving);
}

TEST_CASE("PartialChunkLandingIsRehashedAtPrepare") {
  auto m = ChunkyManifest();
  Cluster c(1, m);
  // Rows [0, 32) and [32, 256): chunk 0 is covered whole by neither landing, so prepare reads
  // it from live memory; a later change to it is in the version (documented, not a licence:
  // after Landed the bytes are final).
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  REQUIRE(Land(c.rank(0), Rows(0, 32), 1).ok());
  REQUIRE(Land(c.rank(0), Rows(32, 256), 1).ok());
  REQUIRE(Land(c.rank(0), {"small", "", "", std::nullopt}, 1).ok());
  Flip(c.rank(0), "big", 40 * kBigRowBytes);  // row 40: chunk 0
  REQUIRE(c.coordinator().Commit("t1").decision == Decision::kCommit);
  CHECK(VersionIsTheLiveBytes(c.rank(0)));
  // Column halves: every row is two runs of 512 bytes, so neither landing covers a chunk
  // whole; all four chunks are rehashed at prepare.
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  REQUIRE(Land(c.rank(0), {"big", "", "", Box{{0, 256}, {0, 256}}}, 2).ok());
  REQUIRE(Land(c.rank(0), {"big", "", "", Box{{0, 256}, {256, 512}}}, 2).ok());
  REQUIRE(Land(c.rank(0), {"small", "", "", std::nullopt}, 2).ok());
  Flip(c.rank(0), "big", 250 * kBigRowBytes + 600);  // chunk 3
  CommitOutcome o = c.coordinator().Commit("t2");
  REQUIRE(o.decision == Decision::kCommit);
  CHECK(VersionIsTheLiveBytes(c.rank(0)));
  // Without a change after Landed, too, the version is the live bytes.
  Cluster wc(1, m);
  REQUIRE(wc.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  REQUIRE(Land(wc.rank(0), {"big", "", "", Box{{0, 256}, {0, 256}}}, 2).ok());
  REQUIRE(Land(wc.rank(0), {"big", "", "", Box{{0, 256}, {256, 512}}}, 2).ok());
  REQUIRE(Land(wc.rank(0), {"small", "", "", std::nullopt}, 2).ok());
  CommitOutcome ol = wc.coordinator().Commit("t2");
  REQUIRE(ol.decision == Decision::kCommit);
  CHECK(VersionIsTheLiveBytes(wc.rank(0)));
}

TEST_CASE("LandingHashThreadsHashInTheBackgroundWithTheSameResults") {
  // landing_hash_threads: under verify "touched" Landed hands the whole chunks to background
  // threads and prepare waits for them: the same version as hashing in the caller's thread.
  auto m = ChunkyManifest();
  Cluster inline_rank(1, m);
  Cluster threaded(1, m);
  threaded.SetLandingHashThreads(2);
  REQUIRE(threaded.Restart(0).ok());
  std::string versions[2];
  int k = 0;
  for (Cluster* c : {&inline_rank, &threaded}) {
    REQUIRE(c->coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 100}, {100, 192}, {192, 256}}) {
      REQUIRE(Land(c->rank(0), Rows(b, e), 6).ok());
    }
    REQUIRE(Land(c->rank(0), {"small", "", "", std::nullopt}, 6).ok());
    CommitOutcome o = c->coordinator().Commit("t1");
    REQUIRE(o.decision == Decision::kCommit);
    CHECK(VersionIsTheLiveBytes(c->rank(0)));
    versions[k++] = o.version;
  }
  CHECK(versions[0] == versions[1]);
  // Under verify "touched" a change after the background hash read the landed chunk is trusted
  // away at prepare (the version describes the bytes as landed); the next Verify() finds it.
  REQUIRE(threaded.coordinator().Begin(Req("t1b", TxKind::kFull)).status.ok());
  REQUIRE(LandAll(threaded.rank(0), 10).ok());
  WaitForLandingHashes(threaded.rank(0));
  Flip(threaded.rank(0), "big", 130 * kBigRowBytes);  // chunk 2
  REQUIRE(threaded.coordinator().Commit("t1b").decision == Decision::kCommit);
  auto after = threaded.rank(0).Verify();
  REQUIRE(after.ok());
  CHECK_FALSE(after->ok);
  // Under verify "all" Landed hashes in the caller's thread even with hash threads: a change
  // right after Landed (no wait for any background work) is caught every time.
  REQUIRE(threaded.coordinator()
              .Begin(Req("t2", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
              .status.ok());
  REQUIRE(LandAll(threaded.rank(0), 7).ok());
  Flip(threaded.rank(0), "big", 130 * kBigRowBytes);  // chunk 2
  CommitOutcome bad = threaded.coordinator().Commit("t2");
  CHECK(bad.decision == Decision::kAbort);
  CHECK(bad.votes[0].vote.error == ErrorCode::kUndeclaredWrite);
  // A rollback abort waits for the hashing before restoring the bytes.
  REQUIRE(threaded.FullCommit("t3", 8).status.ok());
  const std::string v3 = threaded.coordinator().CommittedVersion("t3").value();
  REQUIRE(
      threaded.coordinator().Begin(Req("t4", TxKind::kPartial, v3, {"all"}, {}, true)).status.ok());
  REQUIRE(LandAll(threaded.rank(0), 9).ok());
  REQUIRE(threaded.coordinator().Abort("t4").status.ok());
  CHECK(threaded.rank(0).status().serving);
  CHECK(VersionIsTheLiveBytes(threaded.rank(0)));
  // Out of range: Open refuses it.
  threaded.SetLandingHashThreads(-1);
  CHECK(threaded.Restart(0).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("LargeLandingsAreHashedOnTheDataThreadsWithTheSameResults") {
  // ParticipantOptions::threads > 1 (the default on a machine with several cores): Landed hands
  // a landing of at least 1 MiB of whole chunks to the data-path threads and returns; prepare
  // waits for them and only combines digests. The versions equal those of one thread (hashing
  // in Landed), small landings included, and describe the live bytes.
  auto m = ParseManifest(nlohmann::json::parse(R"({
    "params": [{"name": "huge", "dtype": "bf16", "shape": [1024, 1536]},
               {"name": "small", "dtype": "f32", "shape": [16]}],
    "modules": [{"name": "all", "params": ["huge", "small"]}]
  })"))
               .value();
  std::string versions[2];
  int k = 0;
  for (int threads : {1, 3}) {
    Cluster c(1, m);
    c.SetThreads(threads);
    REQUIRE(c.Restart(0).ok());
    REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 700}, {700, 1000}, {1000, 1024}}) {
      REQUIRE(Land(c.rank(0), {"huge", "", "", Box{{b, e}, {0, 1536}}}, 4).ok());
    }
    REQUIRE(Land(c.rank(0), {"small", "", "", std::nullopt}, 4).ok());
    CommitOutcome o = c.coordinator().Commit("t1");
    REQUIRE(o.decision == Decision::kCommit);
    INFO("threads " << threads);
    CHECK(VersionIsTheLiveBytes(c.rank(0)));
    versions[k++] = o.version;
    // Under verify "all" Landed hashes in the caller's thread whatever the threads: a change
    // right after Landed is caught every time.
    REQUIRE(c.coordinator()
                .Begin(Req("t2", TxKind::kFull, "", {}, {}, false, VerifyMode::kAll))
                .status.ok());
    REQUIRE(LandAll(c.rank(0), 7).ok());
    Flip(c.rank(0), "huge", 3 * (size_t{1} << 20) / 2);
    CommitOutcome bad = c.coordinator().Commit("t2");
    CHECK(bad.decision == Decision::kAbort);
    CHECK(bad.votes[0].vote.error == ErrorCode::kUndeclaredWrite);
    // A rollback abort waits for the background hashing before restoring the bytes.
    REQUIRE(c.FullCommit("t3", 8).status.ok());
    const std::string v3 = c.coordinator().CommittedVersion("t3").value();
    REQUIRE(c.coordinator().Begin(Req("t4", TxKind::kPartial, v3, {"all"}, {}, true)).status.ok());
    REQUIRE(LandAll(c.rank(0), 9).ok());
    REQUIRE(c.coordinator().Abort("t4").status.ok());
    CHECK(c.rank(0).status().serving);
    CHECK(VersionIsTheLiveBytes(c.rank(0)));
  }
  CHECK(versions[0] == versions[1]);
}
