// Concurrency: a Participant driven from several threads at once (the engine's loader threads
// writing disjoint shards, a monitor polling status and digests, the coordinator preparing and
// deciding), and a coordinator whose transactions run while other threads read the ranks.
// Built and run under ThreadSanitizer by scripts/sanitize.sh. (Catch2 assertions are not
// thread-safe: threads only count, the main thread checks.)
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "src/testing/fault_injection_fs.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"
#include "wtx/participant.h"

using nlohmann::json;
using namespace wtx;
namespace fs = std::filesystem;

namespace {

constexpr int kRows = 64;
constexpr int kShards = 8;

// One bf16 [64, 16] parameter in 8 row shards, one f32 [16] parameter, a derived state.
ManifestPtr ShardedManifest() {
  json shards = json::array();
  for (int s = 0; s < kShards; ++s) {
    const int b = s * kRows / kShards, e = (s + 1) * kRows / kShards;
    shards.push_back({{"id", std::to_string(s)},
                      {"source", "src" + std::to_string(s)},
                      {"source_shape", {e - b, 16}},
                      {"box", {{b, e}, {0, 16}}},
                      {"source_box", {{0, e - b}, {0, 16}}}});
  }
  json m = {{"params",
             {{{"name", "w"}, {"dtype", "bf16"}, {"shape", {kRows, 16}}, {"shards", shards}},
              {{"name", "n"}, {"dtype", "f32"}, {"shape", {16}}}}},
            {"modules", {{{"name", "all"}, {"params", {"w", "n"}}}}},
            {"derived", {{{"name", "d"}, {"sources", {"w"}}, {"phase", "kernel"}}}}};
  return ParseManifest(m).value();
}

struct TempDir {
  std::string path;
  TempDir() {
    std::random_device rd;
    path = (fs::temp_directory_path() / ("wtx-conc-" + std::to_string(rd()) + std::to_string(rd())))
               .string();
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::unique_ptr<Participant> OpenRank(const std::string& dir, int rank, ManifestPtr m) {
  ParticipantOptions o;
  o.rank = rank;
  o.journal_dir = dir + "/rank-" + std::to_string(rank);
  o.env.fs = std::make_shared<FaultInjectionFileSystem>();
  o.kernel_identity = "k";
  auto p = Participant::Open(std::move(o), std::move(m));
  REQUIRE(p.ok());
  return std::move(p).value();
}

// Writes every shard of `w` (one thread per shard) and `n`, then refreshes. Returns the number
// of calls that failed (the caller checks: Catch2 assertions are for the main thread).
int LoadConcurrently(Participant& p, uint8_t fill) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int s = 0; s < kShards; ++s) {
    threads.emplace_back([&, s] {
      const int b = s * kRows / kShards, e = (s + 1) * kRows / kShards;
      // Each shard in single-row pieces, to interleave many calls.
      for (int row = b; row < e; ++row) {
        std::vector<uint8_t> bytes(16 * 2, static_cast<uint8_t>(fill + row));
        WritePiece w{"w", std::to_string(s), Box{{row, row + 1}, {0, 16}}, bytes.data(), bytes.size()};
        if (!p.Write({&w, 1}).ok()) ++failures;
      }
    });
  }
  threads.emplace_back([&] {
    std::vector<uint8_t> bytes(16 * 4, fill);
    WritePiece w{"n", "", std::nullopt, bytes.data(), bytes.size()};
    if (!p.Write({&w, 1}).ok()) ++failures;
  });
  for (auto& t : threads) t.join();
  if (!p.Refresh("*").ok()) ++failures;
  return failures;
}

}  // namespace

