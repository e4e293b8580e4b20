#include "src/conformance/tcp_simulator.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "src/conformance/step_codec.h"
#include "src/net/codec.h"
#include "src/net/control_codec.h"

namespace wtx::sim {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kCallTimeout{60000};

Status Down(int rank) {
  return Status(ErrorCode::kCrashed, "rank " + std::to_string(rank) + " is down");
}
Status CoordinatorDown() { return Status(ErrorCode::kCrashed, "the coordinator is down"); }

// Reads one '\n'-terminated line from fd within `timeout`.
Status ReadLine(int fd, std::string* line, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  line->clear();
  for (;;) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status(ErrorCode::kTimeout, "no ready line in time");
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status(ErrorCode::kCrashed, "the process exited before it was ready");
    line->append(buf, static_cast<size_t>(n));
    if (auto nl = line->find('\n'); nl != std::string::npos) {
      line->resize(nl);
      return Status::OK();
    }
    if (line->size() > (1 << 20)) return Status::IOError("ready line too long");
  }
}

std::string RandomHex(size_t bytes) {
  std::string s;
  while (s.size() < 2 * bytes) s += net::RandomNonce();
  return s.substr(0, 2 * bytes);
}

Status WriteFile(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("cannot write " + path);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n <= 0) {
      ::close(fd);
      return Status::IOError("cannot write " + path);
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  return Status::OK();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ChildProcess

ChildProcess::~ChildProcess() { Kill(); }

Status ChildProcess::Spawn(const std::vector<std::string>& args, milliseconds timeout,
                           json* ready) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::IOError("pipe failed");
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::IOError("fork failed");
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(fds[1], 1);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
      for (int fd = 3; fd < 65536; ++fd) ::close(fd);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  pid_ = pid;
  if (std::getenv("WTX_SIM_TRACE")) {
    net::LogLine("sim", "spawned " + std::to_string(pid) + ": " + args[1]);
  }
  std::string line;
  Status s = ReadLine(fds[0], &line, timeout);
  ::close(fds[0]);
  if (!s.ok()) {
    Kill();
    return Status(s.code(), args[0] + " " + args[1] + ": " + s.message());
  }
  json j = json::parse(line, nullptr, false);
  if (!j.is_object()) {
    Kill();
    return Status::IOError("unexpected ready line: " + line);
  }
  if (j.value("ready", false) != true) {
    Reap(milliseconds(5000));
    return net::StatusOrOkFromJson(j.value("error", json()));
  }
  *ready = std::move(j);
  return Status::OK();
}

bool ChildProcess::Alive() {
  if (pid_ <= 0) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    // Exited on its own (or killed from outside the controller).
    if (r == pid_ &&
        (std::getenv("WTX_SIM_TRACE") || (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) &&
                                          !(WIFEXITED(st) && WEXITSTATUS(st) == 137)))) {
      net::LogLine("sim", "process " + std::to_string(pid_) + " ended unexpectedly (" +
                              (WIFSIGNALED(st) ? "signal " + std::to_string(WTERMSIG(st))
                                               : "exit " + std::to_string(WEXITSTATUS(st))) +
                              ")");
    }
    pid_ = 0;
    return false;
  }
  return true;
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  if (std::getenv("WTX_SIM_TRACE")) net::LogLine("sim", "killing " + std::to_string(pid_));
  ::kill(pid_, SIGKILL);
  int st;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  pid_ = 0;
}

void ChildProcess::Reap(milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Alive() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  Kill();
}

// ---------------------------------------------------------------------------------------------
// TcpProcesses

TcpProcesses::TcpProcesses(const Scenario& sc, TcpSimOptions options)
    : sc_(sc), options_(std::move(options)) {
  for (int r = 0; r < sc_.ranks; ++r) ranks_.push_back(std::make_unique<Proc>());
}

TcpProcesses::~TcpProcesses() {
  for (auto& r : ranks_) {
    r->control.reset();
    r->child.Kill();
    r->pid = 0;
  }
  coord_.control.reset();
  coord_.child.Kill();
  coord_.pid = 0;
  if (!work_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(work_dir_, ec);
  }
}

