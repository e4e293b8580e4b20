// CoordinatorImpl: presumed-abort two-phase commit over any Transport, each phase fanned out
// to every rank at once (src/txn/fan_out.h); the mutex guards memory and journal only.
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include "journal/journal.h"
#include "src/metrics/coordinator_metrics.h"
#include "src/txn/coordinator_records.h"
#include "src/txn/decision_log_journal.h"
#include "src/txn/fan_out.h"
#include "src/txn/journal_check.h"
#include "src/txn/test_hooks.h"
#include "src/util/thread_annotations.h"
#include "wtx/content_hash.h"
#include "wtx/coordinator.h"
#include "wtx/limits.h"

namespace wtx {

using nlohmann::json;

namespace {

class CoordinatorImpl : public Coordinator {
 public:
  CoordinatorImpl(const CoordinatorOptions& o, Transport* t, const CoordinatorHooks& hooks)
      : options_(o),
        metrics_(o.metric_labels),
        manifest_peer_(ManifestPeers(o.manifest_groups)),
        hooks_(hooks),
        transport_(t),
        fan_out_(o.fan_out_threads) {}  // threads start in Init (Prestart)
  ~CoordinatorImpl() override {
    if (ender_.joinable()) {
      {
        std::lock_guard<std::mutex> l(end_mu_);
        end_stop_ = true;
      }
      end_cv_.notify_all();
      ender_.join();  // writes the ENDs queued so far
    }
    // A clean close hands the leadership over at once (a crash lets the lease run out).
    if (leadership_) leadership_->Resign();
  }
  Status Init();

  BeginOutcome Begin(const BeginRequest& req) override;
  CommitOutcome Commit(const std::string& tx, const CommitOptions& opts) override;
  BeginOutcome Abort(const std::string& tx) override;
  Status Recover() override;
  std::vector<DecisionEntry> decisions() const override {
    std::lock_guard<std::mutex> l(mu_);
    return order_;
  }
  std::optional<std::string> CommittedVersion(const std::string& tx) const override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = decided_.find(tx);
    if (it == decided_.end() || order_[it->second].decision != Decision::kCommit) {
      return std::nullopt;
    }
    return order_[it->second].version;
  }
  Result<std::pair<Decision, DecidedVersion>> QueryDecision(const std::string& tx) override;
  int64_t epoch() const override { return epoch_; }
  bool leads() const override {
    std::lock_guard<std::mutex> l(mu_);
    return LeadsLocked();
  }
  bool deposed() const override {
    std::lock_guard<std::mutex> l(mu_);
    return deposed_ || (leadership_ && leadership_->Ended());
  }
  std::string decision_log() const override { return log_->Describe(); }

 private:
  // Marks `tx` busy (one Begin/Commit/Abort at a time per transaction id) for its lifetime.
  class BusyTx {
   public:
    BusyTx(CoordinatorImpl* c, std::string tx) : c_(c), tx_(std::move(tx)) {}
    ~BusyTx() {
      {
        std::lock_guard<std::mutex> l(c_->mu_);
        c_->busy_.erase(tx_);
      }
      c_->decided_cv_.notify_all();
    }

   private:
    CoordinatorImpl* c_;
    std::string tx_;
  };

