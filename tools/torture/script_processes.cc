// Script's processes (script.h): restarting a rank or the coordinator (with an injected I/O
// error in the restart, sometimes), killing them with a power-loss mode, the kills a fault
// plans between steps, and reaping the processes an injected I/O error must have crashed.
// Every crashed journal is sampled with `wtx check`.
//
// Thread-safety: a Script runs on one thread.
#include "tools/torture/script.h"

#include "src/txn/journal_check.h"

namespace wtx::torture {

using DKind = ModelDecision::Kind;

namespace {

using DropMode = FaultInjectionFileSystem::DropMode;

}  // namespace

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
  // Recover also aborts every transaction a live rank holds active that no decision covers: the
  // coordinator that began it is gone (the E_TX_ACTIVE hang of issue 27).
  for (int r = 0; r < o_.ranks; ++r) {
    if (!Alive(r) || !model_->rank(r).tx) continue;
    const std::string tx = model_->rank(r).tx->id;
    if (model_->decisions().count(tx)) continue;  // decided, or in doubt: resolved below
    bool aborted = false;
    for (const DecisionEntry& e : Coord().decisions()) {
      aborted = aborted || (e.tx == tx && e.decision == Decision::kAbort);
    }
    Expect(aborted, "rank " + std::to_string(r) + " holds " + tx +
                        " active, which no decision covers, and the recovered coordinator did "
                        "not abort it");
    if (!aborted) continue;
    ModelDecision d;
    d.kind = DKind::kAbort;
    model_->RecordDecision(tx, d);
    ++rep_.aborted;
    Trace("orphan " + tx + " aborted by the recovered coordinator");
  }
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

}  // namespace wtx::torture
