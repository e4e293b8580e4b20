#include "tools/torture/torture.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "src/testing/inproc_cluster.h"
#include "src/txn/journal_check.h"
#include "tools/torture/model.h"
#include "wtx/content_hash.h"
#include "wtx/coordinator.h"
#include "wtx/participant.h"

namespace wtx::torture {

using nlohmann::json;

namespace {

namespace fs = std::filesystem;
using DropMode = FaultInjectionFileSystem::DropMode;
using Prep = ModelTx::Prep;
using DKind = ModelDecision::Kind;

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Concatenates strings (and string literals) with one allocation.
template <typename... Parts>
std::string StrCat(const Parts&... parts) {
  std::string out;
  out.reserve((std::string_view(parts).size() + ...));
  (out.append(std::string_view(parts)), ...);
  return out;
}

// Thrown (inside this file only) to end a script at its first violation.
struct ScriptFailed {};

enum class Power { kNone, kAllUnsynced, kRandomPrefix, kTearLastRecord };

const char* PowerName(Power p) {
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

DKind KindOf(Decision d) {
  switch (d) {
    case Decision::kCommit:
      return DKind::kCommit;
    case Decision::kAbort:
      return DKind::kAbort;
    case Decision::kNoop:
      return DKind::kNoop;
  }
  return DKind::kUnknown;
}

std::string BoxStr(const Box& b) {
  std::string s = "[";
  for (size_t d = 0; d < b.size(); ++d) {
    if (d > 0) s.push_back(',');
    s.append(std::to_string(b[d].begin)).push_back(':');
    s.append(std::to_string(b[d].end));
  }
  return s + "]";
}

std::string Codes(const std::vector<ErrorCode>& v) {
  std::string s;
  for (auto c : v) {
    if (!s.empty()) s.push_back(',');
    s.append(ErrorCodeName(c));
  }
  return s.empty() ? "-" : s;
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

// ---------------------------------------------------------------------------------------------
// Processes

void Script::StartRank(int r, bool inject_io) {
  ++step_;
  Status s;
  bool opened = false;
  if (inject_io) {
    // A restart whose own journal writes fail must fail, not come up half-recovered.
    const uint64_t before = FsOf(r).injected_errors();
    FsOf(r).FailNextWrites(1);
    s = cluster_->OpenRank(r);
    FsOf(r).FailNextWrites(0);
    if (FsOf(r).injected_errors() > before) {
      ++rep_.io_errors_injected;
      CrashPoint("io_error_during_restart", Power::kNone);
      Trace("restart rank " + std::to_string(r) + " with an injected write error -> " +
            s.ToString());
      Expect(!s.ok(), "rank " + std::to_string(r) +
                          " restarted successfully although its journal write failed (an I/O "
                          "error became a silent success)");
    } else {
      opened = s.ok();
    }
  }
  if (!opened) s = cluster_->OpenRank(r);
  ++rep_.recoveries;
  Trace("restart rank " + std::to_string(r) + " -> " + s.ToString());
  if (!s.ok()) {
    Fail("rank " + std::to_string(r) + " cannot recover from its journal: " + s.ToString());
  }
  model_->Restart(r);
  if (CoordAlive()) {
    Status rs = RankP(r).ResolveInDoubt(Coord());
    Trace("rank " + std::to_string(r) + " resolves in-doubt -> " + rs.ToString());
    if (!rs.ok()) Fail("rank " + std::to_string(r) + " cannot resolve in doubt: " + rs.ToString());
  }
}

// The seed is drawn whatever the mode, so that a script's random sequence does not depend on
// which kills lose power.
PowerLoss Script::Loss(Power p) {
  const uint64_t seed = rng_();
  switch (p) {
    case Power::kNone:
      return PowerLoss::None();
    case Power::kAllUnsynced:
      return {true, DropMode::kAllUnsynced, seed};
    case Power::kRandomPrefix:
      return {true, DropMode::kRandomPrefix, seed};
    case Power::kTearLastRecord:
      return {true, DropMode::kTearLastRecord, seed};
  }
  return PowerLoss::None();
}

void Script::KillRank(int r, Power p) {
  cluster_->KillRank(r, Loss(p));
  model_->Kill(r);
  Trace("kill rank " + std::to_string(r) + " (" + PowerName(p) + ")");
  CheckCrashedJournal(dir_ + "/rank-" + std::to_string(r));
}

void Script::CheckCrashedJournal(const std::string& dir) {
  // A crash is not corruption: `wtx check` on the journal a crash left behind may warn (a torn
  // unsynced tail, a lost watermark) but must not fail. (Sampled: it costs a journal open.)
  if (!Chance(0.2)) return;
  JournalCheckReport v = VerifyJournalDir(dir);
  ++rep_.journals_verified;
  Expect(v.status.ok(), "wtx check reports the journal a crash left in " + dir +
                            " as corrupt: " + v.status.ToString());
}

void Script::StartCoordinator(bool inject_io) {
  ++step_;
  if (inject_io) {
    const uint64_t before = FsOf(-1).injected_errors();
    FsOf(-1).FailNextWrites(1);
    Status s = cluster_->OpenCoordinator();
    FsOf(-1).FailNextWrites(0);
    // Open writes nothing when the journal exists; a fired error must fail the open.
    if (FsOf(-1).injected_errors() > before) {
      ++rep_.io_errors_injected;
      CrashPoint("io_error_during_restart", Power::kNone);
      Expect(!s.ok(), "the coordinator opened although its journal write failed");
    }
    cluster_->CloseCoordinator();
  }
  Status s = cluster_->OpenCoordinator();
  ++rep_.recoveries;
  Trace("restart coordinator -> " + s.ToString());
  if (!s.ok()) Fail("the coordinator cannot recover from its journal: " + s.ToString());
  s = Coord().Recover();
  Trace("coordinator re-sends logged decisions -> " + s.ToString());
  if (!s.ok()) Fail("coordinator Recover failed: " + s.ToString());
  for (int r = 0; r < o_.ranks; ++r) {
    if (!Alive(r)) continue;
    Status rs = RankP(r).ResolveInDoubt(Coord());
    Trace("rank " + std::to_string(r) + " resolves in-doubt -> " + rs.ToString());
    if (!rs.ok()) Fail("rank " + std::to_string(r) + " cannot resolve in doubt: " + rs.ToString());
  }
}

void Script::KillCoordinator(Power p) {
  cluster_->KillCoordinator(Loss(p));
  Trace(std::string("kill coordinator (") + PowerName(p) + ")");
  CheckCrashedJournal(dir_ + "/coordinator");
}

template <typename F>
Script::IoResult Script::WithIo(const std::optional<Fault>& f, F&& call) {
  std::vector<uint64_t> before(o_.ranks);
  for (int r = 0; r < o_.ranks; ++r) before[r] = FsOf(r).injected_errors();
  const uint64_t cbefore = FsOf(-1).injected_errors();
  const bool io = f && (f->kind == Fault::Kind::kIoWrite || f->kind == Fault::Kind::kIoSync);
  if (io) {
    if (f->kind == Fault::Kind::kIoWrite) FsOf(f->who).FailNextWrites(1, f->after);
    if (f->kind == Fault::Kind::kIoSync) FsOf(f->who).FailNextSyncs(1, f->after);
  }
  call();
  if (io) {
    FsOf(f->who).FailNextWrites(0);
    FsOf(f->who).FailNextSyncs(0);
  }
  IoResult out;
  for (int r = 0; r < o_.ranks; ++r) {
    if (FsOf(r).injected_errors() > before[r]) out.ranks.push_back(r);
  }
  out.coordinator = FsOf(-1).injected_errors() > cbefore;
  if (io && (!out.ranks.empty() || out.coordinator)) {
    ++rep_.io_errors_injected;
    CrashPoint(
        std::string(f->kind == Fault::Kind::kIoWrite ? "io_write_error_" : "io_sync_error_") +
            (f->who < 0 ? "coordinator" : "rank"),
        f->power);
  }
  return out;
}

void Script::ReapIoCrashes(const IoResult& io, const std::string& during) {
  for (int r : io.ranks) {
    if (!Alive(r)) continue;
    Expect(Crashed(r), "rank " + std::to_string(r) +
                           " is still alive after an injected I/O error "
                           "in its journal during " +
                           during +
                           " (an I/O error became a silent "
                           "success)");
    KillRank(r, RandomPower());
  }
  if (io.coordinator && CoordAlive()) {
    Expect(CoordinatorCrashed(),
           "the coordinator is still alive after an injected I/O error in "
           "its journal during " +
               during);
    KillCoordinator(RandomPower());
  }
}

// ---------------------------------------------------------------------------------------------
// Planning

std::vector<Op> Script::PlanTransaction(const std::string& tx, bool clean) {
  std::vector<Op> ops;
  const Manifest& m0 = model_->manifest(0);
  const uint64_t seed = rng_() % 1000000;
  Op b;
  b.kind = Op::Kind::kBegin;
  b.begin.tx = tx;
  // Sparse updates when every rank has a clean base (mostly); otherwise mostly full reloads,
  // with some partial/delta begins that must be refused.
  bool base_ok = true;
  for (int r = 0; r < o_.ranks; ++r) {
    const ModelRank& rk = model_->rank(r);
    base_ok = base_ok && rk.alive && rk.loaded && rk.dirty == Tri::kNo && !rk.committed_tx.empty();
  }
  const int full_pct = base_ok ? 40 : 85;
  const int pick = clean ? 0 : static_cast<int>(Rand(100));
  b.begin.kind = pick < full_pct                          ? TxKind::kFull
                 : pick < full_pct + (100 - full_pct) / 2 ? TxKind::kPartial
                                                          : TxKind::kDelta;
  if (b.begin.kind != TxKind::kFull) {
    const std::string last = model_->last_committed();
    auto it = model_->decisions().find(last);
    b.begin.base =
        (it != model_->decisions().end() && !Chance(0.1)) ? it->second.version : "00badba5e";
    b.begin.rollback = Chance(0.4);
  }
  std::set<uint32_t> scope;
  if (b.begin.kind == TxKind::kPartial) {
    for (const auto& mod : m0.modules()) {
      if (Chance(0.5)) b.begin.modules.push_back(mod.name);
    }
    if (b.begin.modules.empty()) {
      b.begin.modules.push_back(m0.modules()[Rand(m0.modules().size())].name);
    }
  }
  std::vector<std::string> patchable;
  for (const auto& p : m0.params()) {
    for (const auto& s : p.shards) {
      if (!s.packed) patchable.push_back(s.source);
    }
  }
  if (b.begin.kind == TxKind::kDelta) {
    std::shuffle(patchable.begin(), patchable.end(), rng_);
    const size_t n = 1 + Rand(3);
    for (size_t i = 0; i < n && i < patchable.size(); ++i) b.begin.sources.push_back(patchable[i]);
    if (Chance(0.08)) b.begin.sources.push_back("l1.packed.weight");
  }
  ops.push_back(b);

  // An empty transaction (nothing written anywhere: a noop) must clean nothing, typically
  // right after a half-failed one left the ranks dirty.
  if (!clean && Chance(0.06)) {
    Op end;
    end.kind = Chance(0.8) ? Op::Kind::kCommit : Op::Kind::kAbort;
    end.begin.tx = tx;
    ops.push_back(end);
    return ops;
  }
  // Per rank: refresh-before (does not count), writes or patches, refresh after.
  std::vector<int> order(o_.ranks);
  for (int r = 0; r < o_.ranks; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), rng_);
  for (int r : order) {
    const Manifest& m = model_->manifest(r);
    const double refresh_mode = clean ? 0 : std::uniform_real_distribution<double>(0, 1)(rng_);
    if (refresh_mode > 0.97) {
      Op rf;
      rf.kind = Op::Kind::kRefresh;
      rf.rank = r;
      rf.name = "*";
      ops.push_back(rf);
    }
    if (!clean && Chance(0.03)) {
      Op k;
      k.kind = Op::Kind::kSetKernel;
      k.rank = r;
      k.name = "other-kernel";
      ops.push_back(k);
    }
    if (b.begin.kind != TxKind::kDelta) {
      for (uint32_t pi = 0; pi < m.params().size(); ++pi) {
        const ParamSpec& p = m.params()[pi];
        bool in = b.begin.kind == TxKind::kFull;
        for (const auto& mod : b.begin.modules) {
          const auto& ps = m.modules()[*m.FindModule(mod)].params;
          in = in || std::find(ps.begin(), ps.end(), p.name) != ps.end();
        }
        if (!in) {
          if (!clean && Chance(0.03)) {  // out of scope: E_OUT_OF_SCOPE
            Op w;
            w.kind = Op::Kind::kWrite;
            w.rank = r;
            w.writes.push_back({pi, "", WholeBox(p.shape), seed});
            ops.push_back(w);
          }
          continue;
        }
        const uint64_t pseed = (!clean && Chance(0.05)) ? seed + 17 : seed;
        const double mode = clean ? 0 : std::uniform_real_distribution<double>(0, 1)(rng_);
        if (mode < 0.7) {
          for (const auto& s : p.shards) {
            if (!clean && Chance(0.01)) continue;  // a missing shard
            Op w;
            w.kind = Op::Kind::kWrite;
            w.rank = r;
            w.writes.push_back({pi, s.id, s.box, pseed});
            ops.push_back(w);
          }
        } else if (mode < 0.85) {
          Op w;
          w.kind = Op::Kind::kWrite;
          w.rank = r;
          w.writes.push_back({pi, "", WholeBox(p.shape), pseed});
          ops.push_back(w);
        } else if (mode < 0.95) {
          // Each shard in two pieces split along its first dimension of extent >= 2, sent as
          // one call (or as two).
          Op w;
          w.kind = Op::Kind::kWrite;
          w.rank = r;
          for (const auto& s : p.shards) {
            size_t d = 0;
            while (d < s.box.size() && s.box[d].end - s.box[d].begin < 2) ++d;
            if (d == s.box.size()) {
              w.writes.push_back({pi, s.id, s.box, pseed});
              continue;
            }
            Box lo = s.box, hi = s.box;
            lo[d].end = hi[d].begin = (s.box[d].begin + s.box[d].end) / 2;
            w.writes.push_back({pi, s.id, lo, pseed});
            if (Chance(0.5)) {
              ops.push_back(w);
              w.writes.clear();
            }
            w.writes.push_back({pi, s.id, hi, pseed});
          }
          if (!w.writes.empty()) ops.push_back(w);
        }                              // else: the whole parameter is missing
        if (!clean && Chance(0.03)) {  // a duplicate: E_DUPLICATE_WRITE, nothing lands
          Op w;
          w.kind = Op::Kind::kWrite;
          w.rank = r;
          w.writes.push_back({pi, p.shards[0].id, p.shards[0].box, seed + 1});
          ops.push_back(w);
        }
        if (!clean && Chance(0.02)) {  // out of range: E_OUT_OF_RANGE
          Op w;
          w.kind = Op::Kind::kWrite;
          w.rank = r;
          Box box = WholeBox(p.shape);
          box[0].end += 1;
          w.writes.push_back({pi, "", box, seed});
          ops.push_back(w);
        }
      }
    } else {
      for (const auto& src : b.begin.sources) {
        // Indices over the whole source (every rank's slice): each rank applies those it holds.
        const Shape sshape = model_->manifest(0).SourceShape(src).value();
        const int64_t total = NumElements(sshape);
        std::vector<int64_t> idx;
        const size_t k = 1 + Rand(std::min<int64_t>(8, total));
        std::set<int64_t> pickset;
        while (pickset.size() < k) pickset.insert(static_cast<int64_t>(Rand(total)));
        idx.assign(pickset.begin(), pickset.end());
        std::shuffle(idx.begin(), idx.end(), rng_);
        const int parts = 1 + static_cast<int>(Rand(3));
        std::vector<std::vector<int64_t>> part_idx(parts);
        for (size_t i = 0; i < idx.size(); ++i) part_idx[i % parts].push_back(idx[i]);
        for (int pt = 0; pt < parts; ++pt) {
          if (!clean && Chance(0.04)) continue;  // a missing part
          Op pa;
          pa.kind = Op::Kind::kPatch;
          pa.rank = r;
          pa.source = src;
          pa.indices = part_idx[pt];
          pa.part = pt;
          pa.parts = parts;
          pa.seed = seed;
          ops.push_back(pa);
          if (!clean && Chance(0.03)) ops.push_back(pa);  // the part again: E_DUPLICATE_WRITE
          if (!clean && Chance(0.02) && pt + 1 < parts && !pa.indices.empty()) {
            // A later part repeating an index: E_DUPLICATE_WRITE (and that part is lost).
            part_idx[pt + 1].push_back(pa.indices[0]);
          }
          if (!clean && Chance(0.02)) {
            Op bad = pa;
            bad.indices = {total};  // E_OUT_OF_RANGE
            ops.push_back(bad);
          }
        }
      }
    }
    if (clean || refresh_mode < 0.92) {
      Op rf;
      rf.kind = Op::Kind::kRefresh;
      rf.rank = r;
      rf.name = "*";
      ops.push_back(rf);
    } else if (refresh_mode < 0.95) {
      Op rf;
      rf.kind = Op::Kind::kRefresh;
      rf.rank = r;
      rf.name = m.derived()[Rand(m.derived().size())].name;
      ops.push_back(rf);
    }  // else: no refresh, derived state may be stale
  }
  // Interleave ranks a little: the protocol does not care about the order across ranks.
  if (!clean && Chance(0.3) && ops.size() > 2) std::shuffle(ops.begin() + 1, ops.end(), rng_);
  Op end;
  end.kind = (!clean && Chance(0.12)) ? Op::Kind::kAbort : Op::Kind::kCommit;
  end.begin.tx = tx;
  if (!clean && end.kind == Op::Kind::kCommit && Chance(0.05)) {
    end.silent.insert(static_cast<int>(Rand(o_.ranks)));
  }
  ops.push_back(end);
  return ops;
}

std::optional<Fault> Script::PlanFault(const Op* op) {
  Fault f;
  f.power = RandomPower();
  f.recover_now = Chance(0.5);
  const bool journals = op && (op->kind == Op::Kind::kBegin || op->kind == Op::Kind::kCommit ||
                               op->kind == Op::Kind::kAbort);
  const uint64_t roll = Rand(100);
  if (op && op->kind == Op::Kind::kCommit && roll < 45) {
    f.kind = Fault::Kind::kCrashPoint;
    static const char* kRank[] = {"before_prepare_logged", "after_prepare_logged"};
    static const char* kCoord[] = {"before_decision_logged", "after_decision_logged"};
    if (Chance(0.5)) {
      f.who = static_cast<int>(Rand(o_.ranks));
      f.at = kRank[Rand(2)];
    } else {
      f.who = -1;
      f.at = kCoord[Rand(2)];
    }
    return f;
  }
  if (journals && roll < 75) {
    f.kind = Chance(0.5) ? Fault::Kind::kIoWrite : Fault::Kind::kIoSync;
    f.who = Chance(0.7) ? static_cast<int>(Rand(o_.ranks)) : -1;
    f.after = static_cast<int>(Rand(3));
    return f;
  }
  const uint64_t k = Rand(10);
  if (k < 6) {
    f.kind = Fault::Kind::kKillRank;
    f.who = static_cast<int>(Rand(o_.ranks));
  } else if (k < 9) {
    f.kind = Fault::Kind::kKillCoordinator;
  } else {
    f.kind = Fault::Kind::kKillAll;
  }
  return f;
}

void Script::ApplyKill(const Fault& f) {
  ++step_;
  switch (f.kind) {
    case Fault::Kind::kKillRank:
      if (!Alive(f.who)) return;
      CrashPoint("kill_rank_between_steps", f.power);
      KillRank(f.who, f.power);
      break;
    case Fault::Kind::kKillCoordinator:
      if (!CoordAlive()) return;
      CrashPoint("kill_coordinator_between_steps", f.power);
      KillCoordinator(f.power);
      break;
    case Fault::Kind::kKillAll:
      CrashPoint("kill_all_between_steps", f.power);
      if (CoordAlive()) KillCoordinator(f.power);
      for (int r = 0; r < o_.ranks; ++r) {
        if (Alive(r)) KillRank(r, f.power);
      }
      break;
    default:
      return;
  }
  if (f.recover_now) Recover();
}

// ---------------------------------------------------------------------------------------------
// Operations

void Script::Execute(const Op& op, const std::optional<Fault>& f) {
  ++step_;
  ++rep_.steps;
  if (f && (f->kind == Fault::Kind::kIoWrite || f->kind == Fault::Kind::kIoSync)) {
    Trace(std::string("arm one ") + (f->kind == Fault::Kind::kIoWrite ? "write" : "sync") +
          " error (after " + std::to_string(f->after) + ") in the journal of " + Who(f->who));
  }
  switch (op.kind) {
    case Op::Kind::kBegin:
      DoBegin(op, f);
      break;
    case Op::Kind::kWrite:
      DoWrite(op, f);
      break;
    case Op::Kind::kPatch:
      DoPatch(op, f);
      break;
    case Op::Kind::kRefresh:
      DoRefresh(op);
      break;
    case Op::Kind::kSetKernel:
      if (!Alive(op.rank)) return;
      RankP(op.rank).SetKernelIdentity(op.name);
      model_->SetKernelIdentity(op.rank, op.name);
      Trace("rank " + std::to_string(op.rank) + " kernel identity -> " + op.name);
      break;
    case Op::Kind::kCommit:
      DoCommit(op, f);
      break;
    case Op::Kind::kAbort:
      DoAbort(op.begin.tx, f);
      break;
  }
  CheckRanks();
}

void Script::DoBegin(const Op& op, const std::optional<Fault>& f) {
  const BeginRequest& req = op.begin;
  std::string what = "begin " + req.tx + " " + std::string(TxKindName(req.kind)) +
                     (req.rollback ? " rollback" : "") +
                     (req.base.empty() ? "" : " base " + req.base.substr(0, 8));
  for (const auto& m : req.modules) what += " module:" + m;
  for (const auto& s : req.sources) what += " source:" + s;
  if (!CoordAlive()) {
    Trace(what + " -> skipped (coordinator down)");
    return;
  }
  // Prediction: dead ranks (Describe), kernel identities, then each rank's CheckBegin in order.
  ErrorCode expect = ErrorCode::kOk;
  bool known = true;
  for (int r = 0; r < o_.ranks; ++r) {
    if (!model_->rank(r).alive) {
      expect = ErrorCode::kCrashed;
      break;
    }
  }
  if (expect == ErrorCode::kOk) {
    for (int r = 1; r < o_.ranks; ++r) {
      if (model_->rank(r).kernel != model_->rank(0).kernel) expect = ErrorCode::kManifestMismatch;
    }
  }
  if (expect == ErrorCode::kOk) {
    for (int r = 0; r < o_.ranks; ++r) {
      auto e = model_->PredictBegin(r, req);
      if (!e) {
        known = false;
        break;
      }
      if (*e != ErrorCode::kOk) {
        expect = *e;
        break;
      }
    }
  }
  BeginOutcome out;
  IoResult io = WithIo(f, [&] { out = Coord().Begin(req); });
  Trace(what + " -> " + out.status.ToString());
  if (!io.ranks.empty() || io.coordinator) {
    Expect(!out.status.ok(), "begin " + req.tx + " succeeded although a journal write failed on " +
                                 Who(io.ranks.empty() ? -1 : io.ranks[0]));
    for (int r : io.ranks) model_->rank(r).begin_maybe_logged = true;
    // Ranks that began before the failure were told to abort; they journaled a BEGIN.
    for (int r = 0; r < o_.ranks; ++r) model_->rank(r).ever_began |= model_->rank(r).alive;
    ReapIoCrashes(io, "begin");
    ++rep_.begin_refused;
    return;
  }
  if (known) {
    Expect(out.status.code() == expect, "begin " + req.tx + ": expected " +
                                            std::string(ErrorCodeName(expect)) + ", got " +
                                            out.status.ToString());
  }
  if (!out.status.ok()) {
    ++rep_.begin_refused;
    return;
  }
  current_tx_ = req.tx;
  for (int r = 0; r < o_.ranks; ++r) {
    if (req.kind != TxKind::kFull) {
      // The rank accepted a partial/delta begin: it was clean (learned, when unknown).
      if (model_->rank(r).dirty == Tri::kUnknown) model_->rank(r).dirty = Tri::kNo;
    }
    model_->Begin(r, req);
  }
}

void Script::DoWrite(const Op& op, const std::optional<Fault>& f) {
  const int r = op.rank;
  std::string what = "rank " + std::to_string(r) + " write";
  const Manifest& m = model_->manifest(r);
  for (const auto& w : op.writes) {
    what += " " + m.params()[w.param].name + (w.shard.empty() ? "" : "/" + w.shard) +
            BoxStr(w.box) + "#" + std::to_string(w.seed);
  }
  if (!Alive(r)) {
    Trace(what + " -> skipped (rank down)");
    return;
  }
  const std::optional<ErrorCode> expect = model_->PredictWrite(r, op.writes);
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<WritePiece> pieces;
  for (const auto& w : op.writes) {
    const ParamSpec& p = m.params()[w.param];
    bool fits = w.box.size() == p.shape.size();
    for (size_t d = 0; fits && d < w.box.size(); ++d) {
      fits = w.box[d].begin >= 0 && w.box[d].end <= p.shape[d] && w.box[d].begin < w.box[d].end;
    }
    buffers.push_back(fits ? model_->ExpectedBytes(r, w.param, w.box, w.seed)
                           : std::vector<uint8_t>());
    pieces.push_back({p.name, w.shard, w.box, buffers.back().data(), buffers.back().size()});
  }
  Status s;
  IoResult io = WithIo(f, [&] { s = RankP(r).Write(pieces); });
  Trace(what + " -> " + s.ToString());
  if (std::find(io.ranks.begin(), io.ranks.end(), r) != io.ranks.end()) {
    Expect(!s.ok(),
           "write succeeded although its journal flush failed on rank " + std::to_string(r));
    ReapIoCrashes(io, "write");
    return;
  }
  ReapIoCrashes(io, "write");
  if (expect) {
    Expect(s.code() == *expect, "rank " + std::to_string(r) + " write: expected " +
                                    std::string(ErrorCodeName(*expect)) + ", got " + s.ToString());
  }
  if (s.ok()) model_->Write(r, op.writes);
}

void Script::DoPatch(const Op& op, const std::optional<Fault>& f) {
  const int r = op.rank;
  std::string what = "rank " + std::to_string(r) + " patch " + op.source + " part " +
                     std::to_string(op.part) + "/" + std::to_string(op.parts) + " indices";
  for (int64_t i : op.indices) what += " " + std::to_string(i);
  if (!Alive(r)) {
    Trace(what + " -> skipped (rank down)");
    return;
  }
  const auto expect = model_->PredictPatch(r, op.source, op.indices, op.part, op.parts);
  const std::vector<uint8_t> values = model_->PatchValues(r, op.source, op.indices, op.seed);
  PatchRequest req;
  req.source = op.source;
  req.indices = op.indices;
  req.values = values.data();
  req.value_bytes = values.size();
  req.part = op.part;
  req.parts = op.parts;
  Status s;
  IoResult io = WithIo(f, [&] { s = RankP(r).Patch(req); });
  Trace(what + " -> " + s.ToString());
  if (std::find(io.ranks.begin(), io.ranks.end(), r) != io.ranks.end()) {
    Expect(!s.ok(),
           "patch succeeded although its journal flush failed on rank " + std::to_string(r));
    ReapIoCrashes(io, "patch");
    return;
  }
  ReapIoCrashes(io, "patch");
  if (expect) {
    Expect(s.code() == *expect, "rank " + std::to_string(r) + " patch: expected " +
                                    std::string(ErrorCodeName(*expect)) + ", got " + s.ToString());
  }
  if (s.ok()) model_->Patch(r, op.source, op.indices, op.part, op.parts, op.seed);
}

void Script::DoRefresh(const Op& op) {
  const int r = op.rank;
  if (!Alive(r)) {
    Trace("rank " + std::to_string(r) + " refresh " + op.name + " -> skipped (rank down)");
    return;
  }
  std::set<std::string> expect;
  const Manifest& m = model_->manifest(r);
  for (uint32_t d = 0; d < m.derived().size(); ++d) {
    if (op.name == "*" ? model_->rank(r).stale[d] : m.derived()[d].name == op.name) {
      expect.insert(m.derived()[d].name);
    }
  }
  auto res = RankP(r).Refresh(op.name);
  Trace("rank " + std::to_string(r) + " refresh " + op.name + " -> " + res.status().ToString());
  Expect(res.ok(), "rank " + std::to_string(r) + " refresh failed: " + res.status().ToString());
  std::set<std::string> got(res.value().begin(), res.value().end());
  Expect(got == expect, "rank " + std::to_string(r) + " refresh " + op.name + " refreshed " +
                            json(got).dump() + ", the model expected " + json(expect).dump());
  model_->Refresh(r, op.name);
}

void Script::DoCommit(const Op& op, const std::optional<Fault>& f) {
  const std::string& tx = op.begin.tx;
  std::string what = "commit " + tx;
  for (int s : op.silent) what += " silent:" + std::to_string(s);
  if (f && f->kind == Fault::Kind::kCrashPoint) what += " crash:" + Who(f->who) + "@" + f->at;
  if (!CoordAlive()) {
    Trace(what + " -> skipped (coordinator down)");
    return;
  }
  commit_attempted_.insert(tx);
  std::vector<std::optional<std::vector<ErrorCode>>> predicted(o_.ranks);
  for (int r = 0; r < o_.ranks; ++r) predicted[r] = model_->PredictVote(r, tx);
  ArmedCrashPoint* armed = nullptr;
  if (f && f->kind == Fault::Kind::kCrashPoint) {
    armed = f->who < 0 ? &cluster_->coordinator_crash_point() : &cluster_->rank_crash_point(f->who);
    armed->Arm(f->at);
  }
  cluster_->transport().SetSilent(op.silent);
  CommitOutcome out;
  IoResult io = WithIo(f, [&] { out = Coord().Commit(tx); });
  cluster_->transport().SetSilent({});
  const bool point_fired = armed && armed->Disarm();
  std::string votes;
  for (const auto& v : out.votes) {
    votes += " r" + std::to_string(v.rank) + ":" + std::string(VoteKindName(v.kind)) +
             (v.kind == VoteReport::Kind::kNo ? "(" + Codes(v.vote.errors) + ")" : "");
  }
  Trace(what + " -> " + out.status.ToString() + " decision " +
        (out.decision ? std::string(DecisionName(*out.decision)) : "-") +
        (out.decision_logged ? " (logged)" : "") + " votes" + votes);
  if (point_fired) CrashPoint(f->at, f->power);

  // Votes against the model.
  std::vector<std::string> digests(o_.ranks);
  bool all_yes = !out.votes.empty();
  bool any_missing = false, any_wrote = false;
  for (const auto& v : out.votes) {
    const int r = v.rank;
    const bool rank_point = point_fired && f->who == r;
    const bool rank_io = std::find(io.ranks.begin(), io.ranks.end(), r) != io.ranks.end();
    switch (v.kind) {
      case VoteReport::Kind::kYes:
        Expect(predicted[r] && predicted[r]->empty(),
               "rank " + std::to_string(r) + " voted yes on " + tx + "; the model expected " +
                   (predicted[r] ? "no (" + Codes(*predicted[r]) + ")" : "E_NO_TX"));
        Expect(v.vote.digest == model_->Digest(r),
               "rank " + std::to_string(r) + " voted yes with digest " + v.vote.digest +
                   " but its live bytes per the model hash to " + model_->Digest(r));
        model_->Prepared(r, Prep::kYes);
        digests[r] = v.vote.digest;
        any_wrote = any_wrote || v.vote.wrote;
        break;
      case VoteReport::Kind::kNo:
        all_yes = false;
        if (!predicted[r]) {
          Expect(v.vote.error == ErrorCode::kNoTx,
                 "rank " + std::to_string(r) + " voted " + Codes(v.vote.errors) +
                     "; the model expected E_NO_TX (it has no transaction " + tx + ")");
        } else {
          Expect(v.vote.errors == *predicted[r],
                 "rank " + std::to_string(r) + " voted no (" + Codes(v.vote.errors) +
                     "); the model expected " +
                     (predicted[r]->empty() ? "yes" : Codes(*predicted[r])));
          model_->Prepared(r, Prep::kNo);
        }
        any_wrote = any_wrote || v.vote.wrote;
        break;
      case VoteReport::Kind::kTimeout:
        all_yes = false;
        any_missing = true;
        Expect(op.silent.count(r) > 0,
               "rank " + std::to_string(r) + " timed out without being silent");
        break;
      case VoteReport::Kind::kCrashed:
        all_yes = false;
        any_missing = true;
        if (rank_point && f->at == "after_prepare_logged" && predicted[r]) {
          model_->Prepared(r, predicted[r]->empty() ? Prep::kYes : Prep::kNo);
          if (predicted[r]->empty()) digests[r] = model_->Digest(r);
        } else if (rank_io && predicted[r]) {
          model_->Prepared(r, predicted[r]->empty() ? Prep::kMaybe : Prep::kNo);
        } else {
          Expect(rank_point || rank_io || !model_->rank(r).alive,
                 "rank " + std::to_string(r) + " reported crashed during commit of " + tx +
                     " without a fault: " + v.status.ToString());
        }
        break;
    }
  }
  // Processes that died in the commit.
  if (point_fired) {
    if (f->who < 0) {
      KillCoordinator(f->power);
    } else {
      Expect(Alive(f->who) && Crashed(f->who),
             "rank " + std::to_string(f->who) + " survived its crash point " + f->at);
      KillRank(f->who, f->power);
    }
  }
  for (int r : io.ranks) {
    bool surfaced = false;
    for (const auto& v : out.votes) {
      surfaced |= v.rank == r && v.kind == VoteReport::Kind::kCrashed;
    }
    surfaced |= std::find(out.unacknowledged.begin(), out.unacknowledged.end(), r) !=
                out.unacknowledged.end();
    Expect(surfaced, "rank " + std::to_string(r) + "'s journal failed during commit of " + tx +
                         " but the coordinator saw neither a crashed vote nor an unacknowledged "
                         "decision (an I/O error became a silent success)");
  }
  const bool coord_io = io.coordinator;
  ReapIoCrashes(io, "commit");

  // The decision.
  const bool all_unknown =
      !out.votes.empty() &&
      std::all_of(out.votes.begin(), out.votes.end(), [](const VoteReport& v) {
        return v.kind == VoteReport::Kind::kNo && v.vote.error == ErrorCode::kNoTx;
      });
  DKind expect_kind = !any_missing && !any_wrote ? DKind::kNoop
                      : all_yes                  ? DKind::kCommit
                                                 : DKind::kAbort;
  std::string expect_version;
  if (expect_kind == DKind::kCommit) expect_version = CombineRankDigests(digests);
  if (out.decision_logged) {
    const DKind kind = KindOf(*out.decision);
    Expect(kind == expect_kind, "coordinator decided " + std::string(DecisionName(*out.decision)) +
                                    " on " + tx + " where the votes call for another outcome");
    if (kind == DKind::kCommit) {
      Expect(out.version == expect_version, "coordinator committed " + tx + " as version " +
                                                out.version + "; the model computes " +
                                                expect_version);
    }
    ModelDecision d;
    d.kind = kind;
    d.version = out.version;
    d.rank_digests = digests;
    model_->RecordDecision(tx, d);
    if (kind == DKind::kCommit) ++rep_.committed;
    if (kind == DKind::kAbort) ++rep_.aborted;
    if (kind == DKind::kNoop) ++rep_.noop;
    const bool delivered = !(point_fired && f->who < 0 && f->at == "after_decision_logged");
    if (delivered) {
      for (int r = 0; r < o_.ranks; ++r) {
        if (!Alive(r)) continue;
        if (std::find(out.unacknowledged.begin(), out.unacknowledged.end(), r) !=
            out.unacknowledged.end()) {
          Fail("rank " + std::to_string(r) + " is alive but did not acknowledge the decision on " +
               tx);
        }
        model_->ApplyDecision(r, tx, kind);
      }
    }
  } else if ((point_fired && f->who < 0) || coord_io) {
    // The coordinator died around its commit point: the outcome is in doubt until it recovers.
    ModelDecision d;
    d.kind = DKind::kUnknown;
    d.version = expect_version;
    d.rank_digests = digests;
    model_->RecordDecision(tx, d);
  } else {
    Expect(all_unknown && out.status.code() == ErrorCode::kNoTx,
           "commit of " + tx + " returned no decision: " + out.status.ToString());
  }
}

void Script::DoAbort(const std::string& tx, const std::optional<Fault>& f) {
  if (!CoordAlive()) {
    Trace("abort " + tx + " -> skipped (coordinator down)");
    return;
  }
  BeginOutcome out;
  IoResult io = WithIo(f, [&] { out = Coord().Abort(tx); });
  Trace("abort " + tx + " -> " + out.status.ToString());
  bool any = false;
  for (int r = 0; r < o_.ranks; ++r) {
    if (!Alive(r) || std::find(io.ranks.begin(), io.ranks.end(), r) != io.ranks.end()) continue;
    if (model_->rank(r).tx && model_->rank(r).tx->id == tx) {
      any = true;
      model_->ApplyDecision(r, tx, DKind::kAbort);
    }
  }
  if (io.coordinator) {
    Expect(!out.status.ok(),
           "abort of " + tx + " succeeded although the coordinator's journal failed");
  }
  ReapIoCrashes(io, "abort");
  if (any || out.status.ok()) {
    ModelDecision d;
    d.kind = DKind::kAbort;
    if (!model_->decisions().count(tx)) {
      model_->RecordDecision(tx, d);
      ++rep_.aborted;
    }
  }
}

void Script::RunTransaction(int t, bool clean) {
  const std::string tx = "t" + std::to_string(t);
  ++rep_.transactions;
  current_tx_.clear();
  std::vector<Op> ops = PlanTransaction(tx, clean);
  std::map<size_t, Fault> faults;  // before op i; i == ops.size(): after the last op
  if (!clean) {
    const uint64_t roll = Rand(100);
    const int n = roll < 30 ? 0 : roll < 85 ? 1 : 2;
    for (int i = 0; i < n; ++i) {
      // Faults favour the operations that journal (begin, commit, abort) and the last one.
      size_t at;
      const uint64_t where = Rand(10);
      if (where < 4) {
        at = ops.size() - 1;  // the commit/abort
      } else if (where < 5) {
        at = 0;
      } else if (where < 6) {
        at = ops.size();
      } else {
        at = Rand(ops.size() + 1);
      }
      auto fl = PlanFault(at < ops.size() ? &ops[at] : nullptr);
      if (fl) faults.emplace(at, *fl);
    }
  }
  for (size_t i = 0; i <= ops.size(); ++i) {
    std::optional<Fault> f;
    if (auto it = faults.find(i); it != faults.end()) f = it->second;
    if (f && (f->kind == Fault::Kind::kKillRank || f->kind == Fault::Kind::kKillCoordinator ||
              f->kind == Fault::Kind::kKillAll)) {
      ApplyKill(*f);
      f.reset();
    }
    if (i == ops.size()) break;
    Execute(ops[i], f);
    if (f && f->kind != Fault::Kind::kCrashPoint && f->recover_now) Recover();
  }
  // Kernel identities back to normal, then recovery and the closing checks.
  for (int r = 0; r < o_.ranks; ++r) {
    if (Alive(r) && model_->rank(r).kernel != model_->default_kernel()) {
      RankP(r).SetKernelIdentity(model_->default_kernel());
      model_->SetKernelIdentity(r, model_->default_kernel());
    }
  }
  Recover();
  CloseOpenTransactions();
  CheckAfterRecovery();
}

// ---------------------------------------------------------------------------------------------
// Recovery and checks

void Script::Recover() {
  std::vector<int> order;
  for (int r = -1; r < o_.ranks; ++r) order.push_back(r);
  std::shuffle(order.begin(), order.end(), rng_);
  for (int who : order) {
    if (who < 0 && !CoordAlive()) StartCoordinator(Chance(0.05));
    if (who >= 0 && !Alive(who)) StartRank(who, Chance(0.05));
  }
  ResolveUnknownDecisions();
  SyncResolution();
  CheckRanks();
}

void Script::ResolveUnknownDecisions() {
  if (!CoordAlive()) return;
  for (auto& [tx, d] : model_->decisions()) {
    if (d.kind != DKind::kUnknown) continue;
    auto v = Coord().CommittedVersion(tx);
    ModelDecision nd = d;
    if (v) {
      Expect(*v == d.version, "the recovered coordinator says " + tx + " committed as " + *v +
                                  " but the votes make version " + d.version);
      nd.kind = DKind::kCommit;
      ++rep_.committed;
    } else {
      nd.kind = DKind::kAbort;
      ++rep_.aborted;
    }
    Trace("in-doubt " + tx + " resolved by the recovered coordinator: " + (v ? "commit" : "abort"));
    const std::string id = tx;
    model_->RecordDecision(id, nd);
  }
}

void Script::SyncResolution() {
  for (int r = 0; r < o_.ranks; ++r) {
    if (!Alive(r) || !model_->rank(r).tx) continue;
    const std::string tx = model_->rank(r).tx->id;
    const RankStatus st = RankP(r).status();
    if (st.active_tx && *st.active_tx == tx) continue;  // still pending there
    auto it = model_->decisions().find(tx);
    DKind kind = DKind::kAbort;
    if (it != model_->decisions().end() && it->second.kind != DKind::kUnknown) {
      kind = it->second.kind;
    }
    if (model_->rank(r).tx->prepared == Prep::kYes) ++rep_.in_doubt_resolved;
    model_->ApplyDecision(r, tx, kind);
  }
}

void Script::CloseOpenTransactions() {
  if (!CoordAlive()) return;
  std::set<std::string> open;
  for (int r = 0; r < o_.ranks; ++r) {
    if (Alive(r) && model_->rank(r).tx) open.insert(model_->rank(r).tx->id);
  }
  for (const auto& tx : open) {
    ++step_;
    if (!commit_attempted_.count(tx) && Chance(0.5)) {
      // The sender goes on with a transaction the coordinator never saw before it restarted.
      Op c;
      c.kind = Op::Kind::kCommit;
      c.begin.tx = tx;
      DoCommit(c, std::nullopt);
    } else {
      DoAbort(tx, std::nullopt);
    }
    SyncResolution();
  }
}

void Script::CheckRanks() {
  for (int r = 0; r < o_.ranks; ++r) {
    if (!Alive(r)) continue;
    const std::string R = "rank " + std::to_string(r);
    const ModelRank& m = model_->rank(r);
    const RankStatus s = RankP(r).status();
    auto recomputed = RankP(r).RecomputeDigest();
    const std::string live = recomputed.ok() ? recomputed.value() : recomputed.status().ToString();
    Expect(live == model_->Digest(r), [&] {
      return StrCat(R, "'s live bytes (digest ", live,
                    ") are not what was written (model: ", model_->Digest(r), ")");
    });
    Expect(s.committed_tx.value_or("") == m.committed_tx, [&] {
      return R + " reports committed transaction '" + s.committed_tx.value_or("") +
             "'; the model says '" + m.committed_tx + "'";
    });
    if (!m.committed_tx.empty()) {
      const ModelDecision& d = model_->decisions()[m.committed_tx];
      Expect(s.version.value_or("") == d.version, [&] {
        return R + " reports version " + s.version.value_or("null") + " for " + m.committed_tx +
               "; committed was " + d.version;
      });
      if (!s.dirty) {
        // The heart of it: clean means the live bytes are the committed version.
        Expect(live == d.rank_digests[r], [&] {
          return StrCat(R, " is clean but its live bytes (digest ", live,
                        ") are not its part of committed version ", d.version, " (",
                        d.rank_digests[r], ")");
        });
      }
    }
    if (m.dirty != Tri::kUnknown) {
      Expect(s.dirty == (m.dirty == Tri::kYes), [&] {
        return R + " reports dirty=" + (s.dirty ? "true" : "false") + "; the model says " +
               std::string(TriName(m.dirty));
      });
    }
    Expect(s.loaded == m.loaded, [&] {
      return R + " reports loaded=" + (s.loaded ? "true" : "false") + "; the model says " +
             (m.loaded ? "true" : "false");
    });
    const bool model_doubt = m.tx && m.tx->prepared == Prep::kYes;
    if (!(m.tx && m.tx->prepared == Prep::kMaybe)) {
      Expect(s.in_doubt.has_value() == model_doubt, [&] {
        return R + (s.in_doubt ? " is in doubt" : " is not in doubt") + "; the model says " +
               (model_doubt ? "in doubt" : "not in doubt");
      });
      Expect(s.active_tx.value_or("") == (m.tx ? m.tx->id : std::string()), [&] {
        return R + " reports active transaction '" + s.active_tx.value_or("") +
               "'; the model says '" + (m.tx ? m.tx->id : std::string()) + "'";
      });
    }
    std::set<std::string> stale;
    for (uint32_t d = 0; d < m.stale.size(); ++d) {
      if (m.stale[d]) stale.insert(model_->manifest(r).derived()[d].name);
    }
    Expect(std::set<std::string>(s.stale_derived.begin(), s.stale_derived.end()) == stale, [&] {
      return R + " reports stale " + json(s.stale_derived).dump() + "; the model says " +
             json(stale).dump();
    });
    if (s.serving) {
      Expect(!s.dirty && s.loaded && s.version && !s.in_doubt && s.stale_derived.empty(),
             [&] { return R + " serves while dirty, unloaded, uncommitted, in doubt or stale"; });
      Expect(m.dirty != Tri::kYes && m.loaded && stale.empty(),
             [&] { return R + " serves although the model says it must not"; });
    }
    if (m.dirty != Tri::kUnknown) {
      const bool should = m.loaded && m.dirty == Tri::kNo && !m.committed_tx.empty() &&
                          !s.in_doubt && stale.empty();
      Expect(s.serving == should, [&] {
        return R + " serving=" + (s.serving ? "true" : "false") + "; the model says " +
               (should ? "true" : "false");
      });
    }
  }
}

void Script::CheckAfterRecovery() {
  Expect(CoordAlive(), "the coordinator is down after recovery");
  for (int r = 0; r < o_.ranks; ++r) {
    Expect(Alive(r), "rank " + std::to_string(r) + " is down after recovery");
    const RankStatus s = RankP(r).status();
    Expect(!s.in_doubt, "rank " + std::to_string(r) + " is still in doubt about " +
                            s.in_doubt.value_or("") + " after recovery");
    Expect(!s.active_tx, "rank " + std::to_string(r) + " still has transaction " +
                             s.active_tx.value_or("") +
                             " active after the coordinator aborted "
                             "or decided it");
    Expect(s.committed_tx.value_or("") == model_->last_committed(),
           "rank " + std::to_string(r) + " records '" + s.committed_tx.value_or("") +
               "' as its last commit; the coordinator last committed '" + model_->last_committed() +
               "' (a decided commit was lost)");
  }
  for (const auto& [tx, d] : model_->decisions()) {
    if (d.kind != DKind::kCommit) continue;
    auto v = Coord().CommittedVersion(tx);
    Expect(v && *v == d.version, "the coordinator no longer knows that " + tx + " committed as " +
                                     d.version + " (a decided commit was lost)");
  }
  CheckRanks();
}

void Script::FinalCheck() {
  // After the fault-free full commit every rank serves the same committed version.
  for (int r = 0; r < o_.ranks; ++r) {
    const RankStatus s = RankP(r).status();
    Expect(s.serving && !s.dirty && s.loaded,
           "rank " + std::to_string(r) + " does not serve after a fault-free full commit");
  }
  // Clean shutdown, then every journal must pass `wtx check`.
  cluster_->CloseCoordinator();
  for (int r = 0; r < o_.ranks; ++r) cluster_->CloseRank(r);
  std::vector<std::string> dirs = {dir_ + "/coordinator"};
  for (int r = 0; r < o_.ranks; ++r) dirs.push_back(dir_ + "/rank-" + std::to_string(r));
  for (const auto& d : dirs) {
    VerifyOptions vo;
    vo.strict = true;  // closed cleanly: not even a warning
    JournalCheckReport v = VerifyJournalDir(d, vo);
    ++rep_.journals_verified;
    Expect(v.status.ok(), "wtx check --strict fails on " + d +
                              " after recovery and a clean "
                              "shutdown: " +
                              v.status.ToString());
  }
}

void Script::Run() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_, ec);
  for (int r = 0; r < o_.ranks; ++r) {
    auto m = ParseManifest(TortureManifestJson(r, o_.ranks));
    if (!m.ok()) Fail("torture manifest invalid: " + m.status().ToString());
    manifests_.push_back(m.value());
  }
  model_ = std::make_unique<Model>(manifests_, "torture-kernel/bf16");
  InProcClusterOptions co;
  co.dir = dir_;
  co.manifests = manifests_;
  co.kernel_identity = model_->default_kernel();
  cluster_ = std::make_unique<InProcCluster>(std::move(co));
  // Injected I/O errors hit the script's own journal calls only (see FailNextWrites).
  for (int r = 0; r < o_.ranks; ++r) FsOf(r).RestrictInjectionToThread(std::this_thread::get_id());
  FsOf(-1).RestrictInjectionToThread(std::this_thread::get_id());
  for (int r = 0; r < o_.ranks; ++r) {
    if (Status s = cluster_->OpenRank(r); !s.ok()) {
      Fail("rank " + std::to_string(r) + ": " + s.ToString());
    }
  }
  if (Status s = cluster_->OpenCoordinator(); !s.ok()) Fail("coordinator: " + s.ToString());
  for (int t = 0; t < o_.transactions; ++t) RunTransaction(t, /*clean=*/false);
  RunTransaction(o_.transactions, /*clean=*/true);
  Expect(model_->last_committed() == "t" + std::to_string(o_.transactions),
         "the fault-free full transaction did not commit");
  FinalCheck();
}

std::string DefaultDir() {
  std::error_code ec;
  const std::string base =
      fs::is_directory("/dev/shm", ec) ? "/dev/shm" : fs::temp_directory_path().string();
  return base + "/wtx-torture-" + std::to_string(::getpid());
}

}  // namespace

