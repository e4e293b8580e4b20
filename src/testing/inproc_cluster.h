// InProcCluster: N participant "processes" and a coordinator "process" as objects of this
// process, over the in-process transport, each on its own fault-injecting filesystem
// (FaultInjectionFileSystem) with its own crash point (ArmedCrashPoint), journals in
// DIR/rank-N and DIR/coordinator. A process can be closed cleanly, killed (with or without a
// power loss that drops its unsynced journal data: all of it, a random part, or a torn last
// record) and started again on the same journal — the one harness behind the tests
// (tests/test_util.h Cluster), the scenario simulator (`wtx sim`) and `wtx torture`.
//
// A process start is a new process: a fresh LiveMemory from the options' factory (null: the
// participant's default), so a killed rank's live bytes are gone. Nothing here recovers on its
// own except the documented Restart* steps; callers that check each step (torture) use the
// Open*/Kill* primitives.
//
// Library wtx_testing: never installed, never linked into the product libraries.
//
// Thread-safety: not thread-safe; one thread drives a cluster (the participants and the
// coordinator it holds are themselves safe to call from other threads while it does not
// change them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/testing/armed_crash_point.h"
#include "src/testing/fault_injection_fs.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"
#include "wtx/live_memory.h"
#include "wtx/manifest.h"
#include "wtx/participant.h"

namespace wtx {

struct InProcClusterOptions {
  std::string dir;                     // journals: dir/rank-N, dir/coordinator
  std::vector<ManifestPtr> manifests;  // one per rank; REQUIRES: non-empty, none null
  std::string kernel_identity;
  size_t rollback_budget_bytes = ParticipantOptions().rollback_budget_bytes;
  // The live memory of each rank process start; null (or a factory returning null): the
  // participant's default (zeroed host memory).
  std::function<Result<std::shared_ptr<LiveMemory>>(int rank, const Manifest&)> memory;
  // Any other participant option of each rank process start (a field the cluster does not set
  // itself); called last, just before the participant opens. May be empty.
  std::function<void(int rank, ParticipantOptions& options)> customize_rank;
  // Applied to the coordinator's options at every open (e.g. a shared decision log).
  std::function<void(CoordinatorOptions& options)> customize_coordinator;
};

// How a killed process loses its unsynced journal data.
struct PowerLoss {
  bool drop = false;  // false: a process crash; the files keep what was written
  FaultInjectionFileSystem::DropMode mode = FaultInjectionFileSystem::DropMode::kAllUnsynced;
  uint64_t seed = 0;  // kRandomPrefix / kTearLastRecord
  static PowerLoss None() { return {}; }
  static PowerLoss AllUnsynced() { return {true}; }
  static PowerLoss Of(bool power_loss) { return {power_loss}; }
};

// One rank process start.
struct RankStart {
  CrashPoints* crash_points = nullptr;          // null: the rank's ArmedCrashPoint
  std::optional<size_t> rollback_budget_bytes;  // nullopt: the cluster's
};

class InProcCluster {
 public:
  // Creates the filesystems and crash points; starts no process (Start, OpenRank...).
  explicit InProcCluster(InProcClusterOptions options);
  // Closes the coordinator, then every rank.
  ~InProcCluster();
  InProcCluster(const InProcCluster&) = delete;
  InProcCluster& operator=(const InProcCluster&) = delete;

  // Opens every rank, then the coordinator (fresh journals need no recovery).
  Status Start();

  int ranks() const { return static_cast<int>(ranks_.size()); }
  bool RankAlive(int r) const { return ranks_[r]->participant != nullptr; }
  bool CoordinatorAlive() const { return coordinator_ != nullptr; }
  // REQUIRES: RankAlive(r) / CoordinatorAlive().
  Participant& rank(int r) { return *ranks_[r]->participant; }
  Coordinator& coordinator() { return *coordinator_; }

  const Manifest& manifest(int r) const { return *options_.manifests[r]; }
  InProcTransport& transport() { return transport_; }
  FaultInjectionFileSystem& rank_fs(int r) { return *ranks_[r]->fs; }
  FaultInjectionFileSystem& coordinator_fs() { return *coordinator_fs_; }
  ArmedCrashPoint& rank_crash_point(int r) { return ranks_[r]->crash; }
  ArmedCrashPoint& coordinator_crash_point() { return coordinator_crash_; }
  std::string rank_dir(int r) const;
  std::string coordinator_dir() const;
  // The options of processes started from now on (memory factory, rank customization...).
  InProcClusterOptions& options() { return options_; }
  // The live memory of rank processes started from now on.
  void set_memory_factory(decltype(InProcClusterOptions::memory) f) {
    options_.memory = std::move(f);
  }

  // Starts rank r on its journal and attaches it to the transport; it does not resolve an
  // in-doubt transaction. REQUIRES: !RankAlive(r).
  Status OpenRank(int r, const RankStart& start = {});
  // Starts the coordinator on its journal; it does not recover. REQUIRES: !CoordinatorAlive().
  Status OpenCoordinator(CrashPoints* crash_points = nullptr);

  // A clean shutdown (the journal's files keep taking writes while it closes); no-op when down.
  void CloseRank(int r);
  void CloseCoordinator();
  // Process death: the filesystem stops taking writes, the object goes away (a rank's live
  // bytes with it), then `loss` drops unsynced data. No-op when down.
  void KillRank(int r, const PowerLoss& loss = {});
  void KillCoordinator(const PowerLoss& loss = {});

  // A live rank is killed (no power loss) first; then OpenRank, and the rank resolves an
  // in-doubt transaction with the coordinator when it is up (that result is returned).
  Status RestartRank(int r, const RankStart& start = {});
  // A live coordinator is killed (no power loss) first; then OpenCoordinator and Recover
  // (re-sends logged decisions): their failure is returned. Then every live rank resolves an
  // in-doubt transaction; a rank that fails is reported in *resolve_errors (may be null) and
  // does not stop the others.
  Status RestartCoordinator(CrashPoints* crash_points = nullptr,
                            std::vector<std::pair<int, Status>>* resolve_errors = nullptr);

 private:
  struct RankProcess {
    std::shared_ptr<FaultInjectionFileSystem> fs = std::make_shared<FaultInjectionFileSystem>();
    ArmedCrashPoint crash;
    std::unique_ptr<Participant> participant;
  };

  static void Drop(FaultInjectionFileSystem& fs, const PowerLoss& loss);

  InProcClusterOptions options_;
  InProcTransport transport_;
  std::vector<std::unique_ptr<RankProcess>> ranks_;
  std::shared_ptr<FaultInjectionFileSystem> coordinator_fs_ =
      std::make_shared<FaultInjectionFileSystem>();
  ArmedCrashPoint coordinator_crash_;
  std::unique_ptr<Coordinator> coordinator_;
};

}  // namespace wtx
