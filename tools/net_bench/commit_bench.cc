// wtx_commit_bench: commit latency against rank count (a benchmark, not a test).
//
//   wtx_commit_bench [--inproc 1,4,16,64,256,1024] [--tcp 1,4,16,64] [--repeats 10]
//                    [--dir /tmp] [--wtx build/bin/wtx] [--sync-delay-ms D]
//                    [--fan-out-threads T] [--decision-log etcd://HOST:PORT,.../PREFIX]
//
// For each rank count N it opens N participants (each with its own RocksDB journal under DIR)
// and a coordinator, then runs `repeats` full transactions on a one-parameter manifest
// (64 f32) and reports, per phase, the median and 90th percentile in milliseconds:
//   begin  : Coordinator::Begin (Describe + CheckBegin + synced BEGIN on every rank)
//   commit : Coordinator::Commit (Prepare with synced PREPARED on every rank, synced DECISION,
//            Decide everywhere)
// `inproc` calls participants directly (InProcTransport); `tcp` runs `wtx coordinator` and N
// `wtx rank` processes on loopback and drives them over their control connections, so its
// figures include one extra loopback round trip (driver -> coordinator) per call. Also
// reports the time to open the N journals and the process's open file descriptors.
//
// --sync-delay-ms D: every synced journal write (each rank's BEGIN and PREPARED, the
// coordinator's DECISION) sleeps D ms instead of flushing the real disk, through a filesystem
// wrapper (src/testing/slow_sync_fs.h) under every journal — a rank whose own disk takes D ms
// per fsync (the N ranks of one run share one real disk, whose flushes serialize; D = 0
// measures that real disk). With a fan-out coordinator the ranks' syncs overlap, so latency
// should barely grow with N.
// --fan-out-threads T: the in-process coordinator's CoordinatorOptions::fan_out_threads
// (default 256); T = 1 is the near-sequential baseline (two calls in flight).
// --decision-log URL: every in-process rank count runs twice over the same ranks, with the
// embedded journal and then with the etcd decision log (a fresh sub-prefix per count), and a
// row gives etcd / embedded for the commit p50 and p99 (docs/performance.md, "Decision log").
//
// Flags are checked before anything runs (exit 2 naming the flag): rank counts 1..4096 in
// process and 1..256 over TCP (each TCP rank is a process), an empty list skips that transport;
// --repeats 1..100000; --dir an existing directory; --wtx an existing file.
#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "src/conformance/tcp_simulator.h"
#include "src/testing/slow_sync_fs.h"
#include "tools/guarded_main.h"
#include "tools/int_option.h"
#include "wtx/coordinator.h"
#include "wtx/decision_log.h"
#include "wtx/inproc_transport.h"
#include "wtx/limits.h"
#include "wtx/participant.h"

namespace {

using wtx::BeginRequest;
using wtx::CommitOutcome;
using wtx::Coordinator;
using wtx::CoordinatorOptions;
using wtx::InProcTransport;
using wtx::ManifestPtr;
using wtx::ParseManifest;
using wtx::Participant;
using wtx::ParticipantOptions;
using wtx::Status;
using wtx::WritePiece;
namespace sim = wtx::sim;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Stats {
  double p50 = 0, p90 = 0, p99 = 0;
};
Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.p50 = v[v.size() / 2];
  s.p90 = v[std::min(v.size() - 1, (v.size() * 9) / 10)];
  s.p99 = v[std::min(v.size() - 1, (v.size() * 99) / 100)];
  return s;
}

// CPU time (user + system) this process has used, in ms.
double CpuMs() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

int OpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n - 2;
}

constexpr int kMaxTcpRanks = 256;  // each TCP rank is a `wtx rank` process

// A comma-separated list of rank counts, each in 1..max ("" is the empty list). Returns what is
// wrong with it, naming the element, or "" when *out holds the list.
std::string ParseRankList(const std::string& s, int max, std::vector<int>* out) {
  out->clear();
  if (s.empty()) return "";
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) {
    int n = 0;
    const auto [end, ec] = std::from_chars(x.data(), x.data() + x.size(), n);
    if (ec != std::errc() || end != x.data() + x.size() || n < 1 || n > max) {
      return "'" + x + "' is not a rank count in 1.." + std::to_string(max) +
             " (a comma-separated list, or \"\" for none)";
    }
    out->push_back(n);
  }
  if (s.back() == ',') return "a trailing ',' (a comma-separated list, or \"\" for none)";
  return "";
}

