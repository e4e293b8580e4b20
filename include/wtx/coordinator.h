// Coordinator: decides each transaction for all ranks with presumed-abort two-phase commit.
//
// Contract: Begin checks that every rank is reachable and agrees on the manifest fingerprint
// and kernel identity, then that every rank accepts the request, and only then begins it
// everywhere (a refused begin changes nothing). Every transaction commits a step of a lineage
// (BeginRequest::lineage/step): Begin refuses a step at or below one its decision log committed
// in that lineage (E_STEP_REGRESSION, as every rank does for its own), and gives a request
// without a step the one after the highest any rank or the log knows. Commit asks every rank to
// prepare; it commits only if every rank voted yes in time, and the DECISION record is synced
// before any rank hears it (the commit point). When no rank wrote anything the outcome is a noop.
// With CommitOptions::expect_version, a commit whose combined version differs aborts instead
// (E_VERSION_MISMATCH). Abort
// decisions need not be synced (presumed abort). After a restart, Recover() re-sends logged
// decisions that were not acknowledged, and aborts (logged, then told to the ranks) every
// transaction a rank holds active that no decision covers and that this process did not
// begin: a coordinator that died between begin and its decision leaves no rank holding it.
// QueryDecision answers abort for anything never decided.
//
// The commit point is the decision log (CoordinatorOptions::decision_log): the embedded
// journal, or a shared log such as etcd where every decision is written exactly once and
// read back by a standby coordinator or by ranks resolving without any coordinator.
//
// Concurrency: each phase (describe, check, begin, prepare, decide) is sent to every rank at
// once and awaited together (a phase costs the slowest answer or one prepare_timeout, not one
// per rank; see fan_out_threads). The internal mutex guards only the coordinator's memory and
// journal, never a network wait, so QueryDecision, decisions() and CommittedVersion() answer
// while a Begin or Commit is running. A QueryDecision for a transaction whose Commit is
// collecting votes waits (at most about prepare_timeout) for that decision instead of
// presuming abort; for a transaction nobody is deciding it presumes abort as before, and a
// Begin/Commit running on a transaction that was meanwhile aborted (by Abort or a presumed
// abort) ends in abort. Two calls on the same transaction id at once: the second is refused
// with E_TX_ACTIVE.
//
// Thread-safety: every method is safe from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wtx/decision_log.h"
#include "wtx/env.h"
#include "wtx/metrics.h"
#include "wtx/participant.h"
#include "wtx/protocol.h"
#include "wtx/status.h"
#include "wtx/transport.h"

