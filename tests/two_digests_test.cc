// Two digests (DESIGN.md, "Two digests: what was sent, and what is served"): a processed
// parameter (its live tensor holds a served form, fp8-like bytes computed from bf16 checkpoint
// bytes) commits the checkpoint version the trainer computes, serves another digest that verify
// checks, takes a delta based on the checkpoint version, and keeps its checkpoint digest across
// a restart; journals written before two digests keep reading.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "src/txn/coordinator_records.h"
#include "src/txn/decision_log_records.h"
#include "src/txn/logged_decision_json.h"
#include "src/txn/participant_records.h"
#include "tests/test_util.h"
#include "wtx/expected_version.h"
#include "wtx/journal_reader.h"

namespace wtx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Cluster;
using testing::Req;

// "w" is served as u8 (one byte per element, as an fp8 quantization serves a bf16 checkpoint);
// its two shards meet inside a hash chunk (100 rows of 512 bytes), so the checkpoint digest is
// assembled from runs that cut a chunk. "n" is served as sent.
json ProcessedManifestJson() {
  return json::parse(R"({
    "params": [
      {"name": "w", "dtype": "bf16", "shape": [256, 256],
       "served": {"dtype": "u8", "shape": [256, 256]},
       "shards": [
        {"id": "q", "source": "q", "source_shape": [100, 256], "box": [[0, 100], [0, 256]],
         "source_box": [[0, 100], [0, 256]]},
        {"id": "k", "source": "k", "source_shape": [156, 256], "box": [[100, 256], [0, 256]],
         "source_box": [[0, 156], [0, 256]]}]},
      {"name": "n", "dtype": "f32", "shape": [16]}
    ],
    "modules": [{"name": "attn", "params": ["w"]}, {"name": "norm", "params": ["n"]}],
    "derived": [{"name": "w_scale", "sources": ["w"], "phase": "post_load"}]
  })");
}

ManifestPtr ProcessedManifest() { return ParseManifest(ProcessedManifestJson()).value(); }

std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>((i * 131 + seed * 977) >> 3);
  return out;
}

// The trainer's sources: q [100, 256] and k [156, 256] bf16, n [16] f32.
struct Sources {
  std::vector<uint8_t> q, k, n;
  explicit Sources(uint32_t seed)
      : q(Bytes(100 * 256 * 2, seed)), k(Bytes(156 * 256 * 2, seed + 1)), n(Bytes(16 * 4, seed)) {}
  std::vector<SourceTensor> Tensors() const {
    return {{"q", {100, 256}, DType::kBF16, q.data(), q.size()},
            {"k", {156, 256}, DType::kBF16, k.data(), k.size()},
            {"n", {16}, DType::kF32, n.data(), n.size()}};
  }
  std::string Expected(const Manifest& m) const {
    auto e = ComputeExpectedVersion({&m}, Tensors());
    REQUIRE(e.ok());
    return e->version;
  }
};

// The engine's post-load processing: the served bytes of "w" (the high byte of each bf16
// element), written into live memory by the engine, not through wtx.
void Process(Participant& p, const Sources& s) {
  std::vector<uint8_t> served;
  for (const auto* src : {&s.q, &s.k}) {
    for (size_t i = 1; i < src->size(); i += 2) served.push_back((*src)[i]);
  }
  REQUIRE(p.memory().Store(0, 0, served.data(), served.size()).ok());
}

// Begins `tx` (full, or partial over `modules`), declares w's sources (when in scope), writes n,
// processes, refreshes, and commits.
CommitOutcome Update(Cluster& c, const std::string& tx, const Sources& s, TxKind kind,
                     std::string base = "", std::vector<std::string> modules = {},
                     std::optional<std::string> expect = std::nullopt) {
  Participant& p = c.rank(0);
  const bool attn =
      kind == TxKind::kFull || std::find(modules.begin(), modules.end(), "attn") != modules.end();
  REQUIRE(c.coordinator().Begin(Req(tx, kind, std::move(base), modules)).status.ok());
  if (attn) {
    auto q = p.DeclareSource("q", s.q.data(), s.q.size());
    REQUIRE(q.ok());
    CHECK(q.value() == 1);
    REQUIRE(p.DeclareSource("k", s.k.data(), s.k.size()).ok());
    Process(p, s);
  }
  REQUIRE(p.WriteSource("n", s.n.data(), s.n.size()).ok());
  REQUIRE(p.Refresh("*").ok());
  CommitOptions o;
  o.expect_version = std::move(expect);
  return c.coordinator().Commit(tx, o);
}

