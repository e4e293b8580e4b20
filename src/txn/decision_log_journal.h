// JournalDecisionLog: the embedded decision log, the default. The decisions live in the
// coordinator's own RocksDB journal (journal/journal.h) as DECISION records, acknowledged
// decisions as END records (docs/journal-format.md); nothing to set up, one writer by
// construction (the journal's lock), so its leadership is always held with epoch 0.
//
// With a shared decision log (etcd) the coordinator keeps the same journal as its local audit
// copy: every decision it wrote or learned, appended after the shared log returned it.
//
// Contract: DecisionLog's (include/wtx/decision_log.h). A commit decision is synced before
// Decide returns (the commit point of the embedded log) when opened with sync_commits; aborts
// and END records are not (presumed abort). A failed append closes the log: the journal and
// the memory may disagree, so every later call is E_CRASHED until the process reopens it.
// DecideIfLeaderless is refused (E_TX_ACTIVE): ranks of an embedded log ask the coordinator.
// Compact removes nothing (the journal keeps every decision).
//
// Thread-safety: every method is safe from any thread (one internal mutex).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "journal/journal.h"
#include "src/util/thread_annotations.h"
#include "wtx/decision_log.h"

namespace wtx {

class JournalDecisionLog : public DecisionLog {
 public:
  // Opens (creating) the coordinator journal in `dir`, verified as `wtx check` would (a
  // coordinator that lost its decisions must not start afresh and presume abort).
  static Result<std::unique_ptr<JournalDecisionLog>> Open(const std::string& dir,
                                                          const JournalOptions& options,
                                                          bool sync_commits);

  Result<LoggedDecision> Decide(const LoggedDecision& d) override;
  Result<LoggedDecision> DecideIfLeaderless(const LoggedDecision& d) override;
  Result<std::optional<LoggedDecision>> Read(const std::string& tx) override;
  Result<std::vector<LoggedDecision>> List() override;
  Result<std::vector<LoggedDecision>> ListUnended() override;
  Status MarkEnded(const std::string& tx) override;
  Result<size_t> Compact(size_t keep) override;
  Result<std::unique_ptr<Leadership>> NewLeadership(const std::string& holder,
                                                    std::chrono::milliseconds ttl) override;
  Result<std::optional<std::pair<int64_t, std::string>>> CurrentLeader() override;
  std::string Describe() const override { return "journal " + dir_; }
  // Audit: a refused begin (BEGIN_REFUSED, not synced; changes no state).
  Status LogRefusedBegin(const BeginRefusedRecord& r) EXCLUDES(mu_);

 private:
  JournalDecisionLog(std::string dir, bool sync_commits, Clock* clock)
      : dir_(std::move(dir)), sync_commits_(sync_commits), clock_(clock) {}
  Status CheckOpen() const REQUIRES(mu_);
  nlohmann::json State() const REQUIRES(mu_);
  // A failed append closes the log (see the file comment).
  Status Appended(Status s) REQUIRES(mu_);

  const std::string dir_;
  const bool sync_commits_;
  Clock* const clock_;
  mutable std::mutex mu_;
  std::unique_ptr<Journal> journal_ PT_GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  std::vector<LoggedDecision> order_ GUARDED_BY(mu_);
  std::map<std::string, size_t> index_ GUARDED_BY(mu_);  // tx -> position in order_
};

}  // namespace wtx
