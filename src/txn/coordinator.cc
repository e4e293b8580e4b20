// CoordinatorImpl: presumed-abort two-phase commit over any Transport.
#include <map>
#include <mutex>

#include "journal/journal.h"
#include "src/txn/test_hooks.h"
#include "src/util/thread_annotations.h"
#include "wtx/content_hash.h"
#include "wtx/coordinator.h"

namespace wtx {

using nlohmann::json;

namespace {

class CoordinatorImpl : public Coordinator {
 public:
  CoordinatorImpl(const CoordinatorOptions& o, Transport* t, const CoordinatorHooks& hooks)
      : options_(o), hooks_(hooks), transport_(t) {}
  Status Init();

  BeginOutcome Begin(const BeginRequest& req) override;
  CommitOutcome Commit(const std::string& tx) override;
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
  Status CheckAlive() const {
    if (crashed_) return Status(ErrorCode::kCrashed, "the coordinator has crashed");
    return Status::OK();
  }
  bool CrashAt(std::string_view point) {
    if (hooks_.crash_points && hooks_.crash_points->ShouldCrash(point)) {
      crashed_ = true;
      return true;
    }
    return false;
  }
  // A failed journal write kills the coordinator: its memory and its journal may now disagree,
  // so every later call is E_CRASHED until a restart recovers from the journal.
  Status Journaled(Status s) {
    if (s.ok()) return s;
    crashed_ = true;
    return Status(ErrorCode::kCrashed, "coordinator journal failed: " + s.ToString());
  }
  Status LogDecision(const DecisionEntry& e, const json& extra, bool sync);
  Status LogEnd(const std::string& tx);
  std::vector<int> Deliver(const std::string& tx, Decision d, const std::string& version);
  json State() const;

