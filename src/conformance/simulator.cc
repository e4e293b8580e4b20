// The in-process simulator (RunScenario, simulator.h): every rank and the coordinator as
// objects of this process over the in-process transport (InProcProcesses), and the journal
// directory's preparation. The steps and the output document are in step_runner.cc, the ranks'
// data-plane steps in rank_step.cc.
//
// Thread-safety: a simulation runs on one thread.
#include "src/conformance/simulator.h"

#include <filesystem>

#include "src/testing/armed_crash_point.h"
#include "src/testing/fault_injection_fs.h"
#include "src/testing/inproc_cluster.h"
#include "src/txn/test_hooks.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"
#include "wtx/participant.h"

namespace wtx::sim {

using nlohmann::json;

namespace {

// Every rank and the coordinator as objects of this process, over the in-process transport
// (the library's InProcCluster: one fault-injecting filesystem and crash point per process).
class InProcProcesses : public SimProcesses {
 public:
  InProcProcesses(const Scenario& sc, std::string dir, LiveMemoryKind memory, int threads,
                  std::function<void(uint64_t)> on_checkpoint_read)
      : cluster_(Options(sc, std::move(dir), memory, threads)),
        on_checkpoint_read_(std::move(on_checkpoint_read)) {}

  Status Start() override { return cluster_.Start(); }

  bool RankAlive(int r) override { return cluster_.RankAlive(r); }
  bool CoordinatorAlive() override { return cluster_.CoordinatorAlive(); }

  Status RankStep(int r, const Step& st, const std::optional<BeginRequest>& scope) override {
    return ApplyRankStep(st, scope, cluster_.rank(r), on_checkpoint_read_);
  }
  RankStatus RankState(int r) override { return cluster_.rank(r).status(); }

  BeginOutcome Begin(const BeginRequest& req) override { return cluster_.coordinator().Begin(req); }

  CommitOutcome Commit(const Step& st, bool* coordinator_died) override {
    ArmedCrashPoint* armed_rank = nullptr;
    int armed_index = -1;
    if (st.crash) {
      if (st.crash->who == "coordinator") {
        cluster_.coordinator_crash_point().Arm(st.crash->at);
      } else {
        armed_index = st.crash->rank;
        armed_rank = &cluster_.rank_crash_point(armed_index);
        armed_rank->Arm(st.crash->at);
      }
    }
    cluster_.transport().SetSilent(st.silent);
    CommitOutcome o = cluster_.coordinator().Commit(st.tx, st.commit_options);
    cluster_.transport().SetSilent({});
    // Processes that died at their crash point.
    if (armed_rank && armed_rank->Disarm()) KillRank(armed_index, st.crash->power_loss);
    *coordinator_died = cluster_.coordinator_crash_point().Disarm();
    if (*coordinator_died) KillCoordinator(st.crash->power_loss);
    return o;
  }

  BeginOutcome Abort(const std::string& tx) override { return cluster_.coordinator().Abort(tx); }
  std::optional<std::string> CommittedVersion(const std::string& tx) override {
    return cluster_.coordinator().CommittedVersion(tx);
  }
  std::vector<DecisionEntry> Decisions() override { return cluster_.coordinator().decisions(); }

  void KillRank(int r, bool power_loss) override {
    cluster_.KillRank(r, PowerLoss::Of(power_loss));
  }
  void KillCoordinator(bool power_loss) override {
    cluster_.KillCoordinator(PowerLoss::Of(power_loss));
  }
  Status RestartRank(int r) override { return cluster_.RestartRank(r); }
  // A rank that cannot resolve stays in doubt; the restart itself succeeded.
  Status RestartCoordinator() override { return cluster_.RestartCoordinator(); }

 private:
  static InProcClusterOptions Options(const Scenario& sc, std::string dir, LiveMemoryKind kind,
                                      int threads) {
    InProcClusterOptions o;
    o.dir = std::move(dir);
    o.manifests = sc.manifests;
    o.kernel_identity = sc.kernel_identity;
    o.rollback_budget_bytes = sc.rollback_budget_bytes;
    // A new process: new live memory (zeros), of the kind the run asked for.
    o.memory = [kind](int, const Manifest& m) { return NewLiveMemory(kind, m); };
    o.customize_rank = [threads](int, ParticipantOptions& po) { po.threads = threads; };
    return o;
  }

  InProcCluster cluster_;
  std::function<void(uint64_t)> on_checkpoint_read_;
};

}  // namespace

Status PrepareJournalDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    return Status::InvalidArgument("--journal-dir " + dir +
                                   " is not empty; give a new or empty directory");
  }
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  return Status::OK();
}

Result<json> RunScenario(const Scenario& scenario, const SimOptions& options) {
  WTX_RETURN_IF_ERROR(PrepareJournalDir(options.journal_dir));
  InProcProcesses procs(scenario, options.journal_dir, options.memory, options.threads,
                        options.on_checkpoint_read);
  WTX_RETURN_IF_ERROR(procs.Start());
  return RunSteps(scenario, procs, options.journal_dir);
}

}  // namespace wtx::sim