CLI::Validator RankListCheck(int max) {
  return CLI::Validator(
      [max](std::string& s) {
        std::vector<int> ignored;
        return ParseRankList(s, max, &ignored);
      },
      "N,N,...");
}

ManifestPtr BenchManifest() {
  return ParseManifest(json::parse(R"({"params": [{"name": "w", "dtype": "f32", "shape": [64]}]})"))
      .value();
}

// decision_log: empty for the embedded journal, else an etcd url (a sub-prefix is added).
json RunInProc(int n, int repeats, const std::string& root, int sync_delay_ms, int fan_out_threads,
               const std::string& decision_log = "") {
  const std::string dir = root + "/inproc-" + std::to_string(n);
  std::filesystem::remove_all(dir);
  ManifestPtr m = BenchManifest();
  InProcTransport t(n);
  std::shared_ptr<rocksdb::FileSystem> slow;
  if (sync_delay_ms > 0) {
    slow = std::make_shared<wtx::SlowSyncFileSystem>(std::chrono::milliseconds(sync_delay_ms));
  }
  std::vector<std::unique_ptr<Participant>> parts;
  const auto t0 = Clock::now();
  for (int r = 0; r < n; ++r) {
    ParticipantOptions o;
    o.rank = r;
    o.journal_dir = dir + "/rank-" + std::to_string(r);
    o.env.fs = slow;
    auto p = Participant::Open(o, m);
    if (!p.ok()) {
      return {{"ranks", n}, {"error", p.status().ToString()}, {"opened", r}};
    }
    parts.push_back(std::move(p).value());
    t.SetParticipant(r, parts.back().get());
  }
  const double open_ms = Ms(Clock::now() - t0);
  CoordinatorOptions co;
  co.journal_dir = dir + "/coordinator";
  co.env.fs = slow;
  co.fan_out_threads = fan_out_threads;
  if (!decision_log.empty()) {
    wtx::DecisionLogOptions lo;
    lo.url = decision_log + "/commit-bench-" + std::to_string(::getpid()) + "-" + std::to_string(n);
    auto log = wtx::OpenDecisionLog(lo);
    if (!log.ok()) return {{"ranks", n}, {"error", log.status().ToString()}};
    co.decision_log = log.value();
  }
  auto opened = Coordinator::Open(co, &t);
  if (!opened.ok()) return {{"ranks", n}, {"error", opened.status().ToString()}};
  auto c = std::move(opened).value();
  std::vector<float> bytes(64);
  std::vector<double> begin, commit, total;
  const double cpu0 = CpuMs();
  for (int i = 0; i < repeats; ++i) {
    BeginRequest b;
    b.tx = "t" + std::to_string(i);
    auto a = Clock::now();
    if (!c->Begin(b).status.ok()) return {{"ranks", n}, {"error", "begin failed"}};
    begin.push_back(Ms(Clock::now() - a));
    for (int r = 0; r < n; ++r) {
      bytes[0] = static_cast<float>(i);
      WritePiece w;
      w.param = "w";
      w.data = bytes.data();
      w.bytes = bytes.size() * 4;
      if (!parts[r]->Write({&w, 1}).ok()) return {{"ranks", n}, {"error", "write failed"}};
    }
    a = Clock::now();
    CommitOutcome o = c->Commit(b.tx);
    if (!o.status.ok()) return {{"ranks", n}, {"error", o.status.ToString()}};
    commit.push_back(Ms(Clock::now() - a));
    total.push_back(begin.back() + commit.back());
  }
  // Every thread of the process: the coordinator's and the in-process ranks' (their writes
  // included), per transaction.
  const double cpu_per_tx_ms = (CpuMs() - cpu0) / repeats;
  const Stats sb = Summarize(begin), sc = Summarize(commit);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  json out = {{"transport", decision_log.empty() ? "inproc" : "inproc+etcd"},
              {"ranks", n},
              {"open_ms", open_ms},
              {"fds", OpenFds()},
              {"max_rss_mb", ru.ru_maxrss / 1024},
              {"begin_p50_ms", sb.p50},
              {"begin_p90_ms", sb.p90},
              {"commit_p50_ms", sc.p50},
              {"commit_p90_ms", sc.p90},
              {"commit_p99_ms", sc.p99},
              {"total_p50_ms", Summarize(total).p50},
              {"cpu_ms_per_tx", cpu_per_tx_ms}};
  c.reset();
  parts.clear();
  std::filesystem::remove_all(dir);
  return out;
}

