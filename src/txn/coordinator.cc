// CoordinatorImpl: presumed-abort two-phase commit over any Transport, each phase fanned out
// to every rank at once (src/txn/fan_out.h); the mutex guards memory and journal only.
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "journal/journal.h"
#include "src/txn/coordinator_records.h"
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
        hooks_(hooks),
        transport_(t),
        fan_out_(o.fan_out_threads) {}  // threads start only as calls need them
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
  Result<std::pair<Decision, std::string>> QueryDecision(const std::string& tx) override;

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

  // REQUIRES: mu_ held.
  Status CheckAlive() const {
    if (crashed_) return Status(ErrorCode::kCrashed, "the coordinator has crashed");
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
  // A failed journal write kills the coordinator: its memory and its journal may now disagree,
  // so every later call is E_CRASHED until a restart recovers from the journal.
  // REQUIRES: mu_ held.
  Status Journaled(Status s) {
    if (s.ok()) return s;
    crashed_ = true;
    return Status(ErrorCode::kCrashed, "coordinator journal failed: " + s.ToString());
  }
  // REQUIRES: mu_ held (both).
  // Logs the decision with the votes it was decided on and the time prepare took (both absent
  // for a decision taken without collecting votes).
  Status LogDecision(const DecisionEntry& e, std::vector<DecisionVote> votes,
                     std::optional<int64_t> prepare_us, bool sync);
  // E_VERSION_MISMATCH when `opts` expects a version the yes votes' digests do not combine to,
  // naming the ranks whose digest differs.
  static Status CheckExpectedVersion(const CommitOptions& opts,
                                     const std::vector<std::string>& digests);
  Status LogEnd(const std::string& tx);
  // Logs END for `tx` once every rank acknowledged its decision (nothing if already ended).
  // REQUIRES: mu_ not held.
  Status EndIfAcked(const std::string& tx, const std::vector<int>& unacked) {
    if (!unacked.empty()) return Status::OK();
    std::lock_guard<std::mutex> l(mu_);
    if (!pending_.count(tx) || crashed_) return Status::OK();
    return LogEnd(tx);
  }
  // Sends the decision to every rank at once. REQUIRES: mu_ not held.
  std::vector<int> Deliver(const std::string& tx, Decision d, const std::string& version);
  // The logged decision on `tx`, if any. REQUIRES: mu_ held.
  const DecisionEntry* DecidedLocked(const std::string& tx) const {
    auto it = decided_.find(tx);
    return it == decided_.end() ? nullptr : &order_[it->second];
  }
  json State() const;

  CoordinatorOptions options_;
  CoordinatorHooks hooks_;  // src/txn/test_hooks.h
  Transport* transport_;
  FanOut fan_out_;
  std::unique_ptr<Journal> journal_ PT_GUARDED_BY(mu_);
  mutable std::mutex mu_;
  std::condition_variable decided_cv_;  // a decision was logged or a busy tx finished
  bool crashed_ GUARDED_BY(mu_) = false;
  std::vector<DecisionEntry> order_ GUARDED_BY(mu_);
  std::map<std::string, size_t> decided_ GUARDED_BY(mu_);  // tx -> index in order_
  // Decided, not acknowledged by every rank.
  std::map<std::string, bool> pending_ GUARDED_BY(mu_);
  std::set<std::string> busy_ GUARDED_BY(mu_);        // a Begin/Commit/Abort is running on these
  std::set<std::string> collecting_ GUARDED_BY(mu_);  // a Commit is collecting votes on these
};

Status CoordinatorImpl::Init() {
  JournalOptions jo;
  jo.env = options_.env;
  jo.identity = {"coordinator", -1};
  jo.accept_unverified = options_.accept_unverified_journal;
  // Verified first (as `wtx check` would): a coordinator that lost its decisions must not start
  // afresh and presume abort for transactions it committed.
  auto j = OpenTrustedJournal(options_.journal_dir, jo);
  if (!j.ok()) return j.status();
  journal_ = std::move(j).value();
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(journal_->ForEachRecord([&](const json& r) -> Status {
    WTX_ASSIGN_OR_RETURN(rec, DecodeCoordinatorRecord(r));
    if (auto* d = std::get_if<DecisionRecord>(&rec)) {
      DecisionEntry e;
      e.tx = d->tx;
      e.decision = d->decision;
      e.version = d->version.value_or("");
      e.reason = d->reason;
      e.time_micros = d->ts;
      decided_[e.tx] = order_.size();
      order_.push_back(std::move(e));
      pending_[d->tx] = true;
    } else if (const auto* end = std::get_if<EndRecord>(&rec)) {
      pending_.erase(end->tx);
    }
    return Status::OK();
  }));
  if (journal_->state().is_null()) {
    return journal_->Append(Encode(CoordinatorCreateRecord{options_.env.clock->NowMicros()}),
                            State(), true);
  }
  if (!journal_->unverified_at_open().empty()) {
    // The operator accepted a journal whose synced records cannot be verified: on the record.
    return Journaled(
        journal_->Append(Encode(AcceptedUnverifiedRecord{journal_->unverified_at_open(),
                                                         options_.env.clock->NowMicros()}),
                         State(), true));
  }
  return Status::OK();
}