namespace wtx {

struct CoordinatorOptions {
  std::string journal_dir;
  Env env;
  std::chrono::milliseconds prepare_timeout{5000};
  // Most rank calls in flight at once (threads of the fan-out pool, started at Open: ranks - 1,
  // at most this many); with
  // more silent ranks than this, a phase costs more than one timeout. Valid: 1..4096.
  int fan_out_threads = 256;
  // Start on a journal that has records but no valid sync watermark (a coordinator that lost
  // its last DECISION would presume abort for a commit), which Open otherwise refuses with
  // kJournalCorrupt. The operator's decision (`wtx coordinator --accept-unverified-journal`);
  // it is logged in the journal as an ACCEPTED_UNVERIFIED record.
  bool accept_unverified_journal = false;
  // The shared decision log (OpenDecisionLog in wtx/decision_log.h: etcd), the commit point
  // of every transaction. Null (the default): the embedded journal in journal_dir is the
  // decision log. With a shared log, journal_dir keeps this coordinator's local audit copy of
  // the decisions it wrote or learned, and Open first takes the leadership of the log: it
  // waits up to leader_wait for the current leader's lease to end (E_TIMEOUT naming the
  // leader). Every request to a rank then carries the leader epoch, and a deposed coordinator
  // can neither decide (the log refuses it) nor be obeyed (ranks that saw a newer epoch refuse
  // it): E_STALE_COORDINATOR.
  std::shared_ptr<DecisionLog> decision_log;
  // Optional: the leadership of decision_log, already acquired (a standby that must lead
  // before it listens for ranks). Open then uses it instead of acquiring one.
  std::shared_ptr<Leadership> leadership;
  std::chrono::milliseconds lease_ttl{2000};
  std::chrono::milliseconds leader_wait{5000};
  // Retention of a shared log: as decisions end, ended decisions beyond the newest
  // `retain_decisions` are removed from it (DecisionLog::Compact; never an unended one). 0: keep
  // every decision. The local audit journal keeps them all.
  size_t retain_decisions = 0;
  // Who this coordinator is, in the leader record and in the decisions it writes (default
  // "coordinator pid N on HOST").
  std::string holder;
  // Which ranks must hold the same manifest (Manifest::Fingerprint). Empty (the default): every
  // rank, as tensor-parallel and expert-parallel peers do. Otherwise one entry per rank: a rank
  // must agree with the first rank of its value, and ranks of different values may hold
  // different manifests (pipeline stages, each holding its own layers, in one transaction).
  // Begin refuses a rank that disagrees with kManifestMismatch naming both ranks. A size other
  // than the number of ranks: Open fails with kInvalidArgument.
  std::vector<int> manifest_groups;
  // Extra labels of this coordinator's metrics (wtx/metrics.h): "replica" and/or "fleet".
  // Anything else fails Open with kInvalidArgument naming the key.
  MetricLabels metric_labels;
};

struct RankError {
  int rank = -1;
  Status status;
};

struct BeginOutcome {
  Status status;                  // first error, if any
  std::vector<RankError> errors;  // every rank that refused
  // Begun (status OK): the lineage and step every rank began with (docs/fleet.md).
  std::string lineage;
  std::optional<int64_t> step;
};

struct VoteReport {
  int rank = -1;
  enum class Kind { kYes, kNo, kTimeout, kCrashed } kind = Kind::kTimeout;
  Vote vote;      // kYes / kNo
  Status status;  // kTimeout / kCrashed
};

// "yes", "no", "timeout", "crashed": the one name of each kind, in every JSON form of a vote
// report (control answers, scenario output, the coordinator's log, the Python module).
std::string_view VoteKindName(VoteReport::Kind kind);
std::optional<VoteReport::Kind> VoteKindFromName(std::string_view name);

struct CommitOutcome {
  Status status;                     // OK for committed and noop
  std::optional<Decision> decision;  // nullopt when the coordinator died before deciding
  bool decision_logged = false;
  std::string version;  // committed: the new version (the checkpoint version)
  // committed: its served digest, the live bytes after processing (equal to `version` where
  // nothing processes)
  std::string served_digest;
  // The lineage and step the transaction was begun with (BeginRequest; the step Begin chose
  // when the request named none); "" / nullopt when this coordinator did not begin it.
  std::string lineage;
  std::optional<int64_t> step;
  std::vector<VoteReport> votes;
  std::vector<int> unacknowledged;  // ranks that did not hear the decision
};

// What the sender asks of a commit beyond the ranks' votes.
struct CommitOptions {
  // The version the transaction must commit (expected_version.h computes it from what was
  // sent). When every rank voted yes but the combined version differs, the transaction aborts
  // with E_VERSION_MISMATCH naming the ranks whose digest differs from `expect_rank_digests`
  // (or, without them, every rank), before the decision is logged as a commit.
  std::optional<std::string> expect_version;
  // Optional: each rank's expected digest, in rank order (ExpectedVersion::rank_digests); lets
  // the mismatch name the ranks that differ. Ignored unless its size is the rank count.
  std::vector<std::string> expect_rank_digests;
  // The served digest the transaction must commit (a catch-up from a peer: the peer's live
  // bytes reproduced); a different one aborts with E_VERSION_MISMATCH, as expect_version.
  std::optional<std::string> expect_served_digest = std::nullopt;
};

struct DecisionEntry {
  std::string tx;
  Decision decision = Decision::kAbort;
  std::string version;
  std::string reason;
  int64_t time_micros = 0;
  std::string lineage;          // "" where none was named
  std::optional<int64_t> step;  // nullopt where the decision carries none
  // commit: the served digest ("" where equal to `version`; DecidedVersion)
  std::string served_digest = {};
};

class Coordinator : public DecisionOracle {
 public:
  static Result<std::unique_ptr<Coordinator>> Open(const CoordinatorOptions& options,
                                                   Transport* transport);
  ~Coordinator() override = default;

  virtual BeginOutcome Begin(const BeginRequest& req) = 0;
  virtual CommitOutcome Commit(const std::string& tx, const CommitOptions& opts = {}) = 0;
  // The sender gives up on `tx`: logs abort and tells every rank.
  virtual BeginOutcome Abort(const std::string& tx) = 0;
  // Re-sends logged decisions not yet acknowledged by every rank (with a shared log, also
  // those other writers logged), then aborts the active transactions nobody decided (see
  // above) on the ranks that answer.
  virtual Status Recover() = 0;
  virtual std::vector<DecisionEntry> decisions() const = 0;
  // The version committed by `tx`, if it committed.
  virtual std::optional<std::string> CommittedVersion(const std::string& tx) const = 0;
  // The leader epoch this coordinator decides under (0: the embedded decision log), and
  // whether it leads now (while not, every call that decides is E_STALE_COORDINATOR).
  virtual int64_t epoch() const = 0;
  virtual bool leads() const = 0;
  // Whether it will never lead again: its lease was found gone, it resigned, or the log
  // refused a decision as stale. leads() may be false for a while without it, when lease
  // renewals cannot reach the log (an etcd election); it leads again after the next renewal.
  virtual bool deposed() const = 0;
  // The decision log's Describe(): "journal DIR" or "etcd://.../PREFIX".
  virtual std::string decision_log() const = 0;
};

}  // namespace wtx