json RunTcp(int n, int repeats, const std::string& root, const std::string& wtx,
            int sync_delay_ms) {
  const std::string dir = root + "/tcp-" + std::to_string(n);
  std::filesystem::remove_all(dir);
  sim::Scenario sc;
  sc.ranks = n;
  sc.manifests.assign(n, BenchManifest());
  sim::TcpSimOptions o;
  o.journal_dir = dir;
  o.binary = wtx;
  o.test_hooks = false;
  o.sync_delay_ms = sync_delay_ms;
  o.start_timeout = std::chrono::milliseconds(60000);
  if (!sim::PrepareJournalDir(dir).ok()) return {{"ranks", n}, {"error", "journal dir"}};
  sim::TcpProcesses procs(sc, o);
  const auto t0 = Clock::now();
  if (Status s = procs.Start(); !s.ok()) return {{"ranks", n}, {"error", s.ToString()}};
  const double start_ms = Ms(Clock::now() - t0);
  std::vector<double> begin, commit, total;
  for (int i = 0; i < repeats; ++i) {
    BeginRequest b;
    b.tx = "t" + std::to_string(i);
    auto a = Clock::now();
    if (!procs.Begin(b).status.ok()) return {{"ranks", n}, {"error", "begin failed"}};
    begin.push_back(Ms(Clock::now() - a));
    sim::Step w;
    w.op = "write";
    w.param = "*";
    w.fill.seed = static_cast<uint64_t>(i) + 1;
    for (int r = 0; r < n; ++r) {
      if (!procs.RankStep(r, w, b).ok()) return {{"ranks", n}, {"error", "write failed"}};
    }
    sim::Step cs;
    cs.op = "commit";
    cs.tx = b.tx;
    bool died = false;
    a = Clock::now();
    CommitOutcome co = procs.Commit(cs, &died);
    if (!co.status.ok()) return {{"ranks", n}, {"error", co.status.ToString()}};
    commit.push_back(Ms(Clock::now() - a));
    total.push_back(begin.back() + commit.back());
  }
  const Stats sb = Summarize(begin), sc2 = Summarize(commit);
  json out = {{"transport", "tcp"},       {"ranks", n},
              {"start_ms", start_ms},     {"begin_p50_ms", sb.p50},
              {"begin_p90_ms", sb.p90},   {"commit_p50_ms", sc2.p50},
              {"commit_p90_ms", sc2.p90}, {"total_p50_ms", Summarize(total).p50}};
  std::filesystem::remove_all(dir);
  return out;
}

}  // namespace