json CoordinatorImpl::State() const {
  CoordinatorState s;
  s.decisions = order_.size();
  for (const auto& [tx, _] : pending_) s.pending.push_back(tx);
  return EncodeCoordinatorState(s);
}

Status CoordinatorImpl::LogDecision(const DecisionEntry& e, std::vector<DecisionVote> votes,
                                    std::optional<int64_t> prepare_us, bool sync) {
  decided_[e.tx] = order_.size();
  order_.push_back(e);
  pending_[e.tx] = true;
  DecisionRecord rec;
  rec.tx = e.tx;
  rec.decision = e.decision;
  if (!e.version.empty()) rec.version = e.version;
  rec.reason = e.reason;
  rec.votes = std::move(votes);
  rec.prepare_us = prepare_us;
  rec.ts = e.time_micros;
  Status s = Journaled(journal_->Append(Encode(rec), State(), sync));
  decided_cv_.notify_all();
  return s;
}

Status CoordinatorImpl::LogEnd(const std::string& tx) {
  pending_.erase(tx);
  return Journaled(
      journal_->Append(Encode(EndRecord{tx, options_.env.clock->NowMicros()}), State(), false));
}

std::vector<int> CoordinatorImpl::Deliver(const std::string& tx, Decision d,
                                          const std::string& version) {
  const int n = transport_->num_ranks();
  std::vector<char> acked(n, 0);
  fan_out_.Run(n, [&](int r) {
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
      if (desc[r].fingerprint != desc[0].fingerprint) {
        out.errors.push_back(
            {r, Status(ErrorCode::kManifestMismatch,
                       "rank " + std::to_string(r) + " manifest fingerprint " +
                           desc[r].fingerprint + " differs from rank 0's " + desc[0].fingerprint)});
      } else if (desc[r].kernel_identity != desc[0].kernel_identity) {
        out.errors.push_back({r, Status(ErrorCode::kManifestMismatch,
                                        "rank " + std::to_string(r) + " kernel identity '" +
                                            desc[r].kernel_identity + "' differs from rank 0's '" +
                                            desc[0].kernel_identity + "'")});
      }
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
    fan_out_.Run(n, [&](int r) { st[r] = transport_->endpoint(r)->Begin(req); });
    collect();
    bool aborted_meanwhile = false;
    if (out.errors.empty()) {
      std::lock_guard<std::mutex> l(mu_);
      // An in-doubt query or Abort presumed abort while the ranks were beginning.
      aborted_meanwhile = decided_.count(req.tx) > 0;
      if (aborted_meanwhile) {
        out.errors.push_back({-1, Status(ErrorCode::kNoTx, "transaction '" + req.tx +
                                                               "' was aborted while it began")});
      }
    }
    if (!out.errors.empty()) {
      // Some ranks began, others refused (or the transaction was aborted meanwhile): abort
      // it where it began, so a refused begin changes nothing.
      fan_out_.Run(n, [&](int r) {
        if (st[r].ok() || aborted_meanwhile) {
          transport_->endpoint(r)->Decide(req.tx, Decision::kAbort, "").ok();
        }
      });
    }
  }
  if (!out.errors.empty()) out.status = out.errors.front().status;
  return out;
}

CommitOutcome CoordinatorImpl::Commit(const std::string& tx, const CommitOptions& opts) {
  CommitOutcome out;
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
  bool any_no = false, any_undeclared = false, any_missing = false, any_wrote = false,
       all_unknown = true;
  std::vector<std::string> digests(n);
  for (const VoteReport& rep : out.votes) {
    if (rep.kind == VoteReport::Kind::kTimeout || rep.kind == VoteReport::Kind::kCrashed) {
      any_missing = true;
      all_unknown = false;
    } else {
      any_no = any_no || !rep.vote.yes;
      // Undeclared changes make a would-be noop an abort: the rank's bytes are not what the
      // committed version says.
      for (ErrorCode e : rep.vote.errors) {
        any_undeclared = any_undeclared || e == ErrorCode::kUndeclaredWrite;
      }
      any_wrote = any_wrote || rep.vote.wrote;
      all_unknown = all_unknown && rep.vote.error == ErrorCode::kNoTx;
      digests[rep.rank] = rep.vote.digest;
    }
  }
  DecisionEntry e;
  e.tx = tx;
  Status expected = Status::OK();
  if (!any_no && !any_missing) expected = CheckExpectedVersion(opts, digests);
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
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    collecting_.erase(tx);
    if (Status s = CheckAlive(); !s.ok()) {
      out.status = s;
      return out;
    }
    if (const DecisionEntry* prior = DecidedLocked(tx)) {
      // Aborted while the votes were being collected (Abort, or a presumed abort): that
      // logged decision stands. Its sender delivered it; ranks that prepared since hear it
      // again below.
      e = *prior;
      out.status = Status(
          ErrorCode::kNoTx,
          "transaction '" + tx + "' was aborted while its votes were collected (" + e.reason + ")");
      out.decision = e.decision;
      out.decision_logged = true;
    } else if (all_unknown) {
      out.status = Status(ErrorCode::kNoTx, "no rank has transaction '" + tx + "' active");
      return out;
    } else {
      if (CrashAt("before_decision_logged")) {
        out.status =
            Status(ErrorCode::kCrashed, "the coordinator crashed before logging the decision");
        return out;
      }
      e.time_micros = options_.env.clock->NowMicros();
      std::vector<DecisionVote> votes;
      for (const auto& v : out.votes) {
        DecisionVote dv;
        dv.rank = v.rank;
        dv.vote = std::string(VoteKindName(v.kind));
        if (v.kind == VoteReport::Kind::kNo) dv.error = std::string(ErrorCodeName(v.vote.error));
        votes.push_back(std::move(dv));
      }
      // The commit point: a commit decision is synced before any rank hears it.
      Status ls = LogDecision(e, std::move(votes), t1 - t0, e.decision == Decision::kCommit);
      if (!ls.ok()) {
        out.status = ls;
        return out;
      }
      out.decision = e.decision;
      out.decision_logged = true;
      out.version = e.version;
      if (CrashAt("after_decision_logged")) {
        out.status =
            Status(ErrorCode::kCrashed, "the coordinator crashed after logging the decision");
        for (int r = 0; r < n; ++r) out.unacknowledged.push_back(r);
        return out;
      }
    }
  }
  out.unacknowledged = Deliver(tx, e.decision, e.version);
  EndIfAcked(tx, out.unacknowledged).ok();
  return out;
}

