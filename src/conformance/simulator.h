// Simulator: runs a Scenario with real participants, a real coordinator, the in-process
// transport and real RocksDB journals (DIR/rank-N, DIR/coordinator), each process on its own
// fault-injecting filesystem so that a crash with power loss drops exactly its unsynced data.
// Produces the output document of spec/scenario.md.
//
// The step logic and the output document are separated from process management by
// SimProcesses, so that the same scenario runs with every rank and the coordinator as objects
// in this process (RunScenario) or as OS processes over TCP (tcp_simulator.h), with the same
// output.
//
// Thread-safety: a Simulator is used from one thread.
#pragma once

#include <functional>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/conformance/scenario.h"
#include "wtx/coordinator.h"
#include "wtx/device_live_memory.h"
#include "wtx/participant.h"

namespace wtx::sim {

struct SimOptions {
  std::string journal_dir;  // must be empty or absent
  // Where each rank's live bytes are (a fresh LiveMemory per rank process start).
  LiveMemoryKind memory = LiveMemoryKind::kHost;
  int threads = 0;  // ParticipantOptions::threads of every rank
  // Called as load_checkpoint steps read the checkpoint, with the bytes of each source read
  // (`wtx load`'s progress); from the thread running the step.
  std::function<void(uint64_t bytes)> on_checkpoint_read;
};

// Runs every step; step failures are part of the output, not errors. Errors are environment
// failures (journal directory unusable).
Result<nlohmann::json> RunScenario(const Scenario& scenario, const SimOptions& options);

// Where the ranks and the coordinator of a scenario live, and how they die and come back.
// Journals are DIR/rank-N and DIR/coordinator; a dead process's journal is read from there.
class SimProcesses {
 public:
  virtual ~SimProcesses() = default;
  // Starts every rank, then the coordinator.
  virtual Status Start() = 0;
  virtual bool RankAlive(int rank) = 0;
  virtual bool CoordinatorAlive() = 0;
  // write / patch / refresh / set_kernel_identity on a live rank (ApplyRankStep there).
  virtual Status RankStep(int rank, const Step& step, const std::optional<BeginRequest>& scope) = 0;
  // REQUIRES: RankAlive(rank)
  virtual RankStatus RankState(int rank) = 0;
  // REQUIRES: CoordinatorAlive() for the coordinator calls below.
  virtual BeginOutcome Begin(const BeginRequest& req) = 0;
  // Commits step.tx with step.silent ranks mute and step.crash armed; afterwards kills every
  // process whose crash point fired (with step.crash->power_loss) and reports in
  // *coordinator_died whether the coordinator was one of them.
  virtual CommitOutcome Commit(const Step& step, bool* coordinator_died) = 0;
  virtual BeginOutcome Abort(const std::string& tx) = 0;
  virtual std::optional<std::string> CommittedVersion(const std::string& tx) = 0;
  virtual std::vector<DecisionEntry> Decisions() = 0;
  // Process death; a rank loses its live bytes, power loss drops unsynced journal data.
  virtual void KillRank(int rank, bool power_loss) = 0;
  virtual void KillCoordinator(bool power_loss) = 0;
  // Start again on the same journal. A rank resolves an in-doubt transaction with the
  // coordinator if it is up; the coordinator recovers (re-sends logged decisions), then every
  // live rank resolves.
  virtual Status RestartRank(int rank) = 0;
  virtual Status RestartCoordinator() = 0;
};

// The data-plane steps (write, patch, refresh, set_kernel_identity) on one participant;
// `scope` is the current transaction's begin request ("param": "*" means its scope).
// `on_checkpoint_read`: load_checkpoint's progress (WriteCheckpointSlices's on_read).
Status ApplyRankStep(const Step& step, const std::optional<BeginRequest>& scope,
                     Participant& participant,
                     const std::function<void(uint64_t)>& on_checkpoint_read = nullptr);

// Runs the steps of `scenario` on `processes` (already started) and builds the output
// document; `journal_dir` is where the processes keep their journals.
nlohmann::json RunSteps(const Scenario& scenario, SimProcesses& processes,
                        const std::string& journal_dir);

// Checks that `dir` is absent or empty and creates it.
Status PrepareJournalDir(const std::string& dir);

}  // namespace wtx::sim
