// TcpSimulator: `wtx sim SCENARIO --transport tcp`. The same steps and the same output document
// as the in-process simulator (simulator.h), with the coordinator and every rank as separate OS
// processes (`wtx coordinator`, `wtx rank`, spawned by fork/exec of the wtx binary) talking over
// the TCP transport on 127.0.0.1, each on a free port, authenticated with a random shared
// secret. The controller drives them through their control connections
// (control_protocol.h).
//
// Faults, honestly emulated:
//  * crash without power loss: SIGKILL of the process. The OS keeps whatever the process had
//    written (page cache), exactly what a process crash loses and keeps.
//  * crash with power loss: the process runs its journal on a FaultInjectionFileSystem (it
//    tracks how many bytes of each file were fsynced); a "crash" control message makes it stop
//    all writes, truncate every file to its synced size (deleting never-synced files), and
//    _exit() without running any destructor: the unsynced data is gone, as after a power cut.
//  * crash points inside a commit: armed in the target process; the call that hits one answers
//    E_CRASHED, then the controller kills that process (with the step's power_loss).
//  * restart: the same command line again, on the same journal (and, for the coordinator, the
//    same port, so ranks reconnect with backoff).
//  * silent ranks: the rank's agent leaves prepare requests unanswered; the coordinator's
//    prepare timeout (options.prepare_timeout) expires.
//
// Children get PR_SET_PDEATHSIG(SIGKILL): they die with the thread that spawned them, so create
// a TcpProcesses on a thread that outlives it.
//
// Thread-safety: a TcpProcesses is used from one thread, except KillNow*(), which may be called
// from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/conformance/simulator.h"
#include "src/net/control.h"

namespace wtx::sim {

struct TcpSimOptions {
  std::string journal_dir;                          // must be empty or absent
  std::string binary = "/proc/self/exe";            // the wtx executable to spawn
  std::chrono::milliseconds prepare_timeout{5000};  // as the coordinator's default
  std::chrono::milliseconds start_timeout{30000};   // per process start / reconnect
  // Crash points, silence and power-loss emulation (a fault-injecting filesystem under every
  // journal). Off only for benchmarks; faults then cannot be injected.
  bool test_hooks = true;
  // Benchmarks: every synced journal write of every process sleeps this long first.
  int sync_delay_ms = 0;
  // A shared decision log (etcd://.../PREFIX) for the coordinator and every rank, given to
  // them as --decision-log with `decision_log_args` (e.g. --etcd-ca F) after it; empty: the
  // coordinator's embedded journal. The run uses a fresh sub-prefix of its own.
  std::string decision_log;
  std::vector<std::string> decision_log_args;
  int lease_ttl_ms = 1000;
  int threads = 0;  // `wtx rank --threads` of every rank (0: the rank's default)
  // Called with the rank after its load_checkpoint step succeeded (`wtx load`'s progress: the
  // rank processes read the checkpoint, so the driver sees a rank's bytes once it is done).
  std::function<void(int rank)> on_rank_loaded;
};

Result<nlohmann::json> RunScenarioTcp(const Scenario& scenario, const TcpSimOptions& options);

// One child process: fork/exec, the ready line it prints on stdout, SIGKILL, reaping.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();  // SIGKILL + reap
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts `args` (args[0]: the executable) and waits for its first stdout line, a JSON
  // object {"ready": true, ...} (returned in *ready) or {"ready": false, "error": STATUS}.
  Status Spawn(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
               nlohmann::json* ready);
  // Reaps the process if it exited; false when not running.
  bool Alive();
  void Kill();  // SIGKILL, then reap
  // Waits up to `timeout` for the process to exit on its own, then SIGKILLs it.
  void Reap(std::chrono::milliseconds timeout);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
};

class TcpProcesses : public SimProcesses {
 public:
  TcpProcesses(const Scenario& scenario, TcpSimOptions options);
  ~TcpProcesses() override;

  Status Start() override;
  bool RankAlive(int rank) override;
  bool CoordinatorAlive() override;
  Status RankStep(int rank, const Step& step, const std::optional<BeginRequest>& scope) override;
  RankStatus RankState(int rank) override;
  BeginOutcome Begin(const BeginRequest& req) override;
  CommitOutcome Commit(const Step& step, bool* coordinator_died) override;
  BeginOutcome Abort(const std::string& tx) override;
  std::optional<std::string> CommittedVersion(const std::string& tx) override;
  std::vector<DecisionEntry> Decisions() override;
  void KillRank(int rank, bool power_loss) override;
  void KillCoordinator(bool power_loss) override;
  Status RestartRank(int rank) override;
  Status RestartCoordinator() override;

  // For fault tests: SIGKILL at any moment, from any thread (the controller notices on its
  // next call). 0 when the process is not running.
  pid_t RankPid(int rank) const { return ranks_[rank]->pid.load(); }
  pid_t CoordinatorPid() const { return coord_.pid.load(); }
  uint16_t coordinator_port() const { return coord_port_; }

 private:
  struct Proc {
    ChildProcess child;
    std::atomic<pid_t> pid{0};
    std::unique_ptr<net::ControlClient> control;
  };
  Status SpawnCoordinator();
  Status SpawnRank(int rank);
  Result<nlohmann::json> CallRank(int rank, const std::string& method, nlohmann::json params,
                                  std::chrono::milliseconds timeout);
  Result<nlohmann::json> CallCoordinator(const std::string& method, nlohmann::json params,
                                         std::chrono::milliseconds timeout);
  void Kill(Proc& p, bool power_loss);
  // Connects the control client of a spawned process; kills the process when that fails.
  Status ConnectControl(Proc& p, uint16_t port);
  std::vector<int> LiveRanks();

  const Scenario& sc_;
  TcpSimOptions options_;
  std::string work_dir_;  // private: the secret and the manifests
  std::string secret_, secret_file_;
  uint16_t coord_port_ = 0;
  std::string decision_log_;  // options_.decision_log with this run's own sub-prefix
  Proc coord_;
  std::vector<std::unique_ptr<Proc>> ranks_;
};

}  // namespace wtx::sim