TEST_CASE("ParticipantServesConcurrentWritersReadersAndTheProtocol") {
  TempDir dir;
  ManifestPtr m = ShardedManifest();
  InProcTransport transport(2);
  std::unique_ptr<Participant> p[2] = {OpenRank(dir.path, 0, m), OpenRank(dir.path, 1, m)};
  for (int r = 0; r < 2; ++r) transport.SetParticipant(r, p[r].get());
  CoordinatorOptions co;
  co.journal_dir = dir.path + "/coordinator";
  auto c = Coordinator::Open(co, &transport);
  REQUIRE(c.ok());

  std::atomic<bool> stop{false};
  std::atomic<int64_t> polls{0}, serving_dirty{0};
  // Monitors: status, digests, descriptions, begin checks, all while writes land.
  std::vector<std::thread> monitors;
  for (int r = 0; r < 2; ++r) {
    monitors.emplace_back([&, r] {
      while (!stop) {
        RankStatus s = p[r]->status();
        if (s.serving && s.dirty) ++serving_dirty;
        (void)p[r]->RecomputeDigest();
        (void)p[r]->Describe();
        BeginRequest probe;
        probe.tx = "probe";
        (void)p[r]->CheckBegin(probe);
        (void)p[r]->CoverageMemoryBytes();
        ++polls;
      }
    });
  }
  std::string last_version;
  for (int t = 0; t < 4; ++t) {
    const std::string tx = "t" + std::to_string(t);
    BeginRequest b;
    b.tx = tx;
    REQUIRE(c.value()->Begin(b).status.ok());
    int failures[2] = {0, 0};
    std::thread loaders[2] = {std::thread([&] { failures[0] = LoadConcurrently(*p[0], uint8_t(t)); }),
                              std::thread([&] { failures[1] = LoadConcurrently(*p[1], uint8_t(t)); })};
    for (auto& l : loaders) l.join();
    REQUIRE(failures[0] == 0);
    REQUIRE(failures[1] == 0);
    CommitOutcome out = c.value()->Commit(tx);
    REQUIRE(out.status.ok());
    REQUIRE(out.decision == Decision::kCommit);
    CHECK(out.version != last_version);
    last_version = out.version;
  }
  // Same bytes on both ranks through different interleavings: the same digest.
  CHECK(p[0]->RecomputeDigest().value() == p[1]->RecomputeDigest().value());
  for (int r = 0; r < 2; ++r) {
    RankStatus s = p[r]->status();
    CHECK(s.serving);
    CHECK(s.version == std::optional<std::string>(last_version));
  }
  stop = true;
  for (auto& t : monitors) t.join();
  CHECK(polls > 0);
  CHECK(serving_dirty == 0);
}

TEST_CASE("ConcurrentDuplicateWritesLandExactlyOnce") {
  TempDir dir;
  auto p = OpenRank(dir.path, 0, ShardedManifest());
  BeginRequest b;
  b.tx = "t";
  REQUIRE(p->Begin(b).ok());
  // Eight threads race to write the same shard: exactly one wins, the rest are duplicates.
  std::atomic<int> ok{0}, dup{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      std::vector<uint8_t> bytes(8 * 16 * 2, static_cast<uint8_t>(i));
      WritePiece w{"w", "0", std::nullopt, bytes.data(), bytes.size()};
      Status s = p->Write({&w, 1});
      if (s.ok()) ++ok;
      if (s.code() == ErrorCode::kDuplicateWrite) ++dup;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == 1);
  CHECK(dup == 7);
}

TEST_CASE("ConcurrentPrepareAndDecideAgree") {
  TempDir dir;
  ManifestPtr m = ShardedManifest();
  auto p = OpenRank(dir.path, 0, m);
  BeginRequest b;
  b.tx = "t";
  REQUIRE(p->Begin(b).ok());
  REQUIRE(LoadConcurrently(*p, 3) == 0);
  // Several threads prepare at once (a retried RPC): one PREPARED, the same vote for all.
  std::vector<Vote> votes(6);
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      auto v = p->Prepare("t");
      if (!v.ok()) {
        ++failed;
        return;
      }
      votes[i] = v.value();
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failed == 0);
  for (const auto& v : votes) {
    CHECK(v.yes);
    CHECK(v.digest == votes[0].digest);
  }
  // Duplicate deliveries of the decision from several threads.
  threads.clear();
  std::atomic<int> decided{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      if (p->Decide("t", Decision::kCommit, "v1").ok()) ++decided;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(decided == 4);
  CHECK(p->status().version == std::optional<std::string>("v1"));
  CHECK_FALSE(p->status().dirty);
}