  // During an etcd election the lease cannot be renewed and Leads() is false for a moment
  // (wtx/decision_log.h, Leadership::Ended): a call that needs the leadership waits for it, up
  // to one lease TTL, rather than failing; CheckAlive then decides.
  // REQUIRES: mu_ not held.
  void AwaitLeadership() const {
    if (!leadership_) return;
    const auto until = std::chrono::steady_clock::now() + options_.lease_ttl;
    while (!leadership_->Leads() && !leadership_->Ended() &&
           std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (crashed_ || deposed_) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // REQUIRES: mu_ held.
  bool LeadsLocked() const { return !deposed_ && (!leadership_ || leadership_->Leads()); }
  // REQUIRES: mu_ held.
  Status CheckAlive() const {
    if (crashed_) return Status(ErrorCode::kCrashed, "the coordinator has crashed");
    if (!LeadsLocked()) {
      return Status(ErrorCode::kStaleCoordinator,
                    "this coordinator no longer leads decision log " + log_->Describe() +
                        " (its epoch " + std::to_string(epoch_) + " ended" +
                        (deposed_reason_.empty() ? "" : ": " + deposed_reason_) + ")");
    }
    return Status::OK();
  }
  // REQUIRES: mu_ held.
  bool CrashAt(std::string_view point) {
    if (hooks_.crash_points && hooks_.crash_points->ShouldCrash(point)) {
      crashed_ = true;
      return true;
    }
    return false;
  }
  // The commit point: writes `e` to the decision log unless a decision on e.tx exists, and
  // returns the decision that holds (e, or the one another writer logged first), remembered
  // in memory and, with a shared log, copied to the local audit journal. A journal failure
  // kills the coordinator (memory and journal may disagree: E_CRASHED until a restart); a
  // deposed leader's write is refused (E_STALE_COORDINATOR, and so is every later call); an
  // unreachable log decides nothing (E_DECISION_LOG_UNAVAILABLE).
  // REQUIRES: mu_ not held (a shared log is a network call).
  Result<DecisionEntry> DecideOnce(const DecisionEntry& e, std::vector<LoggedVote> votes,
                                   std::optional<int64_t> prepare_us);
  // Remembers a decision the log holds. REQUIRES: mu_ held.
  void Remember(const LoggedDecision& d);
  // The rank whose manifest rank `r` must match: the first rank of its manifest group (rank 0
  // when the options set no groups).
  int ManifestPeer(int r) const { return manifest_peer_.empty() ? 0 : manifest_peer_[r]; }
  // For each rank, the first rank of the same value in `groups` (empty for no groups).
  static std::vector<int> ManifestPeers(const std::vector<int>& groups) {
    std::vector<int> peer(groups.size());
    std::unordered_map<int, int> first;
    for (size_t r = 0; r < groups.size(); ++r) {
      peer[r] = first.emplace(groups[r], static_cast<int>(r)).first->second;
    }
    return peer;
  }
  // E_VERSION_MISMATCH when `opts` expects a version the yes votes' digests do not combine to,
  // naming the ranks whose digest differs.
  static Status CheckExpectedVersion(const CommitOptions& opts,
                                     const std::vector<std::string>& digests,
                                     const std::vector<std::string>& served);
  // Records, once every rank acknowledged the decision on `tx`, that it has ended (nothing if
  // already ended). REQUIRES: mu_ not held.
  Status EndIfAcked(const std::string& tx, const std::vector<int>& unacked);
  // Sends the decision to every rank at once (or to `only` when given). REQUIRES: mu_ not held.
  std::vector<int> Deliver(const std::string& tx, Decision d, const DecidedVersion& version,
                           const std::vector<int>* only = nullptr);
  // Aborts the transactions ranks hold active that no decision covers and no call of this
  // process runs or began. REQUIRES: mu_ not held.
  Status AbortOrphans();
  // The logged decision on `tx`, if any. REQUIRES: mu_ held.
  const DecisionEntry* DecidedLocked(const std::string& tx) const {
    auto it = decided_.find(tx);
    return it == decided_.end() ? nullptr : &order_[it->second];
  }
  // Copies `d` to the local audit journal unless it holds it (a failure kills the
  // coordinator). REQUIRES: mu_ held.
  Status EnsureAudited(const LoggedDecision& d) {
    auto held = audit_->Read(d.tx);
    if (held.ok() && held.value()) return Status::OK();
    auto copied = held.ok() ? audit_->Decide(d) : Result<LoggedDecision>(held.status());
    if (copied.ok()) return Status::OK();
    crashed_ = true;
    return Status(ErrorCode::kCrashed, "local audit journal: " + copied.status().message());
  }
  // The local audit journal agrees with the shared log (see Init).
  Status CheckAuditAgainstLog(const std::vector<LoggedDecision>& shared);

  CoordinatorOptions options_;
  // The coordinator's series (docs/observability.md).
  metrics::CoordinatorMetrics metrics_;
  const std::vector<int> manifest_peer_;  // ManifestPeers(options_.manifest_groups)
  CoordinatorHooks hooks_;                // src/txn/test_hooks.h
  Transport* transport_;
  FanOut fan_out_;
  // The decision log: the shared one, or audit_ itself (embedded).
  std::shared_ptr<DecisionLog> log_;
  std::shared_ptr<JournalDecisionLog> audit_;  // the local journal (the embedded log)
  bool shared_ = false;                        // log_ is not audit_
  std::shared_ptr<Leadership> leadership_;     // with a shared log
  int64_t epoch_ = 0;
  std::string writer_ = "coordinator";
  // Retention (CoordinatorOptions::retain_decisions) runs once per this many ended decisions.
  static constexpr int kEndsPerCompaction = 16;
  // The ender thread (shared log only) writes the shared log's ENDs queued by EndIfAcked, and
  // runs retention.
  void EndInBackground();
  std::mutex end_mu_;
  std::condition_variable end_cv_;
  std::vector<std::string> to_end_ GUARDED_BY(end_mu_);
  bool end_stop_ GUARDED_BY(end_mu_) = false;
  std::thread ender_;
  mutable std::mutex mu_;
  std::condition_variable decided_cv_;  // a decision was logged or a busy tx finished
  bool crashed_ GUARDED_BY(mu_) = false;
  bool deposed_ GUARDED_BY(mu_) = false;
  std::string deposed_reason_ GUARDED_BY(mu_);
  std::vector<DecisionEntry> order_ GUARDED_BY(mu_);
  std::map<std::string, size_t> decided_ GUARDED_BY(mu_);  // tx -> index in order_
  // Decided, not acknowledged by every rank.
  std::map<std::string, bool> pending_ GUARDED_BY(mu_);
  std::set<std::string> busy_ GUARDED_BY(mu_);        // a Begin/Commit/Abort is running on these
  std::set<std::string> collecting_ GUARDED_BY(mu_);  // a Commit is collecting votes on these
  // Begun by this process, not yet decided: the lineage and step each was begun with.
  std::map<std::string, std::pair<std::string, int64_t>> begun_ GUARDED_BY(mu_);
  // The step this transaction begins with: req.step, or one past the highest step any rank (of
  // the same lineage) or the decision log committed; E_STEP_REGRESSION for a req.step at or
  // below one the log committed, E_LINEAGE_MISMATCH for ranks of different lineages.
  Result<std::pair<std::string, int64_t>> ChooseStep(const BeginRequest& req,
                                                     const std::vector<RankDescription>& desc);
  // Counts Begin calls started; AbortOrphans acts only on a view no Begin raced with.
  uint64_t begins_started_ GUARDED_BY(mu_) = 0;
};

// wtx_aborts_total's code of an abort: the first no vote's error for E_VOTE_NO, the reason when
// it is a code, else what decided it.
std::string AbortCode(const LoggedDecision& d) {
  if (d.reason == "E_VOTE_NO") {
    for (const LoggedVote& v : d.votes) {
      if (v.vote == "no" && !v.error.empty()) return v.error;
    }
  }
  if (d.reason.rfind("E_", 0) == 0) return d.reason;
  if (d.reason.rfind("presumed abort", 0) == 0) return "presumed_abort";
  if (d.reason.rfind("aborted by the sender", 0) == 0) return "sender_abort";
  return "other";
}

DecidedVersion DecidedOf(const DecisionEntry& e) { return {e.version, e.served_digest}; }

DecisionEntry EntryOf(const LoggedDecision& d) {
  return DecisionEntry{d.tx,          d.decision, d.version, d.reason,
                       d.time_micros, d.lineage,  d.step,    d.served_digest};
}

std::string DefaultHolder() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  return "coordinator pid " + std::to_string(getpid()) + " on " + std::string(host);
}

Status CoordinatorImpl::Init() {
  WTX_RETURN_IF_ERROR(CheckMetricLabels(options_.metric_labels));
  JournalOptions jo;
  jo.env = options_.env;
  jo.identity = {"coordinator", -1};
  jo.accept_unverified = options_.accept_unverified_journal;
  shared_ = options_.decision_log != nullptr;
  // Verified first (as `wtx check` would): a coordinator that lost its decisions must not start
  // afresh and presume abort for transactions it committed. With a shared log the journal is
  // the audit copy, so a commit is not synced there (the shared log's quorum write is the
  // commit point).
  auto audit = JournalDecisionLog::Open(options_.journal_dir, jo, /*sync_commits=*/!shared_);
  if (!audit.ok()) return audit.status();
  audit_ = std::move(audit).value();
  std::vector<LoggedDecision> known;
  if (!shared_) {
    log_ = audit_;
    WTX_ASSIGN_OR_RETURN(all, audit_->List());
    known = std::move(all);
  } else {
    log_ = options_.decision_log;
    writer_ = options_.holder.empty() ? DefaultHolder() : options_.holder;
    // Lead first, then read: the decisions seen below include every one an earlier leader
    // wrote (it can write no more once its lease ended).
    if (options_.leadership) {
      leadership_ = options_.leadership;
      if (!leadership_->Leads()) {
        return Status(ErrorCode::kStaleCoordinator,
                      "the leadership given to the coordinator (epoch " +
                          std::to_string(leadership_->epoch()) + ") is not held");
      }
      epoch_ = leadership_->epoch();
    } else {
      WTX_ASSIGN_OR_RETURN(lead, log_->NewLeadership(writer_, options_.lease_ttl));
      leadership_ = std::move(lead);
      const auto t0 = std::chrono::steady_clock::now();
      WTX_ASSIGN_OR_RETURN(epoch, leadership_->Acquire(options_.leader_wait));
      metrics_.DecisionLogOp("leadership", metrics::SecondsSince(t0));
      epoch_ = epoch;
    }
    metrics_.LeaderChange();
    const auto t0 = std::chrono::steady_clock::now();
    WTX_ASSIGN_OR_RETURN(all, log_->List());
    metrics_.DecisionLogOp("list", metrics::SecondsSince(t0));
    WTX_RETURN_IF_ERROR(CheckAuditAgainstLog(all));
    known = std::move(all);
  }
  transport_->SetLeaderEpoch(epoch_);
  // Every phase calls all ranks at once, the caller taking one: the threads for the others are
  // started now rather than by the first Begin (its tail latency).
  fan_out_.Prestart(transport_->num_ranks() - 1);
  if (shared_) ender_ = std::thread([this] { EndInBackground(); });
  std::lock_guard<std::mutex> l(mu_);
  for (const LoggedDecision& d : known) {
    // An unended decision of another writer will be re-sent and ended here: audited first.
    if (shared_ && !d.ended) WTX_RETURN_IF_ERROR(EnsureAudited(d));
    Remember(d);
  }
  return Status::OK();
}

Status CoordinatorImpl::CheckAuditAgainstLog(const std::vector<LoggedDecision>& shared) {
  std::map<std::string, const LoggedDecision*> by_tx;
  for (const LoggedDecision& d : shared) by_tx[d.tx] = &d;
  WTX_ASSIGN_OR_RETURN(local, audit_->List());
  for (const LoggedDecision& d : local) {
    auto it = by_tx.find(d.tx);
    if (it == by_tx.end()) {
      // An ended decision may have been compacted away (retention); one that is not ended
      // must be there: this is the wrong log (cluster or prefix), or it lost a decision.
      if (d.ended) continue;
      return Status(ErrorCode::kJournalCorrupt,
                    "the local audit journal " + options_.journal_dir + " holds decision " +
                        std::string(DecisionName(d.decision)) + " on transaction '" + d.tx +
                        "' that decision log " + log_->Describe() +
                        " does not hold (the wrong etcd cluster or prefix?)");
    }
    if (it->second->decision != d.decision || it->second->version != d.version) {
      return Status(ErrorCode::kJournalCorrupt,
                    "transaction '" + d.tx + "': the local audit journal " + options_.journal_dir +
                        " holds " + std::string(DecisionName(d.decision)) + " but decision log " +
                        log_->Describe() + " holds " +
                        std::string(DecisionName(it->second->decision)));
    }
  }
  return Status::OK();
}

void CoordinatorImpl::Remember(const LoggedDecision& d) {
  begun_.erase(d.tx);
  if (decided_.count(d.tx)) {
    if (d.ended) pending_.erase(d.tx);
    return;
  }
  decided_[d.tx] = order_.size();
  order_.push_back(EntryOf(d));
  if (!d.ended) pending_[d.tx] = true;
  decided_cv_.notify_all();
}

Result<DecisionEntry> CoordinatorImpl::DecideOnce(const DecisionEntry& e,
                                                  std::vector<LoggedVote> votes,
                                                  std::optional<int64_t> prepare_us) {
  LoggedDecision d;
  d.tx = e.tx;
  d.decision = e.decision;
  d.version = e.version;
  d.served_digest = e.served_digest;
  d.reason = e.reason;
  d.writer = writer_;
  d.epoch = epoch_;
  d.time_micros = e.time_micros;
  d.prepare_us = prepare_us;
  d.votes = std::move(votes);
  d.lineage = e.lineage;
  d.step = e.step;
  const auto t0 = std::chrono::steady_clock::now();
  auto won = log_->Decide(d);
  const double seconds = metrics::SecondsSince(t0);
  metrics_.DecisionLogOp("decide", seconds);
  if (won.ok()) {
    metrics_.Phase("decision", seconds);
    if (!shared_) metrics_.JournalSync(seconds);  // the embedded log syncs its DECISION
    const bool ours = won->decision == d.decision && won->version == d.version &&
                      won->reason == d.reason && won->time_micros == d.time_micros;
    if (ours) metrics_.Decided(DecisionOutcomeName(d.decision), AbortCode(d));
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!won.ok()) {
    if (won.status().code() == ErrorCode::kStaleCoordinator) {
      deposed_ = true;
      deposed_reason_ = won.status().message();
    } else if (won.status().code() == ErrorCode::kCrashed) {
      crashed_ = true;
    }
    return won.status();
  }
  if (shared_) {
    // The audit copy follows the shared log; it is not the commit point.
    auto copied = audit_->Decide(won.value());
    if (!copied.ok()) {
      crashed_ = true;
      return Status(ErrorCode::kCrashed, copied.status().message());
    }
  }
  Remember(won.value());
  return EntryOf(won.value());
}

Status CoordinatorImpl::EndIfAcked(const std::string& tx, const std::vector<int>& unacked) {
  if (!unacked.empty()) return Status::OK();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!pending_.count(tx) || crashed_) return Status::OK();
    pending_.erase(tx);
  }
  Status s = audit_->MarkEnded(tx);
  if (!s.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    crashed_ = true;
    return Status(ErrorCode::kCrashed, s.message());
  }
  // Best effort: a decision the shared log still lists unended is re-sent by the next leader,
  // which the ranks acknowledge again.
  if (shared_) {
    // Off the commit path: the shared END is bookkeeping (a decision left unended is re-sent
    // by the next leader and acknowledged again), so a commit costs one quorum write.
    {
      std::lock_guard<std::mutex> l(end_mu_);
      to_end_.push_back(tx);
    }
    end_cv_.notify_one();
  }
  return Status::OK();
}