  CoordinatorOptions options_;
  CoordinatorHooks hooks_;  // src/txn/test_hooks.h
  Transport* transport_;
  std::unique_ptr<Journal> journal_ PT_GUARDED_BY(mu_);
  mutable std::mutex mu_;
  bool crashed_ GUARDED_BY(mu_) = false;
  std::vector<DecisionEntry> order_ GUARDED_BY(mu_);
  std::map<std::string, size_t> decided_ GUARDED_BY(mu_);  // tx -> index in order_
  // Decided, not acknowledged by every rank.
  std::map<std::string, bool> pending_ GUARDED_BY(mu_);
};

Status CoordinatorImpl::Init() {
  JournalOptions jo;
  jo.env = options_.env;
  jo.identity = {"coordinator", -1};
  auto j = Journal::Open(options_.journal_dir, jo);
  if (!j.ok()) return j.status();
  journal_ = std::move(j).value();
  WTX_RETURN_IF_ERROR(journal_->ForEachRecord([&](const json& r) -> Status {
    const std::string type = r.value("type", std::string());
    if (type == "DECISION") {
      DecisionEntry e;
      e.tx = r.at("tx").get<std::string>();
      e.decision = DecisionFromName(r.at("decision").get<std::string>()).value_or(Decision::kAbort);
      e.version = r.value("version", json()).is_string() ? r["version"].get<std::string>() : "";
      e.reason = r.value("reason", std::string());
      e.time_micros = r.value("ts", int64_t{0});
      decided_[e.tx] = order_.size();
      order_.push_back(std::move(e));
      pending_[r["tx"].get<std::string>()] = true;
    } else if (type == "END") {
      pending_.erase(r.at("tx").get<std::string>());
    }
    return Status::OK();
  }));
  const json st = journal_->state();
  if (st.is_null()) {
    return journal_->Append(json{{"type", "CREATE"}, {"ts", options_.env.clock->NowMicros()}},
                            State(), true);
  }
  return Status::OK();
}

json CoordinatorImpl::State() const {
  json pending = json::array();
  for (const auto& [tx, _] : pending_) pending.push_back(tx);
  return {{"decisions", order_.size()}, {"pending", pending}};
}

Status CoordinatorImpl::LogDecision(const DecisionEntry& e, const json& extra, bool sync) {
  decided_[e.tx] = order_.size();
  order_.push_back(e);
  pending_[e.tx] = true;
  json rec = {{"type", "DECISION"},
              {"tx", e.tx},
              {"decision", DecisionName(e.decision)},
              {"version", e.version.empty() ? json() : json(e.version)},
              {"reason", e.reason},
              {"ts", e.time_micros}};
  rec.update(extra);
  return Journaled(journal_->Append(std::move(rec), State(), sync));
}

Status CoordinatorImpl::LogEnd(const std::string& tx) {
  pending_.erase(tx);
  return Journaled(journal_->Append(
      json{{"type", "END"}, {"tx", tx}, {"ts", options_.env.clock->NowMicros()}}, State(), false));
}

std::vector<int> CoordinatorImpl::Deliver(const std::string& tx, Decision d,
                                          const std::string& version) {
  std::vector<int> unacked;
  for (int r = 0; r < transport_->num_ranks(); ++r) {
    Status s = transport_->endpoint(r)->Decide(tx, d, version);
    // A rank that never began `tx` (E_NO_TX) has nothing to learn.
    if (!s.ok() && s.code() != ErrorCode::kNoTx) unacked.push_back(r);
  }
  return unacked;
}

BeginOutcome CoordinatorImpl::Begin(const BeginRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  BeginOutcome out;
  auto fail = [&](int rank, Status s) { out.errors.push_back({rank, std::move(s)}); };
  if (Status s = CheckAlive(); !s.ok()) {
    out.status = s;
    return out;
  }
  if (decided_.count(req.tx)) {
    out.status =
        Status(ErrorCode::kTxActive, "transaction id '" + req.tx + "' was already decided");
    return out;
  }
  const int n = transport_->num_ranks();
  std::vector<RankDescription> desc(n);
  for (int r = 0; r < n; ++r) {
    auto d = transport_->endpoint(r)->Describe();
    if (!d.ok()) {
      fail(r, d.status());
    } else {
      desc[r] = d.value();
    }
  }
  if (out.errors.empty()) {
    for (int r = 1; r < n; ++r) {
      if (desc[r].fingerprint != desc[0].fingerprint) {
        fail(r, Status(ErrorCode::kManifestMismatch,
                       "rank " + std::to_string(r) + " manifest fingerprint " +
                           desc[r].fingerprint + " differs from rank 0's " + desc[0].fingerprint));
      } else if (desc[r].kernel_identity != desc[0].kernel_identity) {
        fail(r,
             Status(ErrorCode::kManifestMismatch,
                    "rank " + std::to_string(r) + " kernel identity '" + desc[r].kernel_identity +
                        "' differs from rank 0's '" + desc[0].kernel_identity + "'"));
      }
    }
  }
  if (out.errors.empty()) {
    std::vector<bool> held(req.sources.size(), false);
    for (int r = 0; r < n; ++r) {
      std::vector<bool> holds;
      Status s = transport_->endpoint(r)->CheckBegin(req, &holds);
      if (!s.ok()) fail(r, s);
      for (size_t i = 0; i < holds.size() && i < held.size(); ++i) held[i] = held[i] || holds[i];
    }
    if (out.errors.empty() && req.kind == TxKind::kDelta) {
      for (size_t i = 0; i < held.size(); ++i) {
        if (!held[i]) {
          fail(-1, Status(ErrorCode::kUnknownParam,
                          "delta source '" + req.sources[i] + "' is held by no rank"));
        }
      }
    }
  }
  if (out.errors.empty()) {
    std::vector<int> begun;
    for (int r = 0; r < n; ++r) {
      Status s = transport_->endpoint(r)->Begin(req);
      if (!s.ok()) {
        fail(r, s);
        break;
      }
      begun.push_back(r);
    }
    if (!out.errors.empty()) {
      for (int r : begun) transport_->endpoint(r)->Decide(req.tx, Decision::kAbort, "").ok();
    }
  }
  if (!out.errors.empty()) out.status = out.errors.front().status;
  return out;
}

CommitOutcome CoordinatorImpl::Commit(const std::string& tx) {
  std::lock_guard<std::mutex> l(mu_);
  CommitOutcome out;
  if (Status s = CheckAlive(); !s.ok()) {
    out.status = s;
    return out;
  }
  if (decided_.count(tx)) {
    out.status = Status(ErrorCode::kNoTx,
                        "transaction '" + tx + "' was already decided (" +
                            std::string(DecisionName(order_[decided_[tx]].decision)) + ")");
    return out;
  }
  const int64_t t0 = options_.env.clock->NowMicros();
  const int n = transport_->num_ranks();
  bool any_no = false, any_missing = false, any_wrote = false, all_unknown = true;
  std::vector<std::string> digests(n);
  for (int r = 0; r < n; ++r) {
    VoteReport rep;
    rep.rank = r;
    auto v = transport_->endpoint(r)->Prepare(tx, options_.prepare_timeout);
    if (!v.ok()) {
      rep.kind = v.status().code() == ErrorCode::kTimeout ? VoteReport::Kind::kTimeout
                                                          : VoteReport::Kind::kCrashed;
      rep.status = v.status();
      any_missing = true;
      all_unknown = false;
    } else {
      rep.vote = v.value();
      rep.kind = rep.vote.yes ? VoteReport::Kind::kYes : VoteReport::Kind::kNo;
      any_no = any_no || !rep.vote.yes;
      any_wrote = any_wrote || rep.vote.wrote;
      all_unknown = all_unknown && rep.vote.error == ErrorCode::kNoTx;
      digests[r] = rep.vote.digest;
    }
    out.votes.push_back(std::move(rep));
  }
  const int64_t t1 = options_.env.clock->NowMicros();
  if (all_unknown) {
    out.status = Status(ErrorCode::kNoTx, "no rank has transaction '" + tx + "' active");
    return out;
  }
  DecisionEntry e;
  e.tx = tx;
  if (!any_missing && !any_wrote) {
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
  } else {
    e.decision = Decision::kCommit;
    e.version = CombineRankDigests(digests);
  }
  if (CrashAt("before_decision_logged")) {
    out.status = Status(ErrorCode::kCrashed, "the coordinator crashed before logging the decision");
    return out;
  }
  e.time_micros = options_.env.clock->NowMicros();
  json votes = json::array();
  for (const auto& v : out.votes) {
    json jv = {{"rank", v.rank}};
    switch (v.kind) {
      case VoteReport::Kind::kYes:
        jv["vote"] = "yes";
        break;
      case VoteReport::Kind::kNo:
        jv["vote"] = "no";
        jv["error"] = ErrorCodeName(v.vote.error);
        break;
      case VoteReport::Kind::kTimeout:
        jv["vote"] = "timeout";
        break;
      case VoteReport::Kind::kCrashed:
        jv["vote"] = "crashed";
        break;
    }
    votes.push_back(std::move(jv));
  }
  // The commit point: a commit decision is synced before any rank hears it.
  Status ls = LogDecision(e, {{"votes", votes}, {"timings_us", {{"prepare", t1 - t0}}}},
                          e.decision == Decision::kCommit);
  if (!ls.ok()) {
    out.status = ls;
    return out;
  }
  out.decision = e.decision;
  out.decision_logged = true;
  out.version = e.version;
  if (CrashAt("after_decision_logged")) {
    out.status = Status(ErrorCode::kCrashed, "the coordinator crashed after logging the decision");
    for (int r = 0; r < n; ++r) out.unacknowledged.push_back(r);
    return out;
  }
  out.unacknowledged = Deliver(tx, e.decision, e.version);
  if (out.unacknowledged.empty()) LogEnd(tx).ok();
  return out;
}

BeginOutcome CoordinatorImpl::Abort(const std::string& tx) {
  std::lock_guard<std::mutex> l(mu_);
  BeginOutcome out;
  if (Status s = CheckAlive(); !s.ok()) {
    out.status = s;
    return out;
  }
  if (auto it = decided_.find(tx); it != decided_.end()) {
    if (order_[it->second].decision == Decision::kCommit) {
      out.status = Status(ErrorCode::kNoTx, "transaction '" + tx + "' already committed");
      return out;
    }
    // Already aborted: re-deliver to ranks that missed it; once all know, there is nothing
    // left to abort.
    if (!pending_.count(tx)) {
      out.status = Status(ErrorCode::kNoTx, "transaction '" + tx + "' was already aborted");
      return out;
    }
    if (Deliver(tx, Decision::kAbort, "").empty()) LogEnd(tx).ok();
    return out;
  }
  int unknown = 0;
  std::vector<int> unacked;
  for (int r = 0; r < transport_->num_ranks(); ++r) {
    Status s = transport_->endpoint(r)->Decide(tx, Decision::kAbort, "");
    if (s.code() == ErrorCode::kNoTx) {
      ++unknown;
    } else if (!s.ok()) {
      unacked.push_back(r);
    }
  }
  if (unknown == transport_->num_ranks()) {
    out.status = Status(ErrorCode::kNoTx, "no rank has transaction '" + tx + "' active");
    return out;
  }
  DecisionEntry e{tx, Decision::kAbort, "", "aborted by the sender",
                  options_.env.clock->NowMicros()};
  Status s = LogDecision(e, json::object(), false);
  if (s.ok() && unacked.empty()) s = LogEnd(tx);
  if (!s.ok()) out.status = s;
  return out;
}

Status CoordinatorImpl::Recover() {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  std::vector<std::string> txs;
  for (const auto& [tx, _] : pending_) txs.push_back(tx);
  for (const auto& tx : txs) {
    const DecisionEntry& e = order_[decided_[tx]];
    if (Deliver(tx, e.decision, e.version).empty()) WTX_RETURN_IF_ERROR(LogEnd(tx));
  }
  return Status::OK();
}

Result<std::pair<Decision, std::string>> CoordinatorImpl::QueryDecision(const std::string& tx) {
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  auto it = decided_.find(tx);
  if (it != decided_.end()) {
    return std::make_pair(order_[it->second].decision, order_[it->second].version);
  }
  // Presumed abort; logged so that the transaction can never commit later, and told to every
  // rank so that none keeps waiting on it.
  DecisionEntry e{tx, Decision::kAbort, "", "presumed abort (never decided)",
                  options_.env.clock->NowMicros()};
  WTX_RETURN_IF_ERROR(LogDecision(e, json::object(), false));
  if (Deliver(tx, Decision::kAbort, "").empty()) WTX_RETURN_IF_ERROR(LogEnd(tx));
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
  auto c = std::make_unique<CoordinatorImpl>(options, transport, hooks);
  WTX_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace wtx