// A delta's patch of one element (`index`, flat in `source`) to `value`.
template <typename T>
Status PatchOne(Participant& p, const std::string& source, int64_t index, const T& value) {
  const int64_t indices[] = {index};
  PatchRequest patch;
  patch.source = source;
  patch.indices = indices;
  patch.values = &value;
  patch.value_bytes = sizeof(value);
  return p.Patch(patch);
}

TEST_CASE("ProcessedParameterCommitsTheCheckpointVersionAndServesAnotherDigest") {
  ManifestPtr m = ProcessedManifest();
  Cluster c(1, m);
  Sources s(1);
  const std::string expected = s.Expected(*m);
  CommitOutcome o = Update(c, "t1", s, TxKind::kFull, "", {}, expected);
  INFO(o.status.ToString());
  REQUIRE(o.decision == Decision::kCommit);
  CHECK(o.version == expected);
  CHECK_FALSE(o.served_digest.empty());
  CHECK(o.served_digest != o.version);
  RankStatus st = c.rank(0).status();
  CHECK(st.version == expected);
  CHECK(st.served_digest == o.served_digest);
  CHECK(st.serving);
  // The served digest is of the live bytes: what verify checks, and what a recomputation says.
  auto rep = c.rank(0).Verify();
  REQUIRE(rep.ok());
  CHECK(rep->ok);
  CHECK(rep->comparable);
}

TEST_CASE("ExpectingTheServedDigestInsteadOfTheCheckpointVersionAborts") {
  ManifestPtr m = ProcessedManifest();
  Cluster c(1, m);
  Sources s(2);
  CommitOutcome first = Update(c, "t1", s, TxKind::kFull);
  REQUIRE(first.decision == Decision::kCommit);
  CommitOutcome o = Update(c, "t2", Sources(3), TxKind::kFull, "", {}, first.served_digest);
  CHECK(o.decision == Decision::kAbort);
  CHECK(o.status.code() == ErrorCode::kVersionMismatch);
}

TEST_CASE("AFlippedServedByteIsFoundByVerify") {
  ManifestPtr m = ProcessedManifest();
  Cluster c(1, m);
  Sources s(4);
  REQUIRE(Update(c, "t1", s, TxKind::kFull).decision == Decision::kCommit);
  Participant& p = c.rank(0);
  uint8_t b = 0;
  REQUIRE(p.memory().Load(0, 40000, &b, 1).ok());
  b ^= 0x10;
  REQUIRE(p.memory().Store(0, 40000, &b, 1).ok());
  auto rep = p.Verify();
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok);
  REQUIRE(rep->params.size() == 1);
  CHECK(rep->params[0] == "w");
  // The box is in the live tensor's coordinates (u8 [256, 256]: its one chunk is every row).
  REQUIRE(rep->differences.size() == 1);
  CHECK(rep->differences[0].box == Box{{0, 256}, {0, 256}});
  CHECK_FALSE(p.status().serving);
}

TEST_CASE("ADeltaOnTheProcessedModelBasesOnTheCheckpointVersion") {
  ManifestPtr m = ProcessedManifest();
  Cluster c(1, m);
  Sources s(5);
  CommitOutcome full = Update(c, "t1", s, TxKind::kFull);
  REQUIRE(full.decision == Decision::kCommit);
  Participant& p = c.rank(0);
  // Based on the served digest: refused.
  BeginOutcome wrong =
      c.coordinator().Begin(Req("t2", TxKind::kDelta, full.served_digest, {}, {"n"}));
  CHECK(wrong.status.code() == ErrorCode::kBaseMismatch);
  REQUIRE(c.coordinator().Begin(Req("t3", TxKind::kDelta, full.version, {}, {"n"})).status.ok());
  const float value = 2.5f;
  REQUIRE(PatchOne(p, "n", 3, value).ok());
  REQUIRE(p.Refresh("*").ok());
  std::memcpy(s.n.data() + 3 * sizeof(float), &value, sizeof(value));
  CommitOptions expect;
  expect.expect_version = s.Expected(*m);
  CommitOutcome delta = c.coordinator().Commit("t3", expect);
  INFO(delta.status.ToString());
  REQUIRE(delta.decision == Decision::kCommit);
  CHECK(delta.version == s.Expected(*m));
  CHECK(delta.served_digest != delta.version);
}