void CoordinatorImpl::EndInBackground() {
  int ends_since_compact = 0;
  std::unique_lock<std::mutex> l(end_mu_);
  for (;;) {
    end_cv_.wait(l, [&] { return end_stop_ || !to_end_.empty(); });
    if (to_end_.empty()) return;  // stopping, nothing left
    std::vector<std::string> batch;
    batch.swap(to_end_);
    l.unlock();
    for (const std::string& tx : batch) {
      const auto t0 = std::chrono::steady_clock::now();
      if (log_->MarkEnded(tx).ok()) ++ends_since_compact;
      metrics_.DecisionLogOp("end", metrics::SecondsSince(t0));
    }
    if (options_.retain_decisions > 0 && ends_since_compact >= kEndsPerCompaction) {
      ends_since_compact = 0;
      log_->Compact(options_.retain_decisions).ok();  // retried after the next ends
    }
    l.lock();
  }
}

std::vector<int> CoordinatorImpl::Deliver(const std::string& tx, Decision d,
                                          const DecidedVersion& version,
                                          const std::vector<int>* only) {
  const int n = transport_->num_ranks();
  std::vector<char> acked(n, 0);
  std::vector<char> asked(n, only ? 0 : 1);
  if (only) {
    for (int r : *only) asked[r] = 1;
  }
  fan_out_.Run(n, [&](int r) {
    if (!asked[r]) {
      acked[r] = 1;
      return;
    }
    Status s = transport_->endpoint(r)->Decide(tx, d, version);
    // A rank that never began `tx` (E_NO_TX) has nothing to learn.
    acked[r] = s.ok() || s.code() == ErrorCode::kNoTx;
  });
  std::vector<int> unacked;
  for (int r = 0; r < n; ++r) {
    if (!acked[r]) unacked.push_back(r);
  }
  return unacked;
}

