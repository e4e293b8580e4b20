// The internals of `wtx torture` (torture.h) that its source files share: a Script (one
// randomized run against a fresh in-process cluster and the reference model, model.h), the
// operations and faults it plans, and the power-loss modes of a kill. The Script's parts are
// defined in torture.cc (the run of a script and its transactions), script_plan.cc (planning
// operations and faults), script_processes.cc (killing and restarting processes),
// script_ops.cc (the operations under their faults) and script_checks.cc (recovery and the
// checks against the model). Not an interface: only tools/torture/ includes it.
//
// Thread-safety: a Script runs on one thread (RunTorture's); injected I/O errors fire on that
// thread only.
#pragma once

#include <concepts>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "src/testing/inproc_cluster.h"
#include "tools/torture/model.h"
#include "tools/torture/torture.h"
#include "wtx/coordinator.h"
#include "wtx/participant.h"

namespace wtx::torture {

inline uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Thrown (inside tools/torture only) to end a script at its first violation.
struct ScriptFailed {};

enum class Power { kNone, kAllUnsynced, kRandomPrefix, kTearLastRecord };

inline const char* PowerName(Power p) {
  switch (p) {
    case Power::kNone:
      return "process_crash";
    case Power::kAllUnsynced:
      return "power_loss_all_unsynced";
    case Power::kRandomPrefix:
      return "power_loss_random_prefix";
    case Power::kTearLastRecord:
      return "power_loss_torn_tail";
  }
  return "?";
}

struct Op {
  enum class Kind { kBegin, kWrite, kPatch, kRefresh, kSetKernel, kCommit, kAbort } kind;
  int rank = -1;
  BeginRequest begin;
  std::vector<ModelWrite> writes;
  std::string source;
  std::vector<int64_t> indices;
  int part = 0, parts = 1;
  uint64_t seed = 0;
  std::string name;  // refresh target / kernel identity
  std::set<int> silent;
};

struct Fault {
  enum class Kind { kKillRank, kKillCoordinator, kKillAll, kCrashPoint, kIoWrite, kIoSync } kind;
  int who = -1;  // rank; -1: the coordinator
  std::string at;
  Power power = Power::kNone;
  bool recover_now = false;
  int after = 0;  // I/O errors: journal writes (syncs) that succeed first
};

class Script {
 public:
  Script(const TortureOptions& o, TortureReport* rep, uint64_t index, std::string dir)
      : o_(o), rep_(*rep), index_(index), dir_(std::move(dir)), rng_(Mix(o.seed, index)) {}

  void Run();

 private:
  // ---- infrastructure ----
  uint64_t Rand(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  void Trace(const std::string& s) {
    trace_.push_back("step " + std::to_string(step_) + ": " + s);
    if (trace_.size() > 60) trace_.erase(trace_.begin());
    if (o_.verbose && o_.log) o_.log("[script " + std::to_string(index_) + "] " + trace_.back());
  }
  [[noreturn]] void Fail(const std::string& what) {
    Violation v;
    v.script = index_;
    v.step = step_;
    v.what = what;
    v.trace = trace_;
    if (o_.keep_failed) v.journals = dir_;
    rep_.violations.push_back(std::move(v));
    throw ScriptFailed{};
  }
  void Expect(bool ok, const std::string& what) {
    ++rep_.checks;
    if (!ok) Fail(what);
  }
  // The same, building the message only when the check fails (checks run after every step).
  template <typename MessageFn>
  requires std::invocable<MessageFn>
  void Expect(bool ok, MessageFn&& what) {
    ++rep_.checks;
    if (!ok) Fail(what());
  }
  void CrashPoint(const std::string& kind, Power p) {
    ++rep_.crash_points;
    ++rep_.crash_kinds[kind];
    ++rep_.crash_kinds[PowerName(p)];
  }
  Power RandomPower() {
    switch (Rand(6)) {
      case 0:
      case 1:
        return Power::kNone;
      case 2:
      case 3:
        return Power::kAllUnsynced;
      case 4:
        return Power::kRandomPrefix;
      default:
        return Power::kTearLastRecord;
    }
  }
  FaultInjectionFileSystem& FsOf(int who) {
    return who < 0 ? cluster_->coordinator_fs() : cluster_->rank_fs(who);
  }
  bool Alive(int r) const { return cluster_->RankAlive(r); }
  Participant& RankP(int r) { return cluster_->rank(r); }
  bool CoordAlive() const { return cluster_->CoordinatorAlive(); }
  Coordinator& Coord() { return cluster_->coordinator(); }
  std::string Who(int who) const { return who < 0 ? "coordinator" : "rank " + std::to_string(who); }

  // ---- processes ----
  void StartRank(int r, bool inject_io);
  void KillRank(int r, Power p);
  void StartCoordinator(bool inject_io);
  void KillCoordinator(Power p);
  PowerLoss Loss(Power p);
  void CheckCrashedJournal(const std::string& dir);
  bool Crashed(int r) {
    BeginRequest probe;
    probe.tx = "__probe__";
    return RankP(r).CheckBegin(probe).code() == ErrorCode::kCrashed;
  }
  bool CoordinatorCrashed() {
    return Coord().Commit("__probe__").status.code() == ErrorCode::kCrashed;
  }

  // ---- I/O error injection around one call ----
  struct IoResult {
    std::vector<int> ranks;  // ranks whose filesystem injected an error during the call
    bool coordinator = false;
  };
  template <typename F>
  IoResult WithIo(const std::optional<Fault>& f, F&& call);
  // Every process hit by an injected error must be dead now; kills it for good.
  void ReapIoCrashes(const IoResult& io, const std::string& during);

  // ---- the script ----
  std::vector<Op> PlanTransaction(const std::string& tx, bool clean);
  std::optional<Fault> PlanFault(const Op* op);
  void ApplyKill(const Fault& f);
  void Execute(const Op& op, const std::optional<Fault>& f);
  void DoBegin(const Op& op, const std::optional<Fault>& f);
  void DoWrite(const Op& op, const std::optional<Fault>& f);
  void DoPatch(const Op& op, const std::optional<Fault>& f);
  void DoRefresh(const Op& op);
  void DoCommit(const Op& op, const std::optional<Fault>& f);
  void DoAbort(const std::string& tx, const std::optional<Fault>& f);
  void RunTransaction(int t, bool clean);

  // ---- recovery and checks ----
  void Recover();
  void ResolveUnknownDecisions();
  void SyncResolution();
  void CloseOpenTransactions();
  void CheckRanks();
  void CheckAfterRecovery();
  void FinalCheck();

  const TortureOptions& o_;
  TortureReport& rep_;
  const uint64_t index_;
  const std::string dir_;
  std::mt19937_64 rng_;
  int step_ = 0;
  std::vector<std::string> trace_;

  std::vector<ManifestPtr> manifests_;
  std::unique_ptr<Model> model_;
  // The processes (library InProcCluster): participants, coordinator, their fault-injecting
  // filesystems and crash points.
  std::unique_ptr<InProcCluster> cluster_;
  std::string current_tx_;
  std::set<std::string> commit_attempted_;
};

}  // namespace wtx::torture