TEST_CASE("AProcessedParameterTakesNoWriteLandingOrPatch") {
  ManifestPtr m = ProcessedManifest();
  Cluster c(1, m);
  Sources s(6);
  REQUIRE(Update(c, "t1", s, TxKind::kFull).decision == Decision::kCommit);
  Participant& p = c.rank(0);
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  auto w = p.WriteSource("q", s.q.data(), s.q.size());
  REQUIRE_FALSE(w.ok());
  CHECK(w.status().code() == ErrorCode::kBadWrite);
  CHECK_THAT(w.status().message(), Catch::Contains("'w' is processed (served as u8"));
  LandingRegion region;
  region.param = "w";
  auto r = p.Reserve(region);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::kBadWrite);
  // Declaring a parameter that is not processed names it.
  auto d = p.DeclareSource("n", s.n.data(), s.n.size());
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(d.status().message(), Catch::Contains("is not processed"));
  // A duplicated declared shard is a duplicate write, as a written one is.
  REQUIRE(p.DeclareSource("q", s.q.data(), s.q.size()).ok());
  auto again = p.DeclareSource("q", s.q.data(), s.q.size());
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().code() == ErrorCode::kDuplicateWrite);
  // Only q declared: k's rows are missing coverage, by shard.
  REQUIRE(p.WriteSource("n", s.n.data(), s.n.size()).ok());
  REQUIRE(p.Refresh("*").ok());
  CommitOutcome o = c.coordinator().Commit("t2");
  CHECK(o.decision == Decision::kAbort);
  REQUIRE_FALSE(o.votes.empty());
  CHECK(o.votes[0].vote.error == ErrorCode::kCoverageIncomplete);
  REQUIRE_FALSE(o.votes[0].vote.missing.empty());
  CHECK(o.votes[0].vote.missing[0].shard == "k");
}

TEST_CASE("TheCheckpointDigestOfAProcessedParameterSurvivesARestart") {
  ManifestPtr m = ProcessedManifest();
  Cluster c(1, m);
  Sources s(7);
  CommitOutcome full = Update(c, "t1", s, TxKind::kFull);
  REQUIRE(full.decision == Decision::kCommit);
  // The process restarts over live bytes that survived; reattach proves the served bytes, and
  // the journal gives back w's checkpoint digest, which the live bytes do not show.
  std::vector<uint8_t> live = testing::LiveBytes(c.rank(0).memory(), 0);
  std::vector<uint8_t> norm = testing::LiveBytes(c.rank(0).memory(), 1);
  REQUIRE(c.Restart(0).ok());
  Participant& p = c.rank(0);
  REQUIRE(p.memory().Store(0, 0, live.data(), live.size()).ok());
  REQUIRE(p.memory().Store(1, 0, norm.data(), norm.size()).ok());
  auto rep = p.Reattach();
  REQUIRE(rep.ok());
  REQUIRE(rep->ok);
  CHECK(p.status().served_digest == full.served_digest);
  // A partial update of the norm alone: the version still counts w's checkpoint bytes.
  Sources next = s;
  next.n = Bytes(16 * 4, 99);
  CommitOutcome o =
      Update(c, "t2", next, TxKind::kPartial, full.version, {"norm"}, next.Expected(*m));
  INFO(o.status.ToString());
  CHECK(o.decision == Decision::kCommit);
  CHECK(o.version == next.Expected(*m));
}

