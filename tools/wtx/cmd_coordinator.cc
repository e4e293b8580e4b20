// `wtx coordinator --listen HOST:PORT --journal DIR --secret-file F --ranks N`
//
// Runs a coordinator on the TCP transport until SIGINT/SIGTERM. Ranks (`wtx rank`, or an
// engine embedding TcpRankAgent) connect to --listen; drivers connect to the same port with
// role "control" and call begin/commit/abort/decisions (control_protocol.h). On start it waits
// up to --startup-wait-ms for every rank, re-sends logged decisions (Recover) and only then
// answers in-doubt ranks; it re-sends pending decisions whenever a rank (re)connects.
// --defer-recovery leaves both to a control "recover" call (the simulator's ordering).
// Prints one JSON line on stdout when listening: {"ready": true, "port": P}.
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "tools/wtx/commands.h"
#include "src/net/control_service.h"
#include "src/testing/fault_injection_fs.h"
#include "src/testing/armed_crash_point.h"
#include "src/txn/test_hooks.h"
#include "src/testing/slow_sync_fs.h"
#include "src/net/channel.h"
#include "src/net/codec.h"
#include "src/util/json_number.h"
#include "wtx/coordinator.h"
#include "wtx/tcp_transport.h"

namespace wtx::cli {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

struct CoordinatorArgs {
  std::string listen = "127.0.0.1:7070";
  std::string journal;
  std::string secret_file;
  int ranks = 1;
  int64_t prepare_timeout_ms = 5000;
  int64_t request_timeout_ms = 10000;
  int64_t startup_wait_ms = 30000;
  int sync_delay_ms = 0;
  int max_connections = 1024;
  TlsFiles tls;
  size_t max_frame_bytes = size_t{64} << 20;
  bool defer_recovery = false;
  bool test_hooks = false;
};

int Fail(const Status& s) { return sim::FailToStart("coordinator", s); }

// Re-sends pending decisions in the background whenever asked (a rank registered).
class Recoverer {
 public:
  explicit Recoverer(Coordinator* c) : c_(c), thread_([this] { Run(); }) {}
  ~Recoverer() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Kick() {
    {
      std::lock_guard<std::mutex> l(mu_);
      kicked_ = true;
    }
    cv_.notify_all();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || kicked_; });
      if (stop_) return;
      kicked_ = false;
      l.unlock();
      Status s = c_->Recover();
      if (!s.ok()) net::LogLine("coordinator", "recover: " + s.ToString());
      l.lock();
    }
  }
  Coordinator* c_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, kicked_ = false;
  std::thread thread_;
};