Status TcpProcesses::Start() {
  char tmpl[] = "/tmp/wtx-tcp-sim-XXXXXX";
  if (!::mkdtemp(tmpl)) return Status::IOError("mkdtemp failed");
  work_dir_ = tmpl;  // mode 0700
  secret_ = RandomHex(32);
  secret_file_ = work_dir_ + "/secret";
  // Scenarios reuse transaction ids: each run decides under a prefix no other run used.
  if (!options_.decision_log.empty()) {
    decision_log_ = options_.decision_log + "/sim-" + RandomHex(8);
  }
  WTX_RETURN_IF_ERROR(WriteFile(secret_file_, secret_ + "\n"));
  for (int r = 0; r < sc_.ranks; ++r) {
    WTX_RETURN_IF_ERROR(WriteFile(work_dir_ + "/manifest-" + std::to_string(r) + ".json",
                                  sc_.manifests[r]->ToJson().dump()));
  }
  WTX_RETURN_IF_ERROR(SpawnCoordinator());
  for (int r = 0; r < sc_.ranks; ++r) WTX_RETURN_IF_ERROR(SpawnRank(r));
  json all = json::array();
  for (int r = 0; r < sc_.ranks; ++r) all.push_back(r);
  WTX_ASSIGN_OR_RETURN(
      w, CallCoordinator("wait_ranks",
                         {{"ranks", all}, {"timeout_ms", options_.start_timeout.count()}},
                         options_.start_timeout + kCallTimeout));
  if (!w.value("ok", false)) return Status(ErrorCode::kTimeout, "ranks did not connect in time");
  WTX_ASSIGN_OR_RETURN(rec, CallCoordinator("recover", json::object(), kCallTimeout));
  WTX_RETURN_IF_ERROR(net::StatusOrOkFromJson(rec));
  return Status::OK();
}

Status TcpProcesses::SpawnCoordinator() {
  std::vector<std::string> args = {options_.binary,
                                   "coordinator",
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(coord_port_),
                                   "--journal",
                                   options_.journal_dir + "/coordinator",
                                   "--secret-file",
                                   secret_file_,
                                   "--ranks",
                                   std::to_string(sc_.ranks),
                                   "--prepare-timeout-ms",
                                   std::to_string(options_.prepare_timeout.count()),
                                   "--defer-recovery"};
  if (!decision_log_.empty()) {
    for (const std::string& a :
         {std::string("--decision-log"), decision_log_, std::string("--lease-ttl-ms"),
          std::to_string(options_.lease_ttl_ms)}) {
      args.push_back(a);
    }
    args.insert(args.end(), options_.decision_log_args.begin(), options_.decision_log_args.end());
  }
  if (options_.test_hooks) args.push_back("--test-hooks");
  if (options_.sync_delay_ms > 0) {
    args.push_back("--sync-delay-ms");
    args.push_back(std::to_string(options_.sync_delay_ms));
  }
  json ready;
  WTX_RETURN_IF_ERROR(coord_.child.Spawn(args, options_.start_timeout, &ready));
  coord_.pid = coord_.child.pid();
  coord_port_ = ready.value("port", uint16_t{0});
  return ConnectControl(coord_, coord_port_);
}

Status TcpProcesses::ConnectControl(Proc& p, uint16_t port) {
  auto c = net::ControlClient::Connect("127.0.0.1", port, secret_, net::NetOptions(), "sim");
  if (!c.ok()) {
    p.child.Kill();
    p.pid = 0;
    return c.status();
  }
  p.control = std::move(c).value();
  return Status::OK();
}

Status TcpProcesses::SpawnRank(int r) {
  Proc& p = *ranks_[r];
  std::vector<std::string> args = {options_.binary,
                                   "rank",
                                   "--connect",
                                   "127.0.0.1:" + std::to_string(coord_port_),
                                   "--rank",
                                   std::to_string(r),
                                   "--journal",
                                   options_.journal_dir + "/rank-" + std::to_string(r),
                                   "--secret-file",
                                   secret_file_,
                                   "--manifest",
                                   work_dir_ + "/manifest-" + std::to_string(r) + ".json",
                                   "--rollback-budget-bytes",
                                   std::to_string(sc_.rollback_budget_bytes),
                                   "--control",
                                   "127.0.0.1:0",
                                   "--backoff-max-ms",
                                   "100"};
  if (!decision_log_.empty()) {
    args.push_back("--decision-log");
    args.push_back(decision_log_);
    args.insert(args.end(), options_.decision_log_args.begin(), options_.decision_log_args.end());
  }
  if (options_.test_hooks) args.push_back("--test-hooks");
  if (options_.sync_delay_ms > 0) {
    args.push_back("--sync-delay-ms");
    args.push_back(std::to_string(options_.sync_delay_ms));
  }
  if (!sc_.kernel_identity.empty()) {
    args.push_back("--kernel-identity");
    args.push_back(sc_.kernel_identity);
  }
  if (options_.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(options_.threads));
  }
  json ready;
  WTX_RETURN_IF_ERROR(p.child.Spawn(args, options_.start_timeout, &ready));
  p.pid = p.child.pid();
  return ConnectControl(p, ready.value("control_port", uint16_t{0}));
}