TEST_CASE("ACatchUpAdoptsThePeersServedBytesAndMustReproduceItsServedDigest") {
  ManifestPtr m = ProcessedManifest();
  Cluster peer(1, m);
  Sources s(8);
  CommitOutcome theirs = Update(peer, "t1", s, TxKind::kFull);
  REQUIRE(theirs.decision == Decision::kCommit);
  Participant& a = peer.rank(0);
  const auto checkpoint = a.CommittedCheckpointDigest(0);
  REQUIRE(checkpoint);
  CHECK_FALSE(a.CommittedCheckpointDigest(1));  // "n" is not processed
  const std::vector<uint8_t> served = testing::LiveBytes(a.memory(), 0);
  const std::vector<uint8_t> norm = testing::LiveBytes(a.memory(), 1);
  // `flip`: one served byte differs from the peer's on the way.
  auto catch_up = [&](Cluster& c, const std::string& tx, bool flip) {
    Participant& b = c.rank(0);
    REQUIRE(c.coordinator().Begin(Req(tx, TxKind::kFull)).status.ok());
    std::vector<uint8_t> bytes = served;
    if (flip) bytes[1234] ^= 1;
    REQUIRE(b.AdoptServed("w", bytes.data(), bytes.size(), *checkpoint).ok());
    WritePiece w{"n", "", std::nullopt, norm.data(), norm.size()};
    REQUIRE(b.Write({&w, 1}).ok());
    REQUIRE(b.Refresh("*").ok());
    CommitOptions o;
    o.expect_version = theirs.version;
    o.expect_served_digest = theirs.served_digest;
    return c.coordinator().Commit(tx, o);
  };
  Cluster lagging(1, m);
  // The checkpoint version alone cannot tell (its digest of "w" is the peer's): the served
  // digest does.
  CommitOutcome bad = catch_up(lagging, "catch-up.1", /*flip=*/true);
  CHECK(bad.decision == Decision::kAbort);
  CHECK(bad.status.code() == ErrorCode::kVersionMismatch);
  CHECK_THAT(bad.status.message(), Catch::Contains("served digests"));
  CommitOutcome ok = catch_up(lagging, "catch-up.2", /*flip=*/false);
  INFO(ok.status.ToString());
  REQUIRE(ok.decision == Decision::kCommit);
  CHECK(ok.version == theirs.version);
  CHECK(ok.served_digest == theirs.served_digest);
  CHECK(lagging.rank(0).CommittedCheckpointDigest(0) == checkpoint);
  // Adopting a parameter that is not processed, or the wrong size, is refused by name.
  REQUIRE(lagging.coordinator().Begin(Req("t3", TxKind::kFull)).status.ok());
  Status st = lagging.rank(0).AdoptServed("n", norm.data(), norm.size(), 1);
  CHECK(st.code() == ErrorCode::kInvalidArgument);
  st = lagging.rank(0).AdoptServed("w", served.data(), served.size() - 1, 1);
  CHECK(st.code() == ErrorCode::kBadWrite);
  CHECK_THAT(st.message(), Catch::Contains("'w'"));
}

// An MLA layer: kv_b as sent, and W_UV the engine absorbs from it (served only: no source).
json MlaManifestJson() {
  return json::parse(R"({
    "params": [
      {"name": "kv_b", "dtype": "bf16", "shape": [64, 32]},
      {"name": "W_UV", "dtype": "bf16", "shape": [32, 32],
       "served": {"dtype": "bf16", "shape": [32, 32]},
       "shards": [{"id": "absorbed", "layout": "padding", "box": [[0, 32], [0, 32]]}]}
    ],
    "modules": [{"name": "attn", "params": ["kv_b", "W_UV"]}],
    "derived": [{"name": "absorb", "sources": ["kv_b"], "phase": "attention"}]
  })");
}

// The engine's absorption: W_UV from kv_b's live bytes (any deterministic function will do).
void Absorb(Participant& p) {
  std::vector<uint8_t> kv = testing::LiveBytes(p.memory(), 0);
  std::vector<uint8_t> uv(32 * 32 * 2);
  for (size_t i = 0; i < uv.size(); ++i) uv[i] = static_cast<uint8_t>(kv[i] * 3 + kv[i + 7]);
  REQUIRE(p.memory().Store(1, 0, uv.data(), uv.size()).ok());
  REQUIRE(p.Refresh("*").ok());
}

