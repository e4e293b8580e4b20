#include "src/txn/decision_log_etcd.h"

#include <chrono>
#include <set>
#include <utility>

#include "src/etcd/etcd_client.h"
#include "src/etcd/etcd_url.h"
#include "src/txn/decision_log_records.h"
#include "src/txn/etcd_leadership.h"

namespace wtx {

namespace {

using etcd::Compare;
using etcd::Op;
using CompareIs = etcd::Compare::Result;

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class EtcdDecisionLog final : public DecisionLog {
 public:
  EtcdDecisionLog(std::shared_ptr<etcd::Client> client, const etcd::EtcdUrl& url)
      : client_(std::move(client)),
        name_(url.ToString()),
        meta_key_(url.prefix + "/meta"),
        leader_key_(url.prefix + "/leader"),
        tx_prefix_(url.prefix + "/tx/"),
        end_prefix_(url.prefix + "/end/") {}

  // Marks PREFIX as a decision log (create: a coordinator), or checks that it is one.
  Status Init(bool create) {
    const std::string what = "open the decision log " + name_ + " (key " + meta_key_ + ")";
    std::vector<Op> mark;
    if (create) mark.push_back(Op::Put(meta_key_, EncodeDecisionLogMeta({WallMicros()})));
    WTX_ASSIGN_OR_RETURN(
        txn, client_->Txn({Compare::CreateRevision(meta_key_, CompareIs::kEqual, 0)}, mark,
                          {Op::Get(meta_key_)}, what));
    if (txn.succeeded || txn.responses[0].kvs.empty()) return Status::OK();
    const auto meta = DecodeDecisionLogMeta(txn.responses[0].kvs[0].value);
    if (!meta.ok()) {
      return NameStoredKey(
          Status::Corruption(name_ + " is not a wtx decision log: " + meta.status().message()),
          meta_key_, txn.endpoint);
    }
    return Status::OK();
  }

  Result<LoggedDecision> Decide(const LoggedDecision& d) override {
    return Write(d, /*leaderless=*/false);
  }

  Result<LoggedDecision> DecideIfLeaderless(const LoggedDecision& d) override {
    return Write(d, /*leaderless=*/true);
  }

  Result<std::optional<LoggedDecision>> Read(const std::string& tx) override {
    const std::string what = "read the decision on tx '" + tx + "' from " + name_;
    WTX_ASSIGN_OR_RETURN(txn,
                         client_->Txn({}, {Op::Get(TxKey(tx)), Op::Get(EndKey(tx))}, {}, what));
    if (txn.responses[0].kvs.empty()) return std::optional<LoggedDecision>();
    WTX_ASSIGN_OR_RETURN(ended, DecodeEnd(txn.responses[1].kvs, txn.endpoint));
    WTX_ASSIGN_OR_RETURN(d, DecodeStored(txn.responses[0].kvs[0], tx, ended, txn.endpoint));
    return std::optional<LoggedDecision>(std::move(d));
  }

  Result<std::vector<LoggedDecision>> List() override {
    const std::string what = "list the decisions of " + name_;
    WTX_ASSIGN_OR_RETURN(txn, client_->Txn({},
                                           {Op::GetPrefix(tx_prefix_, /*by_create=*/true),
                                            Op::GetPrefix(end_prefix_, /*by_create=*/false)},
                                           {}, what));
    std::set<std::string> ended;
    for (const etcd::KeyValue& kv : txn.responses[1].kvs) {
      const Status st = DecodeEndRecord(kv.value);
      if (!st.ok()) return NameStoredKey(st, kv.key, txn.endpoint);
      ended.insert(kv.key.substr(end_prefix_.size()));
    }
    std::vector<LoggedDecision> out;
    for (const etcd::KeyValue& kv : txn.responses[0].kvs) {
      const std::string tx = kv.key.substr(tx_prefix_.size());
      WTX_ASSIGN_OR_RETURN(d, DecodeStored(kv, tx, ended.count(tx) > 0, txn.endpoint));
      out.push_back(std::move(d));
    }
    return out;
  }

  Result<std::vector<LoggedDecision>> ListUnended() override {
    WTX_ASSIGN_OR_RETURN(all, List());
    std::vector<LoggedDecision> out;
    for (LoggedDecision& d : all) {
      if (!d.ended) out.push_back(std::move(d));
    }
    return out;
  }

  Status MarkEnded(const std::string& tx) override {
    const std::string what = "mark tx '" + tx + "' ended in " + name_;
    WTX_ASSIGN_OR_RETURN(txn,
                         client_->Txn({Compare::CreateRevision(TxKey(tx), CompareIs::kGreater, 0)},
                                      {Op::Put(EndKey(tx), EncodeEndRecord())}, {}, what));
    if (!txn.succeeded) {
      return Status(ErrorCode::kNotFound,
                    "cannot mark tx '" + tx + "' ended: " + name_ + " holds no decision on it");
    }
    return Status::OK();
  }

  Result<size_t> Compact(size_t keep) override {
    WTX_ASSIGN_OR_RETURN(all, List());
    std::vector<std::string> ended;  // oldest first
    for (const LoggedDecision& d : all) {
      if (d.ended) ended.push_back(d.tx);
    }
    size_t removed = 0;
    for (size_t i = 0; i + keep < ended.size(); ++i) {
      const std::string& tx = ended[i];
      const std::string what = "compact tx '" + tx + "' from " + name_;
      // Only while it is still ended (a concurrent Compact may have removed it already).
      WTX_ASSIGN_OR_RETURN(
          txn, client_->Txn({Compare::CreateRevision(EndKey(tx), CompareIs::kGreater, 0)},
                            {Op::Delete(TxKey(tx)), Op::Delete(EndKey(tx))}, {}, what));
      if (txn.succeeded) ++removed;
    }
    return removed;
  }

  Result<std::unique_ptr<Leadership>> NewLeadership(const std::string& holder,
                                                    std::chrono::milliseconds ttl) override {
    if (holder.empty()) return Status::InvalidArgument("a leadership needs a holder name");
    if (ttl.count() <= 0) {
      return Status::InvalidArgument("the leadership TTL must be positive (got " +
                                     std::to_string(ttl.count()) + " ms)");
    }
    return std::unique_ptr<Leadership>(
        std::make_unique<EtcdLeadership>(client_, leader_key_, holder, ttl, name_));
  }

  Result<std::optional<std::pair<int64_t, std::string>>> CurrentLeader() override {
    const std::string what = "read the leader of " + name_;
    WTX_ASSIGN_OR_RETURN(range, client_->Range(Op::Get(leader_key_), what));
    if (range.kvs.empty()) return std::optional<std::pair<int64_t, std::string>>();
    WTX_ASSIGN_OR_RETURN(leader, DecodeLeader(range.kvs[0], range.endpoint));
    return std::optional<std::pair<int64_t, std::string>>(
        std::make_pair(range.kvs[0].create_revision, leader.holder));
  }

  std::string Describe() const override { return name_; }

 private:
  std::string TxKey(const std::string& tx) const { return tx_prefix_ + tx; }
  std::string EndKey(const std::string& tx) const { return end_prefix_ + tx; }

  // The decision stored in `kv` (the key of `tx`).
  Result<LoggedDecision> DecodeStored(const etcd::KeyValue& kv, const std::string& tx, bool ended,
                                      const std::string& endpoint) const {
    auto d = DecodeDecisionRecord(kv.value, tx);
    if (!d.ok()) return NameStoredKey(d.status(), kv.key, endpoint);
    d->ended = ended;
    return d;
  }

  // Whether an end key was found (`kvs`: the range of it), checking what it holds.
  Result<bool> DecodeEnd(const std::vector<etcd::KeyValue>& kvs,
                         const std::string& endpoint) const {
    if (kvs.empty()) return false;
    const Status st = DecodeEndRecord(kvs[0].value);
    if (!st.ok()) return NameStoredKey(st, kvs[0].key, endpoint);
    return true;
  }

  Result<LeaderRecord> DecodeLeader(const etcd::KeyValue& kv, const std::string& endpoint) const {
    auto leader = DecodeLeaderRecord(kv.value);
    if (!leader.ok()) return NameStoredKey(leader.status(), kv.key, endpoint);
    return leader;
  }

  // Decide (leaderless: false) and DecideIfLeaderless (true): one transaction that writes `d`
  // if its compares hold, and otherwise reads what made them fail.
  Result<LoggedDecision> Write(const LoggedDecision& d, bool leaderless) {
    if (d.tx.empty()) return Status::InvalidArgument("a decision needs a tx");
    if (d.epoch < 0) {
      return Status::InvalidArgument("decision on tx '" + d.tx + "': negative epoch " +
                                     std::to_string(d.epoch));
    }
    const std::string tx_key = TxKey(d.tx);
    std::vector<Compare> compares = {Compare::CreateRevision(tx_key, CompareIs::kEqual, 0)};
    if (leaderless) {
      compares.push_back(Compare::CreateRevision(leader_key_, CompareIs::kEqual, 0));
      // Only in a log some coordinator opened: a rank given a wrong prefix must not abort on
      // its own where no coordinator ever decided.
      compares.push_back(Compare::CreateRevision(meta_key_, CompareIs::kGreater, 0));
    } else if (d.epoch > 0) {
      compares.push_back(Compare::CreateRevision(leader_key_, CompareIs::kEqual, d.epoch));
    }
    const std::string what = "decide tx '" + d.tx + "' in " + name_ + " (key " + tx_key + ")";
    WTX_ASSIGN_OR_RETURN(value, EncodeDecisionRecord(d));
    WTX_ASSIGN_OR_RETURN(txn, client_->Txn(compares, {Op::Put(tx_key, std::move(value))},
                                           {Op::Get(tx_key), Op::Get(leader_key_),
                                            Op::Get(EndKey(d.tx)), Op::Get(meta_key_)},
                                           what));
    if (txn.succeeded) {
      LoggedDecision out = d;
      out.ended = false;
      return out;
    }
    if (!txn.responses[0].kvs.empty()) {  // decided already: the first decision holds
      WTX_ASSIGN_OR_RETURN(ended, DecodeEnd(txn.responses[2].kvs, txn.endpoint));
      return DecodeStored(txn.responses[0].kvs[0], d.tx, ended, txn.endpoint);
    }
    // Undecided, so the leader compare failed (the reads see the revision the compares saw).
    std::optional<std::pair<int64_t, std::string>> leader;
    if (!txn.responses[1].kvs.empty()) {
      const etcd::KeyValue& kv = txn.responses[1].kvs[0];
      WTX_ASSIGN_OR_RETURN(record, DecodeLeader(kv, txn.endpoint));
      leader.emplace(kv.create_revision, record.holder);
    }
    if (leaderless) {
      if (!leader && txn.responses[3].kvs.empty()) {
        return Status::InvalidArgument(
            name_ + " is not a wtx decision log (no key " + meta_key_ +
            "): no coordinator ever opened it, so a rank does not decide tx '" + d.tx +
            "' there on its own; check --decision-log (the coordinators' PREFIX)");
      }
      if (!leader) {  // cannot be: the compare on the leader key failed
        return Status(ErrorCode::kDecisionLogUnavailable,
                      "etcd member " + txn.endpoint + " refused to " + what + " for no reason");
      }
      return Status(ErrorCode::kTxActive,
                    "a coordinator leads (epoch " + std::to_string(leader->first) + ", holder " +
                        leader->second + "); it may still decide tx '" + d.tx + "' in " + name_);
    }
    const std::string now = leader ? "the leader is now epoch " + std::to_string(leader->first) +
                                         " (holder " + leader->second + ")"
                                   : std::string("no coordinator leads now");
    return Status(ErrorCode::kStaleCoordinator, "coordinator epoch " + std::to_string(d.epoch) +
                                                    " was deposed; " + now + "; tx '" + d.tx +
                                                    "' was not decided by it in " + name_);
  }

  const std::shared_ptr<etcd::Client> client_;
  const std::string name_;  // etcd://h:p,h:p/prefix
  const std::string meta_key_;
  const std::string leader_key_;
  const std::string tx_prefix_;
  const std::string end_prefix_;
};

}  // namespace

Result<std::shared_ptr<DecisionLog>> OpenEtcdDecisionLog(const DecisionLogOptions& options) {
  WTX_ASSIGN_OR_RETURN(url, etcd::ParseEtcdUrl(options.url));
  WTX_ASSIGN_OR_RETURN(client, etcd::OpenClientFor(url, options.tls, options.request_timeout));
  auto log =
      std::make_shared<EtcdDecisionLog>(std::shared_ptr<etcd::Client>(std::move(client)), url);
  Status s = log->Init(options.create);
  // A rank's log is needed only when it must resolve without a coordinator: an unreachable
  // etcd at its start is retried then, not a reason to stay down.
  if (!s.ok() && (options.create || s.code() != ErrorCode::kDecisionLogUnavailable)) return s;
  return std::shared_ptr<DecisionLog>(std::move(log));
}

}  // namespace wtx
