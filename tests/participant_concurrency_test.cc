// Concurrency: a Participant driven from several threads at once (the engine's loader threads
// writing disjoint shards, a monitor polling status and digests, the coordinator preparing and
// deciding), and a coordinator whose transactions run while other threads read the ranks.
// Built and run under ThreadSanitizer by scripts/sanitize.sh. (Catch2 assertions are not
// thread-safe: threads only count, the main thread checks.)
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "src/testing/fault_injection_fs.h"
#include "src/txn/fan_out.h"
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
        WritePiece w{"w", std::to_string(s), Box{{row, row + 1}, {0, 16}}, bytes.data(),
                     bytes.size()};
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
    std::thread loaders[2] = {
        std::thread([&] { failures[0] = LoadConcurrently(*p[0], uint8_t(t)); }),
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

namespace {

// Wraps an InProcTransport: ranks marked slow really wait out the prepare timeout before
// answering E_TIMEOUT (InProcTransport's silent ranks answer at once), and a hook runs when a
// rank is asked to prepare. Thread-safe like the endpoints it wraps.
class SlowTransport : public Transport {
 public:
  explicit SlowTransport(int n) : inner_(n) {
    for (int r = 0; r < n; ++r) eps_.push_back(std::make_unique<Ep>(this, r));
  }
  InProcTransport& inner() { return inner_; }
  void SetSlow(std::set<int> s) {
    std::lock_guard<std::mutex> l(mu_);
    slow_ = std::move(s);
  }
  // Runs on the preparing thread, before the rank answers.
  void OnPrepare(std::function<void(int)> fn) {
    std::lock_guard<std::mutex> l(mu_);
    on_prepare_ = std::move(fn);
  }
  int num_ranks() const override { return inner_.num_ranks(); }
  ParticipantEndpoint* endpoint(int r) override { return eps_.at(r).get(); }

 private:
  class Ep : public ParticipantEndpoint {
   public:
    Ep(SlowTransport* t, int r) : t_(t), r_(r) {}
    Result<RankDescription> Describe() override { return in()->Describe(); }
    Status CheckBegin(const BeginRequest& q, std::vector<bool>* h) override {
      return in()->CheckBegin(q, h);
    }
    Status Begin(const BeginRequest& q) override { return in()->Begin(q); }
    Result<Vote> Prepare(const std::string& tx, std::chrono::milliseconds timeout) override {
      std::function<void(int)> hook;
      bool slow;
      {
        std::lock_guard<std::mutex> l(t_->mu_);
        hook = t_->on_prepare_;
        slow = t_->slow_.count(r_) > 0;
      }
      if (hook) hook(r_);
      if (slow) {
        std::this_thread::sleep_for(timeout);
        return Status(ErrorCode::kTimeout, "rank " + std::to_string(r_) + " did not answer");
      }
      return in()->Prepare(tx, timeout);
    }
    Status Decide(const std::string& tx, Decision d, const DecidedVersion& v) override {
      return in()->Decide(tx, d, v);
    }

   private:
    ParticipantEndpoint* in() { return t_->inner_.endpoint(r_); }
    SlowTransport* t_;
    int r_;
  };
  InProcTransport inner_;
  std::vector<std::unique_ptr<Ep>> eps_;
  std::mutex mu_;
  std::set<int> slow_;
  std::function<void(int)> on_prepare_;
};

struct FanOutRig {
  TempDir dir;
  ManifestPtr m = ShardedManifest();
  std::vector<std::unique_ptr<Participant>> parts;
  SlowTransport t;
  std::unique_ptr<Coordinator> c;
  explicit FanOutRig(int n, std::chrono::milliseconds timeout) : t(n) {
    for (int r = 0; r < n; ++r) {
      parts.push_back(OpenRank(dir.path, r, m));
      t.inner().SetParticipant(r, parts.back().get());
    }
    CoordinatorOptions co;
    co.journal_dir = dir.path + "/coordinator";
    co.prepare_timeout = timeout;
    auto cr = Coordinator::Open(co, &t);
    REQUIRE(cr.ok());
    c = std::move(cr).value();
  }
  void BeginAndLoad(const std::string& tx, uint8_t fill = 7) {
    BeginRequest b;
    b.tx = tx;
    REQUIRE(c->Begin(b).status.ok());
    for (auto& p : parts) REQUIRE(LoadConcurrently(*p, fill) == 0);
  }
  // Starts Commit(tx) on another thread; returns once some rank is asked to prepare.
  std::future<CommitOutcome> CommitUntilPreparing(const std::string& tx) {
    auto preparing = std::make_shared<std::promise<void>>();
    auto signalled = std::make_shared<std::atomic<bool>>(false);
    t.OnPrepare([preparing, signalled](int) {
      if (!signalled->exchange(true)) preparing->set_value();
    });
    auto commit = std::async(std::launch::async, [this, tx] { return c->Commit(tx); });
    preparing->get_future().wait();
    return commit;
  }
};

double ElapsedMs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("ConcurrentPrepareWithSilentRanksCostsOneTimeout") {
  // Three ranks that never answer: the votes are collected at once, so the phase costs one
  // timeout, not three. The bound is the sum of the three timeouts (what a serial collection
  // costs at least), which a loaded machine does not reach for one timeout.
  FanOutRig rig(6, std::chrono::milliseconds(1000));
  rig.BeginAndLoad("t");
  rig.t.SetSlow({1, 3, 5});
  const auto t0 = std::chrono::steady_clock::now();
  CommitOutcome o = rig.c->Commit("t");
  const double ms = ElapsedMs(t0);
  CHECK(ms >= 1000);
  CHECK(ms < 3000);
  CHECK(o.status.code() == ErrorCode::kTimeout);
  REQUIRE(o.decision == Decision::kAbort);
  for (int r : {1, 3, 5}) CHECK(o.votes[r].kind == VoteReport::Kind::kTimeout);
  for (int r : {0, 2, 4}) CHECK(o.votes[r].kind == VoteReport::Kind::kYes);
  // Every rank heard the abort, silent ones included.
  for (auto& p : rig.parts) CHECK_FALSE(p->status().active_tx.has_value());
}

TEST_CASE("RankCrashingMidFanOutAbortsEverywhereElse") {
  FanOutRig rig(4, std::chrono::milliseconds(5000));
  rig.BeginAndLoad("t");
  // Rank 2's process dies while the prepare is being fanned out.
  rig.t.OnPrepare([&](int r) {
    if (r == 2) rig.t.inner().SetParticipant(2, nullptr);
  });
  const auto t0 = std::chrono::steady_clock::now();
  CommitOutcome o = rig.c->Commit("t");
  CHECK(ElapsedMs(t0) < 2000);  // a known-dead rank costs no timeout
  CHECK(o.status.code() == ErrorCode::kTimeout);
  REQUIRE(o.decision == Decision::kAbort);
  CHECK(o.votes[2].kind == VoteReport::Kind::kCrashed);
  CHECK(o.unacknowledged == std::vector<int>{2});
  for (int r : {0, 1, 3}) CHECK_FALSE(rig.parts[r]->status().active_tx.has_value());
  // The rank comes back: Recover delivers the abort it missed, and the decision is ended.
  rig.t.OnPrepare(nullptr);
  rig.t.inner().SetParticipant(2, rig.parts[2].get());
  REQUIRE(rig.c->Recover().ok());
  CHECK_FALSE(rig.parts[2]->status().active_tx.has_value());
  CHECK(rig.c->Abort("t").status.code() == ErrorCode::kNoTx);  // every rank knows: nothing left
}

TEST_CASE("QueriesAreAnsweredWhileACommitWaitsForVotes") {
  FanOutRig rig(3, std::chrono::milliseconds(1500));
  rig.BeginAndLoad("t");
  rig.t.SetSlow({2});
  const auto t0 = std::chrono::steady_clock::now();
  auto commit = rig.CommitUntilPreparing("t");
  // Another transaction's in-doubt query, the decisions list and a duplicate commit are all
  // answered while the commit still waits for rank 2.
  auto q = rig.c->QueryDecision("other");
  REQUIRE(q.ok());
  CHECK(q->first == Decision::kAbort);
  CHECK(rig.c->decisions().size() == 1);
  CHECK(rig.c->Commit("t").status.code() == ErrorCode::kTxActive);
  CHECK(ElapsedMs(t0) < 1000);
  // A query on the transaction being committed waits for its decision instead of presuming
  // abort under it, and gets the same answer the commit logs.
  auto qt = rig.c->QueryDecision("t");
  REQUIRE(qt.ok());
  CommitOutcome o = commit.get();
  REQUIRE(o.decision == Decision::kAbort);
  CHECK(o.status.code() == ErrorCode::kTimeout);
  CHECK(qt->first == Decision::kAbort);
  CHECK(rig.c->decisions().size() == 2);
}

TEST_CASE("AbortDuringACommitWinsAndTheCommitEndsInAbort") {
  FanOutRig rig(2, std::chrono::milliseconds(1000));
  rig.BeginAndLoad("t");
  rig.t.SetSlow({1});
  auto commit = rig.CommitUntilPreparing("t");
  CHECK(rig.c->Abort("t").status.ok());
  CommitOutcome o = commit.get();
  REQUIRE(o.decision == Decision::kAbort);
  CHECK(o.status.code() == ErrorCode::kNoTx);
  REQUIRE(rig.c->decisions().size() == 1);
  CHECK(rig.c->decisions()[0].reason == "aborted by the sender");
  for (auto& p : rig.parts) CHECK_FALSE(p->status().active_tx.has_value());
}

TEST_CASE("ManyRanksCommitWhileOtherThreadsQuery") {
  // A TSan target: fan-out threads, the committing thread and query threads share the
  // coordinator.
  FanOutRig rig(16, std::chrono::milliseconds(2000));
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&, i] {
      int k = 0;
      while (!stop) {
        auto q = rig.c->QueryDecision("q" + std::to_string(i) + "-" + std::to_string(k++));
        if (!q.ok() || q->first != Decision::kAbort) ++bad;
        rig.c->decisions();
        rig.c->CommittedVersion("t0");
      }
    });
  }
  for (int i = 0; i < 3; ++i) {
    const std::string tx = "t" + std::to_string(i);
    rig.BeginAndLoad(tx, static_cast<uint8_t>(10 + i));
    CommitOutcome o = rig.c->Commit(tx);
    CHECK(o.status.ok());
    CHECK(o.decision == Decision::kCommit);
  }
  stop = true;
  for (auto& t : readers) t.join();
  CHECK(bad == 0);
  CHECK(rig.c->CommittedVersion("t2").has_value());
}