int RunCoordinator(const CoordinatorArgs& a) {
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // threads inherit; main sigwaits

  auto secret = net::ReadSecretFile(a.secret_file);
  if (!secret.ok()) return Fail(secret.status());
  auto hp = net::ParseHostPort(a.listen);
  if (!hp.ok()) return Fail(hp.status());
  TcpTransportOptions to;
  to.listen_host = hp->first;
  to.port = hp->second;
  to.secret = secret.value();
  to.num_ranks = a.ranks;
  to.request_timeout = milliseconds(a.request_timeout_ms);
  to.max_frame_bytes = a.max_frame_bytes;
  to.max_connections = a.max_connections;
  to.tls = a.tls;
  auto transport = TcpTransport::Listen(to);
  if (!transport.ok()) return Fail(transport.status());
  TcpTransport& t = *transport.value();

  // With test hooks the journal runs on a fault-injecting filesystem, so that a "crash with
  // power loss" can drop exactly the unsynced data before the process exits.
  std::shared_ptr<FaultInjectionFileSystem> fs;
  ArmedCrashPoint crash;
  CoordinatorOptions co;
  CoordinatorHooks hooks;
  co.journal_dir = a.journal;
  co.prepare_timeout = milliseconds(a.prepare_timeout_ms);
  if (a.test_hooks) {
    fs = std::make_shared<FaultInjectionFileSystem>();
    co.env.fs = fs;
    hooks.crash_points = &crash;
  }
  if (a.sync_delay_ms > 0) {
    co.env.fs = std::make_shared<SlowSyncFileSystem>(
        milliseconds(a.sync_delay_ms),
        co.env.fs ? co.env.fs : rocksdb::FileSystem::Default());
  }
  auto opened = OpenCoordinatorWithHooks(co, &t, hooks);
  if (!opened.ok()) return Fail(opened.status());
  Coordinator* c = opened.value().get();
  auto recoverer = std::make_unique<Recoverer>(c);

  t.SetControlHandler([&](const std::string& m, const json& p) -> std::optional<Result<json>> {
    auto ok = [](json j) { return std::optional<Result<json>>(Result<json>(std::move(j))); };
    if (Status s = sim::CheckControlParams(m, p); !s.ok()) return Result<json>(s);
    if (m == "begin") {
      auto req = net::BeginRequestFromJson(p.value("req", json()));
      if (!req.ok()) return Result<json>(req.status());
      return ok(sim::BeginOutcomeToJson(c->Begin(req.value())));
    }
    if (m == "commit") {
      auto opts = sim::CommitOptionsFromJson(p.value("options", json()));
      if (!opts.ok()) return Result<json>(opts.status());
      CommitOutcome o = c->Commit(p.at("tx").get<std::string>(), opts.value());
      json j = sim::CommitOutcomeToJson(o);
      j["crash_fired"] = crash.Disarm();
      return ok(std::move(j));
    }
    if (m == "abort") return ok(sim::BeginOutcomeToJson(c->Abort(p.at("tx").get<std::string>())));
    if (m == "committed_version") {
      auto v = c->CommittedVersion(p.at("tx").get<std::string>());
      return ok({{"version", v ? json(*v) : json()}});
    }
    if (m == "decisions") return ok({{"decisions", sim::DecisionsToJson(c->decisions())}});
    if (m == "recover") {
      Status s = c->Recover();
      if (s.ok()) t.SetDecisionOracle(c);
      return ok(sim::StatusJson(s));
    }
    if (m == "connected") return ok({{"ranks", t.ConnectedRanks()}});
    if (m == "wait_ranks") {
      // Checked: a rank outside 0..ranks-1 (or 2^40, which get<int> truncates to 0) can never
      // connect, so it is refused rather than waited for or confused with another rank.
      auto ranks = JsonIntList(p.at("ranks"), "wait_ranks.ranks", 0, a.ranks - 1);
      if (!ranks.ok()) return Result<json>(ranks.status());
      auto timeout = JsonInt(p.at("timeout_ms"), "wait_ranks.timeout_ms", 0, kMaxTimeoutMs);
      if (!timeout.ok()) return Result<json>(timeout.status());
      const bool all = t.WaitForRanks(ranks.value(), milliseconds(timeout.value()));
      return ok({{"ok", all}});
    }
    if (!a.test_hooks) {
      return Result<json>(Status::InvalidArgument("unknown method '" + m + "'"));
    }
    if (m == "arm_crash") {
      crash.Arm(p.at("point").get<std::string>());
      return ok(json::object());
    }
    if (m == "disarm") return ok({{"fired", crash.Disarm()}});
    if (m == "crash") {
      if (p.value("power_loss", false) && fs) {
        fs->SetActive(false);
        fs->DropUnsyncedData();
      }
      ::_exit(137);
    }
    return Result<json>(Status::InvalidArgument("unknown method '" + m + "'"));
  });

  sim::PrintReadyLine({{"ready", true}, {"role", "coordinator"}, {"port", t.port()}});

  std::atomic<bool> stopping{false};
  std::thread startup;
  if (!a.defer_recovery) {
    startup = std::thread([&] {
      std::vector<int> all;
      all.reserve(a.ranks);
      for (int r = 0; r < a.ranks; ++r) all.push_back(r);
      // WaitForRanks returns at once when a signal shuts the transport down.
      const bool everyone = t.WaitForRanks(all, milliseconds(a.startup_wait_ms));
      if (stopping.load()) return;
      if (!everyone) {
        net::LogLine("coordinator", "not every rank connected within " +
                                        std::to_string(a.startup_wait_ms) +
                                        " ms; recovering with those present");
      }
      Status s = c->Recover();
      if (!s.ok()) net::LogLine("coordinator", "recover: " + s.ToString());
      t.SetDecisionOracle(c);
      t.SetOnRankRegistered([&](int) { recoverer->Kick(); });
    });
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  // Every blocking wait ends within a second: the startup wait and WaitForRanks calls return,
  // and calls in flight (prepare, decide, recover) fail at once on their closed connections.
  stopping = true;
  t.Shutdown();
  if (startup.joinable()) startup.join();
  t.SetOnRankRegistered(nullptr);
  t.SetDecisionOracle(nullptr);
  recoverer.reset();
  transport.value().reset();
  return 0;
}

}  // namespace

void RegisterCoordinatorCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("coordinator", "Run a coordinator on the TCP transport");
  auto a = std::make_shared<CoordinatorArgs>();
  cmd->add_option("--listen", a->listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--journal", a->journal, "Coordinator journal directory")->required();
  cmd->add_option("--secret-file", a->secret_file, "File holding the shared secret")->required();
  cmd->add_option("--ranks", a->ranks, "Number of ranks")->required()->check(RankCountRange());
  cmd->add_option("--prepare-timeout-ms", a->prepare_timeout_ms, "Vote timeout")
      ->check(TimeoutMsRange())
      ->capture_default_str();
  cmd->add_option("--request-timeout-ms", a->request_timeout_ms, "Timeout of other calls")
      ->check(TimeoutMsRange())
      ->capture_default_str();
  cmd->add_option("--startup-wait-ms", a->startup_wait_ms,
                  "How long to wait for every rank before recovering")
      ->check(WaitMsRange())
      ->capture_default_str();
  cmd->add_option("--max-frame-bytes", a->max_frame_bytes, "Largest accepted frame")
      ->check(FrameBytesRange())
      ->capture_default_str();
  AddTlsOptions(cmd, &a->tls);
  cmd->add_option("--max-connections", a->max_connections,
                  "Connections served at once (ranks, controllers, handshakes); more are refused")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--defer-recovery", a->defer_recovery,
                "Recover and answer in-doubt ranks only on a control 'recover' call");
  cmd->add_flag("--test-hooks", a->test_hooks,
                "Accept crash-point and crash control calls (simulator, tests)");
  cmd->add_option("--sync-delay-ms", a->sync_delay_ms,
                  "Benchmarks only: every synced journal write first sleeps this long")
      ->check(CLI::Range(0, 10000));
  cmd->callback([=] { *exit_code = RunCoordinator(*a); });
}

}  // namespace wtx::cli