bool TcpProcesses::RankAlive(int r) {
  Proc& p = *ranks_[r];
  if (!p.child.Alive()) {
    p.control.reset();
    p.pid = 0;
    return false;
  }
  return true;
}

bool TcpProcesses::CoordinatorAlive() {
  if (!coord_.child.Alive()) {
    coord_.control.reset();
    coord_.pid = 0;
    return false;
  }
  return true;
}

std::vector<int> TcpProcesses::LiveRanks() {
  std::vector<int> v;
  for (int r = 0; r < sc_.ranks; ++r) {
    if (RankAlive(r)) v.push_back(r);
  }
  return v;
}

Result<json> TcpProcesses::CallRank(int r, const std::string& method, json params,
                                    milliseconds timeout) {
  if (!RankAlive(r) || !ranks_[r]->control) return Down(r);
  bool transport = false;
  auto res = ranks_[r]->control->Call(method, std::move(params), timeout, &transport);
  if (!res.ok() && transport) return Down(r);
  return res;
}

Result<json> TcpProcesses::CallCoordinator(const std::string& method, json params,
                                           milliseconds timeout) {
  if (!CoordinatorAlive() || !coord_.control) return CoordinatorDown();
  bool transport = false;
  auto res = coord_.control->Call(method, std::move(params), timeout, &transport);
  if (!res.ok() && transport) return CoordinatorDown();
  return res;
}

Status TcpProcesses::RankStep(int r, const Step& st, const std::optional<BeginRequest>& scope) {
  json p = {{"step", RankStepToJson(st)},
            {"scope", scope ? net::BeginRequestToJson(*scope) : json()}};
  Status s = CallRank(r, "step", std::move(p), kCallTimeout).status();
  if (s.ok() && st.op == "load_checkpoint" && options_.on_rank_loaded) options_.on_rank_loaded(r);
  return s;
}

RankStatus TcpProcesses::RankState(int r) {
  auto j = CallRank(r, "status", json::object(), kCallTimeout);
  if (j.ok()) {
    if (auto s = net::RankStatusFromJson(j.value()); s.ok()) return s.value();
  }
  RankStatus s;  // unreachable in practice: report the worst
  s.rank = r;
  s.dirty = true;
  return s;
}

BeginOutcome TcpProcesses::Begin(const BeginRequest& req) {
  auto j = CallCoordinator("begin", {{"req", net::BeginRequestToJson(req)}}, kCallTimeout);
  if (j.ok()) {
    if (auto o = net::BeginOutcomeFromJson(j.value()); o.ok()) return o.value();
  }
  BeginOutcome o;
  o.status = j.ok() ? Status::IOError("malformed begin outcome") : j.status();
  return o;
}

CommitOutcome TcpProcesses::Commit(const Step& st, bool* coordinator_died) {
  *coordinator_died = false;
  int armed_rank = -1;
  if (st.crash) {
    if (st.crash->who == "coordinator") {
      CallCoordinator("arm_crash", {{"point", st.crash->at}}, kCallTimeout).status().ok();
    } else {
      armed_rank = st.crash->rank;
      CallRank(armed_rank, "arm_crash", {{"point", st.crash->at}}, kCallTimeout).status().ok();
    }
  }
  for (int r : st.silent) CallRank(r, "set_silent", {{"silent", true}}, kCallTimeout).status().ok();
  auto j = CallCoordinator(
      "commit", {{"tx", st.tx}, {"options", net::CommitOptionsToJson(st.commit_options)}},
      kCallTimeout * 4);
  for (int r : st.silent) {
    CallRank(r, "set_silent", {{"silent", false}}, kCallTimeout).status().ok();
  }
  CommitOutcome o;
  bool coordinator_fired = false;
  if (j.ok()) {
    if (auto d = net::CommitOutcomeFromJson(j.value()); d.ok()) {
      o = std::move(d).value();
      coordinator_fired = j.value().value("crash_fired", false);
    } else {
      o.status = d.status();
    }
  } else {
    o.status = j.status();
  }
  // Processes that died at their crash point.
  if (armed_rank >= 0) {
    auto f = CallRank(armed_rank, "disarm", json::object(), kCallTimeout);
    if (f.ok() && f.value().value("fired", false)) KillRank(armed_rank, st.crash->power_loss);
  }
  if (st.crash && st.crash->who == "coordinator" && coordinator_fired) {
    *coordinator_died = true;
    KillCoordinator(st.crash->power_loss);
  }
  return o;
}