BeginOutcome CoordinatorImpl::Begin(const BeginRequest& req) {
  BeginOutcome out;
  AwaitLeadership();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Status s = CheckAlive(); !s.ok()) {
      out.status = s;
      return out;
    }
    if (decided_.count(req.tx)) {
      out.status =
          Status(ErrorCode::kTxActive, "transaction id '" + req.tx + "' was already decided");
      return out;
    }
    if (!busy_.insert(req.tx).second) {
      out.status = Status(ErrorCode::kTxActive,
                          "transaction id '" + req.tx + "' is being begun or decided right now");
      return out;
    }
    ++begins_started_;
  }
  BusyTx busy(this, req.tx);
  const int n = transport_->num_ranks();
  // Every phase records per-rank results in its own slot; errors are listed in rank order.
  std::vector<Status> st(n);
  auto collect = [&] {
    for (int r = 0; r < n; ++r) {
      if (!st[r].ok()) out.errors.push_back({r, st[r]});
    }
  };
  // Describe and CheckBegin go out in one round (CheckBegin only reads): a rank's check is
  // reported only when every rank answered Describe with the same manifest and kernel, exactly
  // as if the checks had been sent after the comparison.
  std::vector<RankDescription> desc(n);
  std::vector<Status> check(n);
  std::vector<std::vector<bool>> holds(n);
  fan_out_.Run(n, [&](int r) {
    ParticipantEndpoint* ep = transport_->endpoint(r);
    auto d = ep->Describe();
    if (!d.ok()) {
      st[r] = d.status();
      return;
    }
    desc[r] = std::move(d).value();
    check[r] = ep->CheckBegin(req, &holds[r]);
  });
  collect();
  if (out.errors.empty()) {
    for (int r = 1; r < n; ++r) {
      const int peer = ManifestPeer(r);
      if (desc[r].fingerprint != desc[peer].fingerprint) {
        out.errors.push_back(
            {r, Status(ErrorCode::kManifestMismatch,
                       "rank " + std::to_string(r) + " manifest fingerprint " +
                           desc[r].fingerprint + " differs from rank " + std::to_string(peer) +
                           "'s " + desc[peer].fingerprint)});
      } else if (desc[r].kernel_identity != desc[0].kernel_identity) {
        out.errors.push_back({r, Status(ErrorCode::kManifestMismatch,
                                        "rank " + std::to_string(r) + " kernel identity '" +
                                            desc[r].kernel_identity + "' differs from rank 0's '" +
                                            desc[0].kernel_identity + "'")});
      }
    }
  }
  BeginRequest begun = req;
  if (out.errors.empty()) {
    auto chosen = ChooseStep(req, desc);
    if (!chosen.ok()) {
      out.errors.push_back({-1, chosen.status()});
    } else {
      begun.lineage = chosen->first;
      begun.step = chosen->second;
    }
  }
  if (out.errors.empty()) {
    st = std::move(check);
    collect();
    if (out.errors.empty() && req.kind == TxKind::kDelta) {
      std::vector<bool> held(req.sources.size(), false);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < holds[r].size() && i < held.size(); ++i) {
          held[i] = held[i] || holds[r][i];
        }
      }
      for (size_t i = 0; i < held.size(); ++i) {
        if (!held[i]) {
          out.errors.push_back(
              {-1, Status(ErrorCode::kUnknownParam,
                          "delta source '" + req.sources[i] + "' is held by no rank")});
        }
      }
    }
  }
  if (out.errors.empty()) {
    fan_out_.Run(n, [&](int r) { st[r] = transport_->endpoint(r)->Begin(begun); });
    collect();
    bool aborted_meanwhile = false;
    if (out.errors.empty()) {
      std::lock_guard<std::mutex> l(mu_);
      // An in-doubt query or Abort presumed abort while the ranks were beginning.
      aborted_meanwhile = decided_.count(req.tx) > 0;
      if (aborted_meanwhile) {
        out.errors.push_back({-1, Status(ErrorCode::kNoTx, "transaction '" + req.tx +
                                                               "' was aborted while it began")});
      } else {
        // Ours: recovery must not take it for an orphan.
        begun_[req.tx] = {begun.lineage, *begun.step};
        out.lineage = begun.lineage;
        out.step = begun.step;
      }
    }
    if (!out.errors.empty()) {
      // Some ranks began, others refused (or the transaction was aborted meanwhile): abort
      // it where it began, so a refused begin changes nothing.
      fan_out_.Run(n, [&](int r) {
        if (st[r].ok() || aborted_meanwhile) {
          transport_->endpoint(r)->Decide(req.tx, Decision::kAbort, {}).ok();
        }
      });
    }
  }
  if (!out.errors.empty()) {
    out.status = out.errors.front().status;
    // On the record (wtx log / show): the attempt, and every refusal with its reason.
    BeginRefusedRecord rec;
    rec.tx = req.tx;
    rec.kind = req.kind;
    for (const RankError& e : out.errors) {
      rec.ranks.push_back({e.rank, std::string(e.status.code_name()), e.status.message()});
    }
    rec.ts = options_.env.clock->NowMicros();
    // The refusal's record is an audit record like any other: a journal write that fails is
    // fail-stop (docs/crash-safety.md), so the coordinator stops here instead of going on with
    // a journal it cannot trust.
    Status logged = audit_->LogRefusedBegin(rec);
    if (!logged.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      crashed_ = true;
      out.status = Status(ErrorCode::kCrashed, "local audit journal: " + logged.message() +
                                                   " (recording the refused begin of '" + req.tx +
                                                   "': " + out.status.ToString() + ")");
    }
  }
  return out;
}