int Main(int argc, char** argv) {
  std::string inproc = "1,4,16,64,256,1024", tcp = "1,4,16,64", dir = "/tmp", wtx_binary;
  int repeats = 10, sync_delay_ms = 0, fan_out_threads = 256;
  CLI::App app{"Commit latency against rank count (docs/protocol.md, \"Scale\")",
               "wtx_commit_bench"};
  app.add_option("--inproc", inproc, "In-process rank counts, comma-separated (\"\" for none)")
      ->check(RankListCheck(wtx::kMaxRanks))
      ->capture_default_str();
  app.add_option("--tcp", tcp, "TCP rank counts, comma-separated (\"\" for none)")
      ->check(RankListCheck(kMaxTcpRanks))
      ->capture_default_str();
  wtx::tools::AddIntOption(&app, "--repeats", &repeats, 1, 100000, "Transactions per rank count")
      ->capture_default_str();
  app.add_option("--dir", dir, "Where the journals go (a scratch folder is made inside)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  wtx::tools::AddIntOption(&app, "--sync-delay-ms", &sync_delay_ms, 0, 10000,
                           "Every synced journal write sleeps this long")
      ->capture_default_str();
  wtx::tools::AddIntOption(&app, "--fan-out-threads", &fan_out_threads, 1, wtx::kMaxFanOutThreads,
                           "The in-process coordinator's fan_out_threads")
      ->capture_default_str();
  std::string decision_log;
  app.add_option("--decision-log", decision_log,
                 "Also run every in-process count on this etcd decision log (etcd://.../PREFIX)");
  app.add_option("--wtx", wtx_binary, "The wtx binary for the TCP rows (default: beside this one)")
      ->check(CLI::ExistingFile);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? wtx::kExitOk : wtx::kExitInvalidInput;
  }
  std::vector<int> inproc_counts, tcp_counts;
  ParseRankList(inproc, wtx::kMaxRanks, &inproc_counts);  // checked above
  ParseRankList(tcp, kMaxTcpRanks, &tcp_counts);
  if (wtx_binary.empty()) {
    wtx_binary = (std::filesystem::path(argv[0]).parent_path() / "wtx").string();
  }
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  const std::string root = dir + "/wtx-commit-bench-" + std::to_string(::getpid());
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) {
    std::cerr << "wtx_commit_bench: --dir: cannot create " << root << ": " << ec.message() << "\n";
    return wtx::kExitFailed;
  }
  json all = json::array();
  std::printf("sync delay: %d ms per synced journal write; in-process fan-out threads: %d\n",
              sync_delay_ms, fan_out_threads);
  std::printf(
      "| transport | ranks | setup ms | begin p50 / p90 ms | commit p50 / p90 ms | "
      "begin+commit p50 ms | CPU ms / tx |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  auto row = [&](const json& j) {
    all.push_back(j);
    if (j.contains("error")) {
      std::printf("| %s | %d | error: %s | | | | |\n", j.value("transport", "").c_str(),
                  j["ranks"].get<int>(), j["error"].dump().c_str());
    } else {
      // CPU per transaction: the in-process rows only (TCP ranks are other processes).
      const std::string cpu =
          j.contains("cpu_ms_per_tx") ? std::to_string(j["cpu_ms_per_tx"].get<double>()) : "-";
      std::printf("| %s | %d | %.0f | %.2f / %.2f | %.2f / %.2f | %.2f | %s |\n",
                  j["transport"].get<std::string>().c_str(), j["ranks"].get<int>(),
                  j.value("open_ms", j.value("start_ms", 0.0)), j["begin_p50_ms"].get<double>(),
                  j["begin_p90_ms"].get<double>(), j["commit_p50_ms"].get<double>(),
                  j["commit_p90_ms"].get<double>(), j["total_p50_ms"].get<double>(),
                  cpu.substr(0, cpu.find('.') == std::string::npos ? cpu.size() : cpu.find('.') + 3)
                      .c_str());
    }
    std::fflush(stdout);
  };
  std::vector<json> ratios;
  for (int n : inproc_counts) {
    const json embedded = RunInProc(n, repeats, root, sync_delay_ms, fan_out_threads);
    row(embedded);
    if (decision_log.empty()) continue;
    const json etcd = RunInProc(n, repeats, root, sync_delay_ms, fan_out_threads, decision_log);
    row(etcd);
    if (embedded.contains("error") || etcd.contains("error")) continue;
    ratios.push_back({{"ranks", n},
                      {"embedded_commit_p50_ms", embedded["commit_p50_ms"]},
                      {"embedded_commit_p99_ms", embedded["commit_p99_ms"]},
                      {"etcd_commit_p50_ms", etcd["commit_p50_ms"]},
                      {"etcd_commit_p99_ms", etcd["commit_p99_ms"]},
                      {"commit_p50_ratio", etcd["commit_p50_ms"].get<double>() /
                                               embedded["commit_p50_ms"].get<double>()},
                      {"commit_p99_ratio", etcd["commit_p99_ms"].get<double>() /
                                               embedded["commit_p99_ms"].get<double>()}});
  }
  if (!ratios.empty()) {
    std::printf(
        "\n| ranks | embedded commit p50 / p99 ms | etcd commit p50 / p99 ms | "
        "etcd / embedded p50 | p99 |\n|---:|---:|---:|---:|---:|\n");
    for (const json& r : ratios) {
      std::printf("| %d | %.2f / %.2f | %.2f / %.2f | %.2f | %.2f |\n", r["ranks"].get<int>(),
                  r["embedded_commit_p50_ms"].get<double>(),
                  r["embedded_commit_p99_ms"].get<double>(), r["etcd_commit_p50_ms"].get<double>(),
                  r["etcd_commit_p99_ms"].get<double>(), r["commit_p50_ratio"].get<double>(),
                  r["commit_p99_ratio"].get<double>());
      all.push_back(r);
    }
  }
  for (int n : tcp_counts) row(RunTcp(n, repeats, root, wtx_binary, sync_delay_ms));
  std::filesystem::remove_all(root);
  std::cout << all.dump() << "\n";
  return 0;
}

int main(int argc, char** argv) {
  return wtx::tools::GuardedMain("wtx_commit_bench", [&] { return Main(argc, argv); });
}