Status CoordinatorImpl::CheckExpectedVersion(const CommitOptions& opts,
                                             const std::vector<std::string>& digests) {
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
  bool redeliver = false;
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
      redeliver = true;
    } else if (busy_.count(tx)) {
      // A Begin or Commit is running on it: the sender gives up now. The running call sees
      // the logged abort before it could decide otherwise, and ends in abort.
      DecisionEntry e{tx, Decision::kAbort, "", "aborted by the sender",
                      options_.env.clock->NowMicros()};
      if (Status s = LogDecision(e, {}, std::nullopt, false); !s.ok()) {
        out.status = s;
        return out;
      }
      redeliver = true;
    }
  }
  if (redeliver) {
    EndIfAcked(tx, Deliver(tx, Decision::kAbort, "")).ok();
    return out;
  }
  const int n = transport_->num_ranks();
  std::vector<Status> st(n);
  fan_out_.Run(n,
               [&](int r) { st[r] = transport_->endpoint(r)->Decide(tx, Decision::kAbort, ""); });
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
  std::lock_guard<std::mutex> l(mu_);
  if (Status s = CheckAlive(); !s.ok()) {
    out.status = s;
    return out;
  }
  if (DecidedLocked(tx)) return out;  // decided (abort) meanwhile by a presumed abort
  DecisionEntry e{tx, Decision::kAbort, "", "aborted by the sender",
                  options_.env.clock->NowMicros()};
  Status s = LogDecision(e, {}, std::nullopt, false);
  if (s.ok() && unacked.empty()) s = LogEnd(tx);
  if (!s.ok()) out.status = s;
  return out;
}

Status CoordinatorImpl::Recover() {
  std::vector<DecisionEntry> todo;
  {
    std::lock_guard<std::mutex> l(mu_);
    WTX_RETURN_IF_ERROR(CheckAlive());
    for (const auto& [tx, _] : pending_) todo.push_back(order_[decided_[tx]]);
  }
  for (const auto& e : todo) {
    std::vector<int> unacked = Deliver(e.tx, e.decision, e.version);
    WTX_RETURN_IF_ERROR(EndIfAcked(e.tx, unacked));
  }
  std::lock_guard<std::mutex> l(mu_);
  return CheckAlive();
}

Result<std::pair<Decision, std::string>> CoordinatorImpl::QueryDecision(const std::string& tx) {
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
      return std::make_pair(e->decision, e->version);
    }
    // Presumed abort; logged so that the transaction can never commit later (a Begin or
    // Commit running on it ends in abort), and told to every rank so that none keeps waiting.
    DecisionEntry e{tx, Decision::kAbort, "", "presumed abort (never decided)",
                    options_.env.clock->NowMicros()};
    WTX_RETURN_IF_ERROR(LogDecision(e, {}, std::nullopt, false));
  }
  WTX_RETURN_IF_ERROR(EndIfAcked(tx, Deliver(tx, Decision::kAbort, "")));
  return std::make_pair(Decision::kAbort, std::string());
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
  auto c = std::make_unique<CoordinatorImpl>(options, transport, hooks);
  WTX_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace wtx
