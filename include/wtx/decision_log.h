// DecisionLog: the commit point of presumed-abort two-phase commit. Each transaction has at
// most one decision, written exactly once and read back by anyone: the coordinator that
// decided it, a standby coordinator that took over, or a rank in doubt whose coordinator is
// gone.
//
// Contract:
//  * Decide(d) writes `d` only if no decision for d.tx exists yet, and returns the decision
//    that holds for d.tx afterwards: `d` itself, or the one another writer (a second
//    coordinator, a rank terminating the transaction) wrote first. Once Decide has returned a
//    commit it is durable (embedded journal: synced; etcd: acknowledged by a quorum), and no
//    later Decide or Read for that tx returns anything else; an embedded abort need not be
//    synced (presumed abort: a lost abort reads as none, which is answered as abort). Nothing
//    may report `committed` before Decide returned that commit.
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
#include "wtx/tls_files.h"

namespace wtx {

// One rank's vote as the decision records it (audit only; "yes", "no", "timeout", "crashed").
struct LoggedVote {
  int rank = -1;
  std::string vote;
  std::string error;  // the E_ code of a "no" vote; empty otherwise

  bool operator==(const LoggedVote&) const = default;
};

class Leadership;

// One decision as the log holds it.
struct LoggedDecision {
  std::string tx;
  Decision decision = Decision::kAbort;
  std::string version;  // commit: the committed version; empty otherwise
  // commit: the served digest (DecidedVersion); "" where equal to `version` (and in logs from
  // before two digests)
  std::string served_digest;
  std::string reason;
  std::string writer;  // who wrote it: "coordinator", "rank 3", ...
  int64_t epoch = 0;   // the writer's leader epoch; 0: not fenced (ranks, the embedded log)
  int64_t time_micros = 0;
  std::optional<int64_t> prepare_us;  // how long the votes took; absent without votes
  std::vector<LoggedVote> votes;      // the votes it was decided on; empty without votes
  // The lineage and step the transaction committed (docs/fleet.md); "" / nullopt where the
  // writer named none (aborts decided without a begin, logs written before lineages).
  std::string lineage;
  std::optional<int64_t> step;
  // Filled by Read/List/ListUnended (ignored by Decide): every rank has acknowledged the
  // decision (MarkEnded), so no rank will ask for it again.
  bool ended = false;

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
  // Decisions not yet marked ended, in the order written: what a coordinator taking over
  // re-sends.
  virtual Result<std::vector<LoggedDecision>> ListUnended() = 0;
  // Records that every rank has acknowledged the decision on `tx` (idempotent). REQUIRES: a
  // decision on `tx` exists.
  virtual Status MarkEnded(const std::string& tx) = 0;
  // Retention: removes ended decisions beyond the `keep` most recent ones (never one that is
  // not ended: a rank may still ask for it). Returns how many were removed.
  virtual Result<size_t> Compact(size_t keep) = 0;
  // A contender for the leadership of this log; `holder` names it in the leader record (e.g.
  // "coordinator 10.0.0.5:7070"). Nothing is acquired until Acquire.
  virtual Result<std::unique_ptr<Leadership>> NewLeadership(const std::string& holder,
                                                            std::chrono::milliseconds ttl) = 0;
  // The current leader's epoch and holder, or nullopt when none leads (its lease expired).
  virtual Result<std::optional<std::pair<int64_t, std::string>>> CurrentLeader() = 0;
  // "journal /path" or "etcd://host:port,.../prefix": for messages and `wtx status`.
  virtual std::string Describe() const = 0;
};

// Where a shared decision log lives.
struct DecisionLogOptions {
  // "etcd://HOST:PORT[,HOST:PORT...]/PREFIX": the etcd v3 JSON gateway of each member, tried
  // in turn (a member that fails is skipped until the others fail too). PREFIX: non-empty, no
  // trailing '/'; every key of this log lives under it (docs/protocol.md, "Decision log").
  std::string url;
  // All empty: plain HTTP. ca set: HTTPS verifying the members against `ca`; cert and key set
  // as well: with a client certificate.
  TlsFiles tls;
  // Each request to one member; a request that times out moves on to the next member.
  std::chrono::milliseconds request_timeout{2000};
  // true (coordinators): an empty PREFIX is marked as a decision log at open. false (ranks):
  // nothing is written at open, an unreachable log is not an error yet (it is needed only to
  // resolve without a coordinator), and a rank's cooperative abort is refused in a PREFIX no
  // coordinator ever opened (a wrong --decision-log must not abort what was committed
  // elsewhere).
  bool create = true;
};

// Opens the shared decision log `options.url` names. It checks that the log answers and that
// PREFIX is a wtx decision log (or empty, and then marks it as one; see `create`); an unreachable
// log is E_DECISION_LOG_UNAVAILABLE naming each endpoint, a foreign PREFIX kJournalCorrupt naming
// the key, a malformed url kInvalidArgument naming the part that is wrong.
Result<std::shared_ptr<DecisionLog>> OpenDecisionLog(const DecisionLogOptions& options);

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
  // Whether the leadership is over for good: resigned, or the lease was found gone (another
  // may lead now). Leads() can be false for a while without it, when renewals cannot reach the
  // log (an etcd election); such a leadership may lead again once a renewal succeeds.
  virtual bool Ended() const { return false; }
  virtual int64_t epoch() const = 0;
  // Gives the leadership up (a standby may take over at once).
  virtual void Resign() = 0;
};

}  // namespace wtx