CommitOutcome CoordinatorImpl::Commit(const std::string& tx, const CommitOptions& opts) {
  CommitOutcome out;
  AwaitLeadership();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Status s = CheckAlive(); !s.ok()) {
      out.status = s;
      return out;
    }
    if (const DecisionEntry* e = DecidedLocked(tx)) {
      out.status = Status(ErrorCode::kNoTx, "transaction '" + tx + "' was already decided (" +
                                                std::string(DecisionName(e->decision)) + ")");
      return out;
    }
    if (!busy_.insert(tx).second) {
      out.status = Status(ErrorCode::kTxActive,
                          "transaction '" + tx + "' is being begun or decided right now");
      return out;
    }
    collecting_.insert(tx);
  }
  BusyTx busy(this, tx);
  // Until the decision is logged (or cannot be), an in-doubt query on `tx` waits for it rather
  // than presume abort under it.
  struct Collecting {
    CoordinatorImpl* c;
    const std::string& tx;
    ~Collecting() {
      {
        std::lock_guard<std::mutex> l(c->mu_);
        c->collecting_.erase(tx);
      }
      c->decided_cv_.notify_all();
    }
  } collecting{this, tx};
  const int64_t t0 = options_.env.clock->NowMicros();
  const int n = transport_->num_ranks();
  out.votes.resize(n);
  // One deadline for the phase: every rank is asked at once with the same timeout.
  fan_out_.Run(n, [&](int r) {
    VoteReport& rep = out.votes[r];
    rep.rank = r;
    auto v = transport_->endpoint(r)->Prepare(tx, options_.prepare_timeout);
    if (!v.ok()) {
      rep.kind = v.status().code() == ErrorCode::kTimeout ? VoteReport::Kind::kTimeout
                                                          : VoteReport::Kind::kCrashed;
      rep.status = v.status();
    } else {
      rep.vote = v.value();
      rep.kind = rep.vote.yes ? VoteReport::Kind::kYes : VoteReport::Kind::kNo;
    }
  });
  const int64_t t1 = options_.env.clock->NowMicros();
  metrics_.Phase("vote", static_cast<double>(t1 - t0) / 1e6);
  bool any_no = false, any_undeclared = false, any_missing = false, any_wrote = false,
       all_unknown = true;
  std::vector<std::string> digests(n), served(n);
  for (const VoteReport& rep : out.votes) {
    if (rep.kind == VoteReport::Kind::kTimeout || rep.kind == VoteReport::Kind::kCrashed) {
      any_missing = true;
      all_unknown = false;
    } else {
      any_no = any_no || !rep.vote.yes;
      // Undeclared changes (or storage the engine moved) make a would-be noop an abort: the
      // rank's bytes are not what the committed version says.
      for (ErrorCode e : rep.vote.errors) {
        any_undeclared =
            any_undeclared || e == ErrorCode::kUndeclaredWrite || e == ErrorCode::kStorageMoved;
      }
      any_wrote = any_wrote || rep.vote.wrote;
      all_unknown = all_unknown && rep.vote.error == ErrorCode::kNoTx;
      digests[rep.rank] = rep.vote.digest;
      // A vote from wtx before two digests carries one: the served bytes are the version's.
      served[rep.rank] = rep.vote.served();
    }
  }
  DecisionEntry e;
  e.tx = tx;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = begun_.find(tx); it != begun_.end()) {
      e.lineage = it->second.first;
      e.step = it->second.second;
    }
  }
  out.lineage = e.lineage;
  out.step = e.step;
  Status expected = Status::OK();
  if (!any_no && !any_missing) expected = CheckExpectedVersion(opts, digests, served);
  if (!any_missing && !any_wrote && !any_undeclared && expected.ok()) {
    e.decision = Decision::kNoop;
    e.reason = "nothing was written";
  } else if (any_no) {
    e.decision = Decision::kAbort;
    out.status = Status(ErrorCode::kVoteNo, "a rank voted no");
    e.reason = "E_VOTE_NO";
  } else if (any_missing) {
    e.decision = Decision::kAbort;
    out.status = Status(ErrorCode::kTimeout, "a rank did not vote in time");
    e.reason = "E_TIMEOUT";
  } else if (!expected.ok()) {
    // Every rank voted yes, but the bytes are not what the sender sent: abort before any
    // commit decision exists.
    e.decision = Decision::kAbort;
    e.reason = "E_VERSION_MISMATCH";
    out.status = expected;
  } else {
    e.decision = Decision::kCommit;
    e.version = CombineRankDigests(digests);
    std::string served_version = CombineRankDigests(served);
    if (served_version != e.version) e.served_digest = std::move(served_version);
  }
  std::vector<LoggedVote> votes;
  AwaitLeadership();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Status s = CheckAlive(); !s.ok()) {
      out.status = s;
      return out;
    }
    if (DecidedLocked(tx) == nullptr && all_unknown) {
      out.status = Status(ErrorCode::kNoTx, "no rank has transaction '" + tx + "' active");
      return out;
    }
    if (DecidedLocked(tx) == nullptr && CrashAt("before_decision_logged")) {
      out.status =
          Status(ErrorCode::kCrashed, "the coordinator crashed before logging the decision");
      return out;
    }
    e.time_micros = options_.env.clock->NowMicros();
    for (const auto& v : out.votes) {
      LoggedVote lv;
      lv.rank = v.rank;
      lv.vote = std::string(VoteKindName(v.kind));
      if (v.kind == VoteReport::Kind::kNo) lv.error = std::string(ErrorCodeName(v.vote.error));
      votes.push_back(std::move(lv));
    }
  }
  // The commit point: the decision log holds the decision before any rank hears it. Aborted
  // while the votes were collected (Abort, a presumed abort, a rank's cooperative abort on a
  // shared log): that logged decision stands, and the log returns it.
  auto won = DecideOnce(e, std::move(votes), t1 - t0);
  if (!won.ok()) {
    out.status = won.status();
    return out;
  }
  const bool ours = won->decision == e.decision && won->version == e.version &&
                    won->reason == e.reason && won->time_micros == e.time_micros;
  if (!ours) {
    e = won.value();
    out.lineage = e.lineage;
    out.step = e.step;
    out.status = Status(ErrorCode::kNoTx, "transaction '" + tx +
                                              "' was decided while its votes were collected (" +
                                              std::string(DecisionName(e.decision)) +
                                              (e.reason.empty() ? "" : ": " + e.reason) + ")");
  }
  out.decision = e.decision;
  out.decision_logged = true;
  out.version = e.decision == Decision::kCommit ? e.version : "";
  out.served_digest = e.decision == Decision::kCommit ? DecidedOf(e).served() : "";
  {
    std::lock_guard<std::mutex> l(mu_);
    if (CrashAt("after_decision_logged")) {
      out.status =
          Status(ErrorCode::kCrashed, "the coordinator crashed after logging the decision");
      for (int r = 0; r < n; ++r) out.unacknowledged.push_back(r);
      return out;
    }
  }
  out.unacknowledged = Deliver(tx, e.decision, DecidedOf(e));
  EndIfAcked(tx, out.unacknowledged).ok();
  return out;
}

