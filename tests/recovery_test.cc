// Properties of versions and recovery: same bytes give the same version whatever the write
// order or chunking; a delta patch equals the full write of the patched content; a crash at
// every record boundary of a transaction (with and without power loss) recovers to a state
// that the journal replays exactly and that the coordinator's decision explains.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "journal/journal.h"
#include "src/history/history.h"
#include "src/txn/journal_check.h"
#include "tests/test_util.h"
#include "wtx/content_hash.h"

using namespace wtx;
using namespace wtx::testing;
using nlohmann::json;

namespace {

// Two parameters large enough to span several 64 KiB hash chunks, one fused.
ManifestPtr WideManifest() {
  return ParseManifest(json::parse(R"({
    "params": [
      {"name": "w", "dtype": "bf16", "shape": [384, 160], "shards": [
        {"id": "0", "source": "w_a", "source_shape": [256, 160], "box": [[0, 256], [0, 160]], "source_box": [[0, 256], [0, 160]]},
        {"id": "1", "source": "w_b", "source_shape": [128, 160], "box": [[256, 384], [0, 160]], "source_box": [[0, 128], [0, 160]]}]},
      {"name": "n", "dtype": "f32", "shape": [33000]}
    ],
    "modules": [{"name": "all", "params": ["w", "n"]}],
    "derived": [{"name": "d", "sources": ["w"], "phase": "kernel"}]
  })"))
      .value();
}

// The full image of a parameter: byte i is a function of (seed, i).
std::vector<uint8_t> Image(const ParamSpec& p, uint32_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(p.num_bytes()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>((i * 2654435761u) ^ seed ^ (i >> 7));
  return out;
}

std::vector<uint8_t> Slice(const ParamSpec& p, const std::vector<uint8_t>& img, const Box& box) {
  std::vector<uint8_t> out;
  const size_t esz = DTypeSize(p.dtype);
  ForEachFlatRun(p.shape, box, [&](int64_t b, int64_t len) {
    out.insert(out.end(), img.begin() + b * esz, img.begin() + (b + len) * esz);
  });
  return out;
}

// Random partition of a 1-D or 2-D box into sub-boxes.
std::vector<Box> RandomPartition(const Shape& shape, std::mt19937& rng) {
  std::vector<Box> out;
  auto cuts = [&](int64_t n, int max) {
    std::vector<int64_t> c = {0, n};
    int k = static_cast<int>(rng() % max);
    for (int i = 0; i < k; ++i) c.push_back(static_cast<int64_t>(rng() % n));
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    return c;
  };
  auto rows = cuts(shape[0], 12);
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    if (shape.size() == 1) {
      out.push_back({{rows[i], rows[i + 1]}});
      continue;
    }
    auto cols = cuts(shape[1], 5);
    for (size_t j = 0; j + 1 < cols.size(); ++j)
      out.push_back({{rows[i], rows[i + 1]}, {cols[j], cols[j + 1]}});
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

std::string CommitImages(Cluster& c, const std::string& tx, uint32_t seed, std::mt19937* rng) {
  BeginRequest b;
  b.tx = tx;
  b.kind = TxKind::kFull;
  REQUIRE(c.coordinator().Begin(b).status.ok());
  for (const auto& p : c.manifest().params()) {
    auto img = Image(p, seed);
    std::vector<Box> boxes =
        rng ? RandomPartition(p.shape, *rng) : std::vector<Box>{WholeBox(p.shape)};
    for (const Box& box : boxes) {
      auto bytes = Slice(p, img, box);
      WritePiece w{p.name, "", box, bytes.data(), bytes.size()};
      for (int r = 0; r < c.transport().num_ranks(); ++r) REQUIRE(c.rank(r).Write({&w, 1}).ok());
    }
  }
  REQUIRE(c.RefreshAll().ok());
  CommitOutcome o = c.coordinator().Commit(tx);
  std::string why;
  for (const auto& v : o.votes) {
    why += std::to_string(v.rank) + ":" + std::string(ErrorCodeName(v.vote.error)) + " " +
           v.vote.message;
    for (const auto& m : v.vote.missing)
      why += " [" + m.param + "/" + m.shard + " " + BoxToString(m.box) + "]";
  }
  INFO(o.status.ToString() << " " << why);
  REQUIRE(o.status.ok());
  REQUIRE(o.decision == Decision::kCommit);
  return o.version;
}

}  // namespace

TEST_CASE("RandomWriteOrdersAndChunkingsGiveTheSameVersion") {
  std::string reference;
  {
    Cluster c(1, WideManifest());
    reference = CommitImages(c, "t", 3, nullptr);
    CHECK(c.rank(0).RecomputeDigest().value().size() == 32);
  }
  for (uint32_t trial = 0; trial < 8; ++trial) {
    std::mt19937 rng(trial);
    Cluster c(1, WideManifest());
    CHECK(CommitImages(c, "t", 3, &rng) == reference);
  }
  Cluster other(1, WideManifest());
  CHECK(CommitImages(other, "t", 4, nullptr) != reference);
}

TEST_CASE("DeltaPatchEqualsFullWriteOfPatchedContent") {
  Cluster a(2, WideManifest());
  CommitImages(a, "load", 1, nullptr);
  const std::string base = a.coordinator().CommittedVersion("load").value();
  // Patch source w_b (rows 256.. of w) and n, in two parts.
  std::vector<int64_t> idx_b = {0, 159, 160, 5000, 128 * 160 - 1};
  std::vector<int64_t> idx_n = {7, 32999};
  BeginRequest b;
  b.tx = "delta";
  b.kind = TxKind::kDelta;
  b.base = base;
  b.sources = {"w_b", "n"};
  REQUIRE(a.coordinator().Begin(b).status.ok());
  std::vector<uint8_t> vb(idx_b.size() * 2, 0x5A), vn(idx_n.size() * 4, 0xC3);
  for (int r = 0; r < 2; ++r) {
    PatchRequest pb{"w_b", {idx_b.data(), 3}, vb.data(), 6, 0, 2};
    PatchRequest pb2{"w_b", {idx_b.data() + 3, 2}, vb.data() + 6, 4, 1, 2};
    PatchRequest pn{"n", idx_n, vn.data(), vn.size(), 0, 1};
    REQUIRE(a.rank(r).Patch(pb).ok());
    REQUIRE(a.rank(r).Patch(pb2).ok());
    REQUIRE(a.rank(r).Patch(pn).ok());
  }
  REQUIRE(a.RefreshAll().ok());
  CommitOutcome o = a.coordinator().Commit("delta");
  REQUIRE(o.decision == Decision::kCommit);

  // The same content written in full.
  Cluster full(2, WideManifest());
  BeginRequest f;
  f.tx = "full";
  f.kind = TxKind::kFull;
  REQUIRE(full.coordinator().Begin(f).status.ok());
  for (int r = 0; r < 2; ++r) {
    for (const auto& p : full.manifest().params()) {
      auto img = Image(p, 1);
      if (p.name == "w") {
        for (int64_t i : idx_b) std::memset(img.data() + (256 * 160 + i) * 2, 0x5A, 2);
      } else {
        for (int64_t i : idx_n) std::memset(img.data() + i * 4, 0xC3, 4);
      }
      WritePiece w{p.name, "", std::nullopt, img.data(), img.size()};
      REQUIRE(full.rank(r).Write({&w, 1}).ok());
    }
  }
  REQUIRE(full.RefreshAll().ok());
  CommitOutcome fo = full.coordinator().Commit("full");
  REQUIRE(fo.decision == Decision::kCommit);
  CHECK(fo.version == o.version);
  CHECK(fo.version != base);
}

namespace {

// Drives one full transaction as a list of operations; each operation appends at most one
// journal batch, so stopping after operation k is a crash at a record boundary.
std::vector<std::function<Status(Cluster&)>> TransactionOps(const std::string& tx, uint32_t seed) {
  std::vector<std::function<Status(Cluster&)>> ops;
  ops.push_back([tx](Cluster& c) {
    BeginRequest b;
    b.tx = tx;
    b.kind = TxKind::kFull;
    return c.coordinator().Begin(b).status;
  });
  ops.push_back([seed](Cluster& c) { return c.WriteAll(seed); });
  ops.push_back([](Cluster& c) { return c.RefreshAll(); });
  ops.push_back([tx](Cluster& c) { return c.rank(0).Prepare(tx).status(); });
  ops.push_back([tx](Cluster& c) { return c.coordinator().Commit(tx).status; });
  return ops;
}

void CheckJournalConsistent(const std::string& dir) {
  JournalOptions o;
  o.read_only = true;
  auto j = Journal::Open(dir, o);
  REQUIRE(j.ok());
  Status s = CheckJournal(*j.value());
  INFO(s.ToString());
  CHECK(s.ok());
}

}  // namespace

TEST_CASE("CrashAtEveryRecordBoundaryRecovers") {
  for (bool power_loss : {false, true}) {
    for (size_t k = 0; k <= 5; ++k) {
      DYNAMIC_SECTION("power_loss=" << power_loss << " crash after op " << k) {
        Cluster c(2, SmallManifest());
        REQUIRE(c.FullCommit("t1", 1).status.ok());
        const std::string v1 = c.coordinator().CommittedVersion("t1").value();
        auto ops = TransactionOps("t2", 2);
        for (size_t i = 0; i < k && i < ops.size(); ++i) ops[i](c).ok();
        c.Kill(0, power_loss);
        CheckJournalConsistent(c.rank_dir(0));
        REQUIRE(c.Restart(0).ok());
        CheckJournalConsistent(c.rank_dir(0));
        RankStatus s = c.rank(0).status();
        CHECK_FALSE(s.loaded);
        CHECK(s.dirty);
        CHECK_FALSE(s.serving);
        CHECK_FALSE(s.in_doubt);  // resolved with the live coordinator
        auto decided = c.coordinator().CommittedVersion("t2");
        // The rank's committed version is the one the coordinator decided last.
        CHECK(s.version == (decided ? *decided : v1));
        // Rank 1 never crashed; whatever happened, it is not left in doubt.
        CHECK_FALSE(c.rank(1).status().in_doubt);
        // A fresh full commit brings every rank back to one served version.
        (void)c.coordinator().Abort("t2");
        CommitOutcome o = c.FullCommit("t3", 3);
        REQUIRE(o.status.ok());
        for (int r = 0; r < 2; ++r) {
          CHECK(c.rank(r).status().serving);
          CHECK(c.rank(r).status().version == o.version);
        }
        CheckJournalConsistent(c.rank_dir(0));
        CheckJournalConsistent(c.coordinator_dir());
      }
    }
  }
}

namespace {
class OneShot : public CrashPoints {
 public:
  explicit OneShot(std::string p) : p_(std::move(p)) {}
  bool ShouldCrash(std::string_view point) override {
    if (point == p_) {
      p_.clear();
      return true;
    }
    return false;
  }

 private:
  std::string p_;
};
}  // namespace

TEST_CASE("CoordinatorCrashPointsResolveAfterRestart") {
  for (const char* point : {"before_decision_logged", "after_decision_logged"}) {
    for (bool power_loss : {false, true}) {
      DYNAMIC_SECTION(point << " power_loss=" << power_loss) {
        Cluster c(2, SmallManifest());
        OneShot cp(point);
        REQUIRE(c.RestartCoordinator(&cp).ok());
        CommitOutcome o = c.FullCommit("t1", 1);
        CHECK(o.status.code() == ErrorCode::kCrashed);
        for (int r = 0; r < 2; ++r) CHECK(c.rank(r).status().in_doubt == "t1");
        c.KillCoordinator(power_loss);
        REQUIRE(c.RestartCoordinator().ok());
        const bool committed = std::string(point) == "after_decision_logged";
        for (int r = 0; r < 2; ++r) {
          RankStatus s = c.rank(r).status();
          CHECK_FALSE(s.in_doubt);
          CHECK(s.serving == committed);
          CHECK(s.dirty == !committed);
          CHECK(s.version.has_value() == committed);
        }
        CheckJournalConsistent(c.coordinator_dir());
        CheckJournalConsistent(c.rank_dir(1));
      }
    }
  }
}

TEST_CASE("InDoubtRankWaitsWhileCoordinatorIsDown") {
  Cluster c(2, SmallManifest());
  OneShot cp("after_decision_logged");
  REQUIRE(c.RestartCoordinator(&cp).ok());
  CommitOutcome o = c.FullCommit("t1", 1);
  REQUIRE(o.decision == Decision::kCommit);
  c.KillCoordinator(true);
  c.Kill(1, true);
  REQUIRE(c.Restart(1).ok());  // the coordinator is down: rank 1 stays in doubt
  CHECK(c.rank(1).status().in_doubt == "t1");
  CHECK_FALSE(c.rank(1).status().serving);
  REQUIRE(c.RestartCoordinator().ok());
  CHECK_FALSE(c.rank(1).status().in_doubt);
  CHECK(c.rank(1).status().version == o.version);
  CHECK_FALSE(c.rank(1).status().loaded);  // its bytes died with the process
  CHECK(c.rank(0).status().serving);
}

TEST_CASE("JournalReplayRebuildsTheStoredState") {
  Cluster c(2, SmallManifest());
  REQUIRE(c.FullCommit("t1", 1).status.ok());
  REQUIRE(c.FullCommit("t2", 2).status.ok());
  BeginRequest b;
  b.tx = "t3";
  b.kind = TxKind::kFull;
  REQUIRE(c.coordinator().Begin(b).status.ok());
  REQUIRE(c.WriteAll(3).ok());
  REQUIRE(c.coordinator().Commit("t3").decision == Decision::kAbort);  // stale derived
  c.Kill(0, false);
  JournalOptions o;
  o.read_only = true;
  auto j = Journal::Open(c.rank_dir(0), o);
  REQUIRE(j.ok());
  auto replayed = ReplayState(*j.value());
  REQUIRE(replayed.ok());
  json stored = j.value()->state();
  stored.erase("seq");
  stored.erase("head");
  CHECK(replayed.value() == stored);
  auto h = ReadHistory(*j.value());
  REQUIRE(h.ok());
  REQUIRE(h.value().size() == 3);
  CHECK(h.value()[0]["outcome"] == "committed");
  CHECK(h.value()[2]["outcome"] == "aborted");
  CHECK(h.value()[2]["reason"] == "E_STALE_DERIVED");
  CHECK(h.value()[1]["coverage"]["bytes"].get<int64_t>() > 0);
}