// FanOut itself (src/txn/fan_out.h): the pool the coordinator's phases run on.
TEST_CASE("FanOutCallsEveryIndexExactlyOnceAcrossConcurrentRuns") {
  FanOut pool(8);
  constexpr int kCallers = 4, kRuns = 20, kN = 37;
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&] {
      for (int run = 0; run < kRuns; ++run) {
        std::vector<std::atomic<int>> seen(kN);
        pool.Run(kN, [&](int i) { seen[i]++; });
        for (auto& x : seen) {
          if (x.load() != 1) ++bad;
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  CHECK(bad == 0);
}

TEST_CASE("FanOutNeverRunsMoreCallsAtOnceThanItsThreadsAndTheCaller") {
  FanOut pool(3);
  std::atomic<int> running{0}, peak{0};
  pool.Run(20, [&](int) {
    const int now = ++running;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    --running;
  });
  CHECK(peak <= 3 + 1);  // the pool's threads, and the caller helping
  CHECK(peak >= 2);      // and calls did overlap
}

TEST_CASE("DataPathThreadsCopyAndHashBesideConcurrentCallers") {
  // ParticipantOptions::threads: one engine thread writes a large parameter (its chunks copied
  // by the participant's data-path threads too) while another lands a large one in place
  // (hashed by those threads in the background) and a third polls the status; prepare waits for
  // the hashing. The version is the live bytes', every time.
  ManifestPtr m = ParseManifest(json{{"params",
                                      {{{"name", "a"}, {"dtype", "f32"}, {"shape", {1024, 1024}}},
                                       {{"name", "b"}, {"dtype", "f32"}, {"shape", {768, 1024}}}}}})
                      .value();
  TempDir dir;
  ParticipantOptions o;
  o.journal_dir = dir.path + "/rank-0";
  o.threads = 3;
  auto opened = Participant::Open(std::move(o), m);
  REQUIRE(opened.ok());
  Participant& p = **opened;
  std::vector<uint8_t> a(size_t{1024} * 1024 * 4), b(size_t{768} * 1024 * 4);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7 + round);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 13 + round);
    BeginRequest req;
    req.tx = "t" + std::to_string(round);
    REQUIRE(p.Begin(req).ok());
    std::atomic<int> failures{0};
    std::atomic<bool> done{false};
    std::thread writer([&] {
      WritePiece w{"a", "", std::nullopt, a.data(), a.size()};
      if (!p.Write({&w, 1}).ok()) ++failures;
    });
    std::thread lander([&] {
      // Two landings of row halves, each at least 1 MiB of whole chunks.
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 384}, {384, 768}}) {
        LandingRegion region{"b", "", "", Box{{r0, r1}, {0, 1024}}, std::nullopt};
        auto res = p.Reserve(region);
        if (!res.ok()) {
          ++failures;
          continue;
        }
        const size_t off = static_cast<size_t>(r0) * 1024 * 4;
        std::memcpy(static_cast<uint8_t*>(res->front().host) + off, b.data() + off,
                    static_cast<size_t>(r1 - r0) * 1024 * 4);
        if (!p.Landed(region).ok()) ++failures;
      }
    });
    std::thread monitor([&] {
      while (!done) (void)p.status();
    });
    writer.join();
    lander.join();
    auto vote = p.Prepare(req.tx);
    done = true;
    monitor.join();
    REQUIRE(failures == 0);
    REQUIRE(vote.ok());
    REQUIRE(vote->yes);
    CHECK(vote->digest == p.RecomputeDigest().value());
    REQUIRE(p.Decide(req.tx, Decision::kCommit, "v").ok());
  }
}
