// DecisionLog: the commit point of presumed-abort two-phase commit. Each transaction has at
// most one decision, written exactly once and read back by anyone: the coordinator that
// decided it, a standby coordinator that took over, or a rank in doubt whose coordinator is
// gone.
//
// Contract:
//  * Decide(d) writes `d` only if no decision for d.tx exists yet, and returns the decision
//    that holds for d.tx afterwards: `d` itself, or the one another writer (a second
//    coordinator, a rank terminating the transaction) wrote first. Once Decide has returned a
//    decision it is durable (embedded journal: synced; etcd: acknowledged by a quorum) and no
//    later Decide or Read for that tx returns anything else. Nothing may report `committed`
//    before Decide returned that commit.
//  * A fenced write (d.epoch > 0, written by a coordinator) succeeds only while the writer
//    still holds the leadership of that epoch; a deposed writer gets E_STALE_COORDINATOR
//    naming both epochs, and nothing is written. A rank's cooperative termination
//    (DecideIfLeaderless) writes an abort only if no coordinator currently leads.
//  * Read(tx) returns the decision, or nullopt when none was written; it never guesses. An
//    unreachable log (no quorum, every endpoint down, a TLS failure) is
//    E_DECISION_LOG_UNAVAILABLE naming the endpoint; a stored value that does not decode is
//    kJournalCorrupt naming the key.
//
// Thread-safety: every method is safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wtx/protocol.h"
#include "wtx/status.h"

namespace wtx {

// One decision as the log holds it.
struct LoggedDecision {
  std::string tx;
  Decision decision = Decision::kAbort;
  std::string version;  // commit: the committed version; empty otherwise
  std::string reason;
  std::string writer;  // who wrote it: "coordinator", "rank 3", ...
  int64_t epoch = 0;   // the writer's leader epoch; 0: not fenced (ranks, the embedded log)
  int64_t time_micros = 0;

  bool operator==(const LoggedDecision&) const = default;
};

class DecisionLog {
 public:
  virtual ~DecisionLog() = default;

  // See the contract above: the decision that holds for d.tx after the call.
  virtual Result<LoggedDecision> Decide(const LoggedDecision& d) = 0;
  // Cooperative termination by a rank in doubt: writes `d` (an abort) only if no decision
  // exists and no coordinator holds the leadership; returns the decision that holds, or
  // E_TX_ACTIVE ("a coordinator leads ...") when a leader may still decide.
  virtual Result<LoggedDecision> DecideIfLeaderless(const LoggedDecision& d) = 0;
  virtual Result<std::optional<LoggedDecision>> Read(const std::string& tx) = 0;
  // Every decision, in the order written.
  virtual Result<std::vector<LoggedDecision>> List() = 0;
  // "journal /path" or "etcd://host:port,.../prefix": for messages and `wtx status`.
  virtual std::string Describe() const = 0;
};

// Leadership among coordinators sharing one decision log. The embedded journal has one writer
// by construction (its lock), so its leadership is always held; etcd elects with a lease.
//
// Thread-safety: every method is safe from any thread.
class Leadership {
 public:
  virtual ~Leadership() = default;
  // Blocks until this process leads or `timeout` passes (E_TIMEOUT). Returns the epoch: a
  // number larger than every earlier leader's.
  virtual Result<int64_t> Acquire(std::chrono::milliseconds timeout) = 0;
  // Whether the leadership of epoch() is still held as far as this process knows (a lease
  // that was not renewed in time is not).
  virtual bool Leads() const = 0;
  virtual int64_t epoch() const = 0;
  // Gives the leadership up (a standby may take over at once).
  virtual void Resign() = 0;
};

}  // namespace wtx
