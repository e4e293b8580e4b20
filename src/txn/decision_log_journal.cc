#include "src/txn/decision_log_journal.h"

#include "src/txn/coordinator_records.h"
#include "src/txn/journal_check.h"

namespace wtx {

using nlohmann::json;

namespace {

LoggedDecision FromRecord(const DecisionRecord& r) {
  LoggedDecision d;
  d.tx = r.tx;
  d.decision = r.decision;
  d.version = r.version.value_or("");
  d.served_digest = r.served_digest.value_or("");
  d.reason = r.reason;
  d.writer = r.writer.value_or("coordinator");
  d.epoch = r.epoch.value_or(0);
  d.time_micros = r.ts;
  d.prepare_us = r.prepare_us;
  d.votes = r.votes;
  d.lineage = r.lineage;
  d.step = r.step;
  return d;
}

DecisionRecord ToRecord(const LoggedDecision& d) {
  DecisionRecord r;
  r.tx = d.tx;
  r.decision = d.decision;
  if (!d.version.empty()) r.version = d.version;
  if (const DecidedVersion v(d.version, d.served_digest); v.served() != v.version) {
    r.served_digest = v.served();
  }
  r.reason = d.reason;
  r.ts = d.time_micros;
  r.prepare_us = d.prepare_us;
  r.votes = d.votes;
  r.lineage = d.lineage;
  r.step = d.step;
  // The embedded log's own decisions stay as they always were; a copy of a shared log's
  // decision says who wrote it and under which epoch.
  if (!d.writer.empty() && d.writer != "coordinator") r.writer = d.writer;
  if (d.epoch != 0) r.epoch = d.epoch;
  return r;
}

// The embedded log's leadership: the journal's lock makes its coordinator the only writer.
class JournalLeadership : public Leadership {
 public:
  Result<int64_t> Acquire(std::chrono::milliseconds) override { return int64_t{0}; }
  bool Leads() const override { return true; }
  int64_t epoch() const override { return 0; }
  void Resign() override {}
};

}  // namespace

Result<std::unique_ptr<JournalDecisionLog>> JournalDecisionLog::Open(const std::string& dir,
                                                                     const JournalOptions& options,
                                                                     bool sync_commits) {
  std::unique_ptr<JournalDecisionLog> log(
      new JournalDecisionLog(dir, sync_commits, options.env.clock));
  auto j = OpenTrustedJournal(dir, options);
  if (!j.ok()) return j.status();
  std::lock_guard<std::mutex> l(log->mu_);
  log->journal_ = std::move(j).value();
  WTX_RETURN_IF_ERROR(log->journal_->ForEachRecord([&](const json& r) -> Status {
    WTX_ASSIGN_OR_RETURN(rec, DecodeCoordinatorRecord(r));
    if (const auto* d = std::get_if<DecisionRecord>(&rec)) {
      log->index_[d->tx] = log->order_.size();
      log->order_.push_back(FromRecord(*d));
    } else if (const auto* end = std::get_if<EndRecord>(&rec)) {
      auto it = log->index_.find(end->tx);
      if (it != log->index_.end()) log->order_[it->second].ended = true;
    }
    return Status::OK();
  }));
  if (log->journal_->state().is_null()) {
    WTX_RETURN_IF_ERROR(log->journal_->Append(
        Encode(CoordinatorCreateRecord{options.env.clock->NowMicros()}), log->State(), true));
  } else if (!log->journal_->unverified_at_open().empty()) {
    // The operator accepted a journal whose synced records cannot be verified: on the record.
    WTX_RETURN_IF_ERROR(
        log->journal_->Append(Encode(AcceptedUnverifiedRecord{log->journal_->unverified_at_open(),
                                                              options.env.clock->NowMicros()}),
                              log->State(), true));
  }
  return log;
}

Status JournalDecisionLog::CheckOpen() const {
  if (closed_) {
    return Status(ErrorCode::kCrashed, "the decision journal " + dir_ +
                                           " failed an earlier write; reopen it to recover");
  }
  return Status::OK();
}

json JournalDecisionLog::State() const {
  CoordinatorState s;
  s.decisions = order_.size();
  for (const auto& [tx, i] : index_) {
    if (!order_[i].ended) s.pending.push_back(tx);
  }
  return EncodeCoordinatorState(s);
}

Status JournalDecisionLog::Appended(Status s) {
  if (s.ok()) return s;
  closed_ = true;
  return Status(ErrorCode::kCrashed, "decision journal " + dir_ + " failed: " + s.ToString());
}

Result<LoggedDecision> JournalDecisionLog::Decide(const LoggedDecision& d) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckOpen());
  if (auto it = index_.find(d.tx); it != index_.end()) return order_[it->second];
  LoggedDecision stored = d;
  stored.ended = false;
  index_[d.tx] = order_.size();
  order_.push_back(stored);
  // The commit point of the embedded log: a commit is synced before anyone hears it.
  WTX_RETURN_IF_ERROR(Appended(journal_->Append(Encode(ToRecord(stored)), State(),
                                                sync_commits_ && d.decision == Decision::kCommit)));
  return stored;
}

Result<LoggedDecision> JournalDecisionLog::DecideIfLeaderless(const LoggedDecision& d) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckOpen());
  if (auto it = index_.find(d.tx); it != index_.end()) return order_[it->second];
  return Status(ErrorCode::kTxActive, "the coordinator of journal " + dir_ +
                                          " decides transaction '" + d.tx +
                                          "'; ask it (an embedded decision log has no other "
                                          "writer)");
}

Result<std::optional<LoggedDecision>> JournalDecisionLog::Read(const std::string& tx) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckOpen());
  auto it = index_.find(tx);
  if (it == index_.end()) return std::optional<LoggedDecision>();
  return std::optional<LoggedDecision>(order_[it->second]);
}

Result<std::vector<LoggedDecision>> JournalDecisionLog::List() {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckOpen());
  return order_;
}

Result<std::vector<LoggedDecision>> JournalDecisionLog::ListUnended() {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckOpen());
  std::vector<LoggedDecision> out;
  for (const LoggedDecision& d : order_) {
    if (!d.ended) out.push_back(d);
  }
  return out;
}

Status JournalDecisionLog::MarkEnded(const std::string& tx) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckOpen());
  auto it = index_.find(tx);
  if (it == index_.end()) {
    return Status(ErrorCode::kNoTx,
                  "decision journal " + dir_ + " holds no decision on '" + tx + "' to mark ended");
  }
  if (order_[it->second].ended) return Status::OK();
  order_[it->second].ended = true;
  return Appended(
      journal_->Append(Encode(EndRecord{tx, clock_->NowMicros()}), State(), /*sync=*/false));
}

Status JournalDecisionLog::LogRefusedBegin(const BeginRefusedRecord& r) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckOpen());
  return Appended(journal_->Append(Encode(r), State(), /*sync=*/false));
}

Result<size_t> JournalDecisionLog::Compact(size_t) { return size_t{0}; }

Result<std::unique_ptr<Leadership>> JournalDecisionLog::NewLeadership(const std::string&,
                                                                      std::chrono::milliseconds) {
  return std::unique_ptr<Leadership>(new JournalLeadership());
}

Result<std::optional<std::pair<int64_t, std::string>>> JournalDecisionLog::CurrentLeader() {
  return std::optional<std::pair<int64_t, std::string>>(
      std::make_pair(int64_t{0}, "the coordinator of journal " + dir_));
}

}  // namespace wtx