TEST_CASE("AServedOnlyTensorCountsInTheServedDigestAndIsRestoredOnAbort") {
  ManifestPtr m = ParseManifest(MlaManifestJson()).value();
  Cluster c(1, m);
  Participant& p = c.rank(0);
  std::vector<uint8_t> kv = Bytes(64 * 32 * 2, 3);
  SourceTensor src{"kv_b", {64, 32}, DType::kBF16, kv.data(), kv.size()};
  auto expected = ComputeExpectedVersion({m.get()}, {src});
  REQUIRE(expected.ok());
  REQUIRE(c.coordinator().Begin(Req("t1", TxKind::kFull)).status.ok());
  REQUIRE(p.WriteSource("kv_b", kv.data(), kv.size()).ok());
  // Nothing is declared for it: it has no source.
  WritePiece w{"W_UV", "", std::nullopt, kv.data(), 32 * 32 * 2};
  Status declared = p.Declare({&w, 1});
  CHECK(declared.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(declared.message(), Catch::Contains("served only"));
  Absorb(p);
  CommitOptions o;
  o.expect_version = expected->version;
  CommitOutcome first = c.coordinator().Commit("t1", o);
  INFO(first.status.ToString());
  REQUIRE(first.decision == Decision::kCommit);
  CHECK(first.version == expected->version);  // the trainer's: W_UV counts as zeros there
  CHECK(first.served_digest != first.version);
  const std::vector<uint8_t> uv_before = testing::LiveBytes(p.memory(), 1);
  // A rolled-back delta whose absorption ran, then aborted: W_UV's bytes come back too.
  REQUIRE(c.coordinator()
              .Begin(Req("t2", TxKind::kDelta, first.version, {}, {"kv_b"}, /*rollback=*/true))
              .status.ok());
  REQUIRE(PatchOne(p, "kv_b", 5, uint16_t{0x4000}).ok());
  Absorb(p);
  CHECK(testing::LiveBytes(p.memory(), 1) != uv_before);
  CHECK(c.coordinator().Abort("t2").status.ok());
  CHECK(testing::LiveBytes(p.memory(), 1) == uv_before);
  // The absorption refreshed from the aborted bytes is stale until the engine runs it again
  // (it recomputes the restored bytes: the same).
  CHECK(p.status().stale_derived == std::vector<std::string>{"absorb"});
  Absorb(p);
  CHECK(testing::LiveBytes(p.memory(), 1) == uv_before);
  RankStatus st = p.status();
  CHECK(st.serving);
  CHECK(st.served_digest == first.served_digest);
  auto rep = p.Verify();
  REQUIRE(rep.ok());
  CHECK(rep->ok);
  // A flipped absorbed byte: verify finds it, naming W_UV.
  uint8_t b = 0;
  REQUIRE(p.memory().Load(1, 100, &b, 1).ok());
  b ^= 0x40;
  REQUIRE(p.memory().Store(1, 100, &b, 1).ok());
  rep = p.Verify();
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok);
  CHECK(rep->params == std::vector<std::string>{"W_UV"});
}

TEST_CASE("ServedFormsAreInTheFingerprintOnlyWhereTheyExist") {
  json j = ProcessedManifestJson();
  ManifestPtr processed = ParseManifest(j).value();
  j["params"][0].erase("served");
  ManifestPtr plain = ParseManifest(j).value();
  CHECK(processed->Fingerprint() != plain->Fingerprint());
  // A manifest without served forms keeps the fingerprint of wtx before them (journals store it).
  std::ifstream in(std::string(WTX_SOURCE_DIR) + "/tests/data/legacy-one-digest/manifest.json");
  ManifestPtr legacy = ParseManifest(json::parse(in)).value();
  CHECK(legacy->Fingerprint() == "dfb86cd7f2ec08616234155502340c1e");
  // Round trip, and a served form that cannot exist is refused naming it.
  CHECK(ParseManifest(processed->ToJson()).value()->Fingerprint() == processed->Fingerprint());
  json bad = ProcessedManifestJson();
  bad["params"][0]["served"]["dtype"] = "f64";
  auto r = ParseManifest(bad);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("params[0].served.dtype"));
  bad = ProcessedManifestJson();
  bad["params"][0]["served"]["shape"] = {0, 4};
  r = ParseManifest(bad);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("params[0].served.shape"));
}