Result<std::pair<std::string, int64_t>> CoordinatorImpl::ChooseStep(
    const BeginRequest& req, const std::vector<RankDescription>& desc) {
  // The lineage: the request's, else the one the ranks name (every rank that names one agrees).
  std::string lineage = req.lineage;
  int named_by = -1;
  for (const RankDescription& d : desc) {
    if (d.lineage.empty()) continue;
    if (!req.lineage.empty()) continue;  // each rank checks the request's against its own
    if (named_by < 0) {
      lineage = d.lineage;
      named_by = d.rank;
    } else if (d.lineage != lineage) {
      return Status(ErrorCode::kLineageMismatch,
                    "rank " + std::to_string(d.rank) + " belongs to lineage '" + d.lineage +
                        "', rank " + std::to_string(named_by) + " to '" + lineage + "'");
    }
  }
  // The highest step committed in the lineage: by any rank that belongs to it, and in the log.
  std::optional<int64_t> highest;
  auto consider = [&](int64_t step) {
    if (!highest || step > *highest) highest = step;
  };
  for (const RankDescription& d : desc) {
    if (d.step && (d.lineage.empty() || d.lineage == lineage)) consider(*d.step);
  }
  std::optional<int64_t> logged;
  std::string logged_tx;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const DecisionEntry& e : order_) {
      if (e.decision == Decision::kAbort || !e.step || e.lineage != lineage) continue;
      if (!logged || *e.step > *logged) {
        logged = e.step;
        logged_tx = e.tx;
      }
    }
  }
  const std::string named = lineage.empty() ? "the unnamed lineage" : "lineage '" + lineage + "'";
  if (req.step && logged && *req.step <= *logged) {
    return Status(ErrorCode::kStepRegression,
                  "step " + std::to_string(*req.step) + " is at or below step " +
                      std::to_string(*logged) + " of " + named + ", which the decision log (" +
                      log_->Describe() + ") committed in transaction '" + logged_tx +
                      "'; a step never goes back (start a new lineage to reuse it)");
  }
  if (logged) consider(*logged);
  if (req.step) return std::make_pair(lineage, *req.step);
  if (highest == INT64_MAX) {
    return Status(ErrorCode::kStepRegression,
                  "no step follows step " + std::to_string(*highest) + " of " + named);
  }
  return std::make_pair(lineage, highest ? *highest + 1 : int64_t{0});
}