BeginOutcome TcpProcesses::Abort(const std::string& tx) {
  auto j = CallCoordinator("abort", {{"tx", tx}}, kCallTimeout);
  if (j.ok()) {
    if (auto o = net::BeginOutcomeFromJson(j.value()); o.ok()) return o.value();
  }
  BeginOutcome o;
  o.status = j.ok() ? Status::IOError("malformed abort outcome") : j.status();
  return o;
}

std::optional<std::string> TcpProcesses::CommittedVersion(const std::string& tx) {
  auto j = CallCoordinator("committed_version", {{"tx", tx}}, kCallTimeout);
  if (!j.ok() || !j.value().value("version", json()).is_string()) return std::nullopt;
  return j.value()["version"].get<std::string>();
}

std::vector<DecisionEntry> TcpProcesses::Decisions() {
  auto j = CallCoordinator("decisions", json::object(), kCallTimeout);
  if (!j.ok()) return {};
  auto d = net::DecisionsFromJson(j.value().value("decisions", json()));
  return d.ok() ? d.value() : std::vector<DecisionEntry>{};
}

void TcpProcesses::Kill(Proc& p, bool power_loss) {
  if (power_loss && p.control && p.child.Alive()) {
    // The process drops its unsynced data and _exit()s; it never answers.
    p.control->Call("crash", {{"power_loss", true}}, milliseconds(10000)).status().ok();
    p.child.Reap(milliseconds(10000));
  }
  p.control.reset();
  p.child.Kill();
  p.pid = 0;
}

void TcpProcesses::KillRank(int r, bool power_loss) { Kill(*ranks_[r], power_loss); }
void TcpProcesses::KillCoordinator(bool power_loss) { Kill(coord_, power_loss); }

Status TcpProcesses::RestartRank(int r) {
  if (RankAlive(r)) KillRank(r, false);
  WTX_RETURN_IF_ERROR(SpawnRank(r));
  if (!CoordinatorAlive()) return Status::OK();
  auto j = CallRank(r, "wait_resolved", {{"timeout_ms", options_.start_timeout.count()}},
                    options_.start_timeout + kCallTimeout);
  if (!j.ok()) return j.status();
  if (!j.value().value("resolved", false)) {
    return Status(ErrorCode::kTimeout,
                  "rank " + std::to_string(r) + " did not reach the coordinator in time");
  }
  return net::StatusOrOkFromJson(j.value().value("resolution", json()));
}

Status TcpProcesses::RestartCoordinator() {
  if (CoordinatorAlive()) KillCoordinator(false);
  WTX_RETURN_IF_ERROR(SpawnCoordinator());
  const std::vector<int> live = LiveRanks();
  // Every live rank reconnects (backoff) before recovery, as in-process ranks are reachable.
  CallCoordinator("wait_ranks", {{"ranks", live}, {"timeout_ms", options_.start_timeout.count()}},
                  options_.start_timeout + kCallTimeout)
      .status()
      .ok();
  auto j = CallCoordinator("recover", json::object(), kCallTimeout);
  if (!j.ok()) return j.status();
  Status s = net::StatusOrOkFromJson(j.value());
  if (s.ok()) {
    for (int r : live) {
      CallRank(r, "wait_resolved", {{"timeout_ms", options_.start_timeout.count()}},
               options_.start_timeout + kCallTimeout)
          .status()
          .ok();
    }
  }
  return s;
}

Result<json> RunScenarioTcp(const Scenario& scenario, const TcpSimOptions& options) {
  if (!options.test_hooks) {
    // Crash points, silence and power loss are the daemons' test hooks: without them the
    // processes would silently ignore the calls and the run would not be the scenario.
    for (const Step& st : scenario.steps) {
      const bool needs_hooks = (st.op == "commit" && st.crash) || !st.silent.empty() ||
                               (st.op == "crash" && st.crash && st.crash->power_loss);
      if (needs_hooks) {
        return Status::InvalidArgument(
            "step " + std::to_string(st.index) + " (" + st.op +
            "): crash points, silent ranks and power loss over --transport tcp need the "
            "daemons' test hooks, which this wtx does not have (the installed CLI); run the "
            "build tree's wtx, or --transport inproc");
      }
    }
  }
  WTX_RETURN_IF_ERROR(PrepareJournalDir(options.journal_dir));
  TcpProcesses procs(scenario, options);
  WTX_RETURN_IF_ERROR(procs.Start());
  return RunSteps(scenario, procs, options.journal_dir);
}

}  // namespace wtx::sim