json TortureReport::ToJson(const TortureOptions& o) const {
  json v = json::array();
  for (const auto& x : violations) {
    v.push_back({{"script", x.script},
                 {"step", x.step},
                 {"what", x.what},
                 {"reproduce", "wtx torture --seed " + std::to_string(o.seed) + " --start " +
                                   std::to_string(x.script) + " --iterations 1 --ranks " +
                                   std::to_string(o.ranks) + " --transactions " +
                                   std::to_string(o.transactions) + " --verbose"},
                 {"trace", x.trace},
                 {"journals", x.journals}});
  }
  return {{"seed", o.seed},
          {"start", o.start},
          {"ranks", o.ranks},
          {"scripts", scripts},
          {"steps", steps},
          {"transactions", transactions},
          {"committed", committed},
          {"aborted", aborted},
          {"noop", noop},
          {"begin_refused", begin_refused},
          {"crash_points", crash_points},
          {"crash_kinds", crash_kinds},
          {"recoveries", recoveries},
          {"in_doubt_resolved", in_doubt_resolved},
          {"io_errors_injected", io_errors_injected},
          {"checks", checks},
          {"journals_verified", journals_verified},
          {"violations", violations.size()},
          {"violation_details", v},
          {"seconds", seconds},
          {"crash_points_per_second", seconds > 0 ? crash_points / seconds : 0.0}};
}

Result<TortureReport> RunTorture(const TortureOptions& options) {
  if (options.ranks < 1 || options.ranks > 8) {
    return Status::InvalidArgument("--ranks must be between 1 and 8");
  }
  TortureReport rep;
  const std::string base = options.dir.empty() ? DefaultDir() : options.dir;
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) return Status::IOError("cannot create " + base + ": " + ec.message());
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  for (uint64_t i = options.start; i < options.start + options.iterations; ++i) {
    const std::string dir = base + "/s" + std::to_string(i);
    bool failed = false;
    {
      Script s(options, &rep, i, dir);
      try {
        s.Run();
      } catch (const ScriptFailed&) {
        failed = true;
      }
    }
    ++rep.scripts;
    if (!failed || !options.keep_failed) fs::remove_all(dir, ec);
    const auto now = std::chrono::steady_clock::now();
    if (options.log && now - last_report > std::chrono::seconds(10)) {
      last_report = now;
      options.log("torture: " + std::to_string(rep.scripts) + " scripts, " +
                  std::to_string(rep.crash_points) + " crash points, " +
                  std::to_string(rep.violations.size()) + " violations");
    }
  }
  if (options.dir.empty()) fs::remove_all(base, ec);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace wtx::torture