Status CoordinatorImpl::CheckExpectedVersion(const CommitOptions& opts,
                                             const std::vector<std::string>& digests,
                                             const std::vector<std::string>& served) {
  if (opts.expect_served_digest) {
    const std::string got = CombineRankDigests(served);
    if (got != *opts.expect_served_digest) {
      return Status(ErrorCode::kVersionMismatch, "the ranks' served digests combine to " + got +
                                                     ", expected " + *opts.expect_served_digest);
    }
  }
  if (!opts.expect_version) return Status::OK();
  const std::string version = CombineRankDigests(digests);
  const bool per_rank = opts.expect_rank_digests.size() == digests.size();
  std::vector<int> differ;
  for (size_t r = 0; r < digests.size(); ++r) {
    if (!per_rank || digests[r] != opts.expect_rank_digests[r]) {
      differ.push_back(static_cast<int>(r));
    }
  }
  if (version == *opts.expect_version && (!per_rank || differ.empty())) return Status::OK();
  std::string msg =
      "the ranks' digests combine to version " + version + ", expected " + *opts.expect_version;
  if (per_rank && differ.empty()) {
    msg += " (the expected rank digests themselves do not combine to it)";
  } else if (per_rank) {
    msg += "; rank digests differ on rank(s)";
    for (size_t i = 0; i < differ.size(); ++i) {
      const size_t r = static_cast<size_t>(differ[i]);
      msg += (i ? ", " : " ") + std::to_string(r) + " (" + digests[r] + ", expected " +
             opts.expect_rank_digests[r] + ")";
    }
  } else {
    msg += " (no per-rank expectation: any of ranks 0.." + std::to_string(digests.size() - 1) +
           " may differ)";
  }
  return Status(ErrorCode::kVersionMismatch, msg);
}

BeginOutcome CoordinatorImpl::Abort(const std::string& tx) {
  BeginOutcome out;
  AwaitLeadership();
  bool log_first = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Status s = CheckAlive(); !s.ok()) {
      out.status = s;
      return out;
    }
    if (const DecisionEntry* e = DecidedLocked(tx)) {
      if (e->decision == Decision::kCommit) {
        out.status = Status(ErrorCode::kNoTx, "transaction '" + tx + "' already committed");
        return out;
      }
      // Already aborted: re-deliver to ranks that missed it; once all know, there is nothing
      // left to abort.
      if (!pending_.count(tx)) {
        out.status = Status(ErrorCode::kNoTx, "transaction '" + tx + "' was already aborted");
        return out;
      }
      log_first = true;  // DecideOnce returns the logged abort; re-delivered below
    } else if (busy_.count(tx)) {
      // A Begin or Commit is running on it: the sender gives up now. The running call sees
      // the logged abort before it could decide otherwise, and ends in abort.
      log_first = true;
    }
  }
  const DecisionEntry abort_entry{
      tx, Decision::kAbort, "", "aborted by the sender", options_.env.clock->NowMicros(),
      "", std::nullopt};
  if (log_first) {
    auto won = DecideOnce(abort_entry, {}, std::nullopt);
    if (!won.ok()) {
      out.status = won.status();
      return out;
    }
    if (won->decision == Decision::kCommit) {
      out.status = Status(ErrorCode::kNoTx, "transaction '" + tx + "' already committed");
      return out;
    }
    EndIfAcked(tx, Deliver(tx, Decision::kAbort, {})).ok();
    return out;
  }
  const int n = transport_->num_ranks();
  std::vector<Status> st(n);
  fan_out_.Run(n,
               [&](int r) { st[r] = transport_->endpoint(r)->Decide(tx, Decision::kAbort, {}); });
  int unknown = 0;
  std::vector<int> unacked;
  for (int r = 0; r < n; ++r) {
    if (st[r].code() == ErrorCode::kNoTx) {
      ++unknown;
    } else if (!st[r].ok()) {
      unacked.push_back(r);
    }
  }
  if (unknown == n) {
    out.status = Status(ErrorCode::kNoTx, "no rank has transaction '" + tx + "' active");
    return out;
  }
  // A rank refused (a prepared rank takes no abort without a logged decision once it voted),
  // or some ranks aborted: the abort is logged, so it stands for everyone.
  auto won = DecideOnce(abort_entry, {}, std::nullopt);
  if (!won.ok()) {
    out.status = won.status();
    return out;
  }
  if (won->decision == Decision::kCommit) {
    // Committed first by another writer: the ranks that could hear it learn it now.
    EndIfAcked(tx, Deliver(tx, Decision::kCommit, DecidedOf(won.value()))).ok();
    out.status = Status(ErrorCode::kNoTx, "transaction '" + tx + "' already committed");
    return out;
  }
  if (!unacked.empty()) unacked = Deliver(tx, Decision::kAbort, {}, &unacked);
  if (unacked.empty()) {
    // Every rank that was asked knows; the others answered E_NO_TX.
    if (Status s = EndIfAcked(tx, unacked); !s.ok()) out.status = s;
  }
  return out;
}