TEST_CASE("RecordsCarryTheServedDigestOnlyWhereItDiffers") {
  PreparedRecord p;
  p.tx = "t1";
  p.yes = true;
  p.digest = "aa";
  p.served_digest = "bb";
  auto pb = DecodePrepared(Encode(p));
  REQUIRE(pb.ok());
  CHECK(pb->served_digest == "bb");
  OutcomeRecord o;
  o.tx = "t1";
  o.decision = Decision::kCommit;
  o.version = "aa";
  o.served_digest = "bb";
  auto ob = DecodeOutcome(Encode(o));
  REQUIRE(ob.ok());
  CHECK(ob->served_digest == "bb");
  o.version.reset();
  o.decision = Decision::kAbort;
  CHECK_FALSE(DecodeOutcome(Encode(o)).ok());  // a served digest without a version
  ChunksRecord ch;
  ch.tx = "t1";
  ch.chunk_bytes = 65536;
  ch.counts = {1, 1};
  ch.digests.assign(16, 7);
  ch.checkpoint_params = {0};
  ch.checkpoint_digests.assign(8, 9);
  auto cb = DecodeChunks(Encode(ch));
  REQUIRE(cb.ok());
  CHECK(cb->checkpoint_params == std::vector<int64_t>{0});
  ch.checkpoint_params = {2};  // no such parameter
  CHECK_FALSE(DecodeChunks(Encode(ch)).ok());
  DecisionRecord d;
  d.tx = "t1";
  d.decision = Decision::kCommit;
  d.version = "aa";
  d.served_digest = "bb";
  auto db = DecodeDecision(Encode(d));
  REQUIRE(db.ok());
  CHECK(db->served_digest == "bb");
  // The shared decision log's value (etcd): written where it differs, read back.
  LoggedDecision ld;
  ld.tx = "t1";
  ld.decision = Decision::kCommit;
  ld.version = "aa";
  ld.served_digest = "bb";
  auto enc = EncodeDecisionRecord(ld);
  REQUIRE(enc.ok());
  auto back = DecodeDecisionRecord(enc.value(), "t1");
  REQUIRE(back.ok());
  CHECK(back->served_digest == "bb");
  CHECK(LoggedDecisionToJson(back.value())["served_digest"] == "bb");
  ld.served_digest.clear();  // equal digests: one in the log, both in the JSON
  back = DecodeDecisionRecord(EncodeDecisionRecord(ld).value(), "t1");
  REQUIRE(back.ok());
  CHECK(enc.value().find("served_digest") != std::string::npos);
  CHECK(LoggedDecisionToJson(back.value())["served_digest"] == "aa");
}

// A copy of a journal written by wtx before two digests (tests/data/legacy-one-digest).
struct LegacyCopy {
  testing::TempDir dir;
  std::string path;
  explicit LegacyCopy(const std::string& which) {
    path = dir.path() + "/" + which;
    fs::copy(std::string(WTX_SOURCE_DIR) + "/tests/data/legacy-one-digest/" + which, path,
             fs::copy_options::recursive);
  }
};

TEST_CASE("JournalsWrittenBeforeTwoDigestsReadWithTheServedDigestEqualToTheVersion") {
  const std::vector<std::string> versions = {"cb156350177bb4aa0536799de1da821d",
                                             "597b7817427b333fb83f29c8793f47c6",
                                             "b55b3892ae5b0f1a15e367f369a62a8c"};
  for (const char* which : {"coordinator", "rank-0"}) {
    LegacyCopy c(which);
    auto h = ReadJournalHistory(c.path);
    REQUIRE(h.ok());
    std::vector<std::string> committed;
    for (const HistoryEntry& e : h->entries) {
      if (e.outcome != "committed") continue;
      REQUIRE(e.version);
      CHECK(e.served_digest == e.version);
      committed.push_back(*e.version);
      CHECK(json::parse(e.json)["served_digest"] == *e.version);
    }
    CHECK(committed == versions);
    auto st = ReadJournalState(c.path);
    REQUIRE(st.ok());
    if (std::string(which) == "rank-0") CHECK(st->served_digest == versions.back());
  }
  // The CLI's JSON names both, equal here (wtx log, show, show --at, status).
  {
    LegacyCopy c("rank-0");
    const std::string wtx = std::string(WTX_BINARY) + " ";
    auto run = [&](const std::string& args) {
      testing::CommandResult r = testing::RunCommand(wtx + args, /*merge_stderr=*/false);
      INFO(args << ": " << r.out);
      REQUIRE(r.code == 0);
      return json::parse(r.out);
    };
    json log = run("log " + c.path + " --json");
    REQUIRE(log.is_array());
    CHECK(log.back()["served_digest"] == versions.back());
    CHECK(run("show " + c.path + " t2 --json")["served_digest"] == versions[1]);
    CHECK(run("status " + c.path + " --json")["served_digest"] == versions.back());
    CHECK(run("show " + c.path + " --at " + std::to_string(time(nullptr)) +
              " --json")["served_digest"] == versions.back());
  }
  // The participant opens on it: the committed version serves as its own served digest.
  LegacyCopy r("rank-0");
  std::ifstream in(std::string(WTX_SOURCE_DIR) + "/tests/data/legacy-one-digest/manifest.json");
  ParticipantOptions o;
  o.journal_dir = r.path;
  o.kernel_identity = "flashinfer-mla/bf16";
  auto p = Participant::Open(o, ParseManifest(json::parse(in)).value());
  REQUIRE(p.ok());
  RankStatus st = p.value()->status();
  CHECK(st.version == versions.back());
  CHECK(st.served_digest == versions.back());
}

}  // namespace
}  // namespace wtx