Status CoordinatorImpl::Recover() {
  std::vector<DecisionEntry> todo;
  if (shared_) {
    // Decisions other writers logged (a coordinator before this one, a rank's cooperative
    // abort) that some rank may still wait for.
    auto unended = log_->ListUnended();
    if (!unended.ok()) return unended.status();
    std::lock_guard<std::mutex> l(mu_);
    for (const LoggedDecision& d : unended.value()) {
      // Its END goes to the audit journal too, which must hold the decision first (another
      // writer's decision was never copied there).
      if (Status s = EnsureAudited(d); !s.ok()) return s;
      Remember(d);
      pending_[d.tx] = true;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    WTX_RETURN_IF_ERROR(CheckAlive());
    for (const auto& [tx, _] : pending_) todo.push_back(order_[decided_[tx]]);
  }
  for (const auto& e : todo) {
    std::vector<int> unacked = Deliver(e.tx, e.decision, DecidedOf(e));
    WTX_RETURN_IF_ERROR(EndIfAcked(e.tx, unacked));
  }
  WTX_RETURN_IF_ERROR(AbortOrphans());
  std::lock_guard<std::mutex> l(mu_);
  return CheckAlive();
}

Status CoordinatorImpl::AbortOrphans() {
  uint64_t begins_before = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!busy_.empty()) return Status::OK();  // a call is running: the next recovery looks
    begins_before = begins_started_;
  }
  const int n = transport_->num_ranks();
  std::vector<std::optional<std::string>> active(n);
  fan_out_.Run(n, [&](int r) {
    auto d = transport_->endpoint(r)->Describe();
    if (d.ok()) active[r] = d->active_tx;
  });
  // tx -> ranks holding it active.
  std::map<std::string, std::vector<int>> orphans;
  std::map<std::string, std::vector<int>> decided_on;
  {
    std::lock_guard<std::mutex> l(mu_);
    // A Begin that started since the view was taken may be what a rank shows: look again at
    // the next recovery rather than abort it.
    if (begins_started_ != begins_before || !busy_.empty()) return Status::OK();
    for (int r = 0; r < n; ++r) {
      if (!active[r]) continue;
      const std::string& tx = *active[r];
      if (DecidedLocked(tx)) {
        decided_on[tx].push_back(r);
      } else if (!begun_.count(tx)) {
        orphans[tx].push_back(r);
      }
    }
  }
  for (const auto& [tx, ranks] : decided_on) {
    DecisionEntry e;
    {
      std::lock_guard<std::mutex> l(mu_);
      e = *DecidedLocked(tx);
    }
    Deliver(tx, e.decision, DecidedOf(e), &ranks);
  }
  for (const auto& [tx, ranks] : orphans) {
    // Begun by a coordinator that died before deciding: nobody will ever commit it.
    const DecisionEntry abort_entry{
        tx,
        Decision::kAbort,
        "",
        "aborted on recovery: begun by a coordinator that did not decide it",
        options_.env.clock->NowMicros(),
        "",
        std::nullopt};
    auto won = DecideOnce(abort_entry, {}, std::nullopt);
    if (!won.ok()) return won.status();
    EndIfAcked(tx, Deliver(tx, won->decision, DecidedOf(won.value()))).ok();
  }
  return Status::OK();
}

Result<std::pair<Decision, DecidedVersion>> CoordinatorImpl::QueryDecision(const std::string& tx) {
  {
    std::unique_lock<std::mutex> l(mu_);
    WTX_RETURN_IF_ERROR(CheckAlive());
    // A Commit collecting votes on `tx` decides soon (within its prepare timeout): wait for
    // that decision rather than presume abort under it. Other transactions are not held up.
    const auto limit =
        std::chrono::steady_clock::now() + 2 * options_.prepare_timeout + std::chrono::seconds(1);
    decided_cv_.wait_until(
        l, limit, [&] { return crashed_ || decided_.count(tx) || !collecting_.count(tx); });
    WTX_RETURN_IF_ERROR(CheckAlive());
    if (const DecisionEntry* e = DecidedLocked(tx)) {
      return std::make_pair(e->decision, DecidedOf(*e));
    }
  }
  // Presumed abort; logged so that the transaction can never commit later (a Begin or Commit
  // running on it ends in abort), and told to every rank so that none keeps waiting. On a
  // shared log another writer may have decided first: its decision is the answer.
  const DecisionEntry abort_entry{
      tx, Decision::kAbort, "", "presumed abort (never decided)", options_.env.clock->NowMicros(),
      "", std::nullopt};
  WTX_ASSIGN_OR_RETURN(won, DecideOnce(abort_entry, {}, std::nullopt));
  WTX_RETURN_IF_ERROR(EndIfAcked(tx, Deliver(tx, won.decision, DecidedOf(won))));
  return std::make_pair(won.decision, DecidedOf(won));
}

}  // namespace

Result<std::unique_ptr<Coordinator>> Coordinator::Open(const CoordinatorOptions& options,
                                                       Transport* transport) {
  return OpenCoordinatorWithHooks(options, transport, CoordinatorHooks{});
}

Result<std::unique_ptr<Coordinator>> OpenCoordinatorWithHooks(const CoordinatorOptions& options,
                                                              Transport* transport,
                                                              const CoordinatorHooks& hooks) {
  if (!transport) return Status::InvalidArgument("coordinator needs a transport");
  if (options.fan_out_threads < 1 || options.fan_out_threads > kMaxFanOutThreads) {
    std::string message = "fan_out_threads must be in 1..";
    message.append(std::to_string(kMaxFanOutThreads))
        .append(", got ")
        .append(std::to_string(options.fan_out_threads));
    return Status::InvalidArgument(message);
  }
  if (!options.manifest_groups.empty() &&
      options.manifest_groups.size() != static_cast<size_t>(transport->num_ranks())) {
    return Status::InvalidArgument(
        "manifest_groups has " + std::to_string(options.manifest_groups.size()) + " entries for " +
        std::to_string(transport->num_ranks()) + " ranks (one per rank)");
  }
  if (options.decision_log) {
    if (options.lease_ttl.count() < 1) {
      return Status::InvalidArgument("lease_ttl must be positive, got " +
                                     std::to_string(options.lease_ttl.count()) + " ms");
    }
    if (options.leader_wait.count() < 0) {
      return Status::InvalidArgument("leader_wait must be >= 0, got " +
                                     std::to_string(options.leader_wait.count()) + " ms");
    }
  } else if (options.leadership) {
    return Status::InvalidArgument("a leadership without a decision_log to lead");
  }
  auto c = std::make_unique<CoordinatorImpl>(options, transport, hooks);
  WTX_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace wtx
