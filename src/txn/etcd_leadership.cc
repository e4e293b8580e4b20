#include "src/txn/etcd_leadership.h"

#include <algorithm>
#include <optional>
#include <thread>

#include "src/txn/decision_log_records.h"

namespace wtx {

namespace {

using std::chrono::milliseconds;

// The lease's TTL: whole seconds, at least `ttl` (so the lease outlives what Leads() trusts).
using etcd::LeaseSeconds;

// PREFIX/beat beside PREFIX/leader.
std::string BeatKey(const std::string& leader_key) {
  return leader_key.substr(0, leader_key.rfind('/') + 1) + "beat";
}

}  // namespace

bool EtcdLeadership::SilenceWatch::Observe(const etcd::KeyValue& leader,
                                           const etcd::TxnResponse& txn) {
  const etcd::KeyValue* beat = txn.responses.size() > 1 && !txn.responses[1].kvs.empty()
                                   ? &txn.responses[1].kvs[0]
                                   : nullptr;
  const int64_t beat_rev = beat ? beat->mod_revision : 0;
  const Clock::time_point now = Clock::now();
  if (leader.create_revision != leader_rev || beat_rev != this->beat_rev) {
    leader_rev = leader.create_revision;
    this->beat_rev = beat_rev;
    changed_at = now;
    // Two TTLs of silence: a live leader's beats stop for an etcd election (1-2 s with etcd's
    // defaults) plus one renewal period, well within; a dead one is deposed sooner than its
    // lease, which etcd extends by a whole TTL after the election.
    milliseconds ttl = own_ttl;
    if (beat != nullptr) {
      auto record = DecodeBeatRecord(beat->value);
      if (record.ok() && record->epoch == leader_rev) {
        ttl = std::max(own_ttl, milliseconds(record->ttl_ms));
      }
    }
    deadline = 2 * ttl;
    return false;
  }
  return now - changed_at > deadline;
}

bool EtcdLeadership::DeposeSilentLeader(const SilenceWatch& silence, const std::string& holder) {
  etcd::Compare same_beat;
  same_beat.key = beat_key_;
  same_beat.target = etcd::Compare::Target::kMod;
  same_beat.result = etcd::Compare::Result::kEqual;
  same_beat.number = silence.beat_rev;
  auto deposed = client_->Txn({etcd::Compare::CreateRevision(
                                   leader_key_, etcd::Compare::Result::kEqual, silence.leader_rev),
                               same_beat},
                              {etcd::Op::Delete(leader_key_)}, {},
                              "depose the silent leader '" + holder + "' of " + log_name_);
  return deposed.ok() && deposed->succeeded;
}

EtcdLeadership::EtcdLeadership(std::shared_ptr<etcd::Client> client, std::string leader_key,
                               std::string holder, milliseconds ttl, std::string log_name)
    : client_(std::move(client)),
      leader_key_(std::move(leader_key)),
      beat_key_(BeatKey(leader_key_)),
      holder_(std::move(holder)),
      ttl_(ttl),
      log_name_(std::move(log_name)) {}

EtcdLeadership::~EtcdLeadership() {
  std::lock_guard<std::mutex> lock(acquire_mu_);
  StopKeepAlive();  // no revoke: the key expires with the lease, as after a crash
}

void EtcdLeadership::StopKeepAlive() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
}

Result<int64_t> EtcdLeadership::Acquire(milliseconds timeout) {
  std::lock_guard<std::mutex> acquire_lock(acquire_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) {
      return Status::InvalidArgument("the leadership of " + log_name_ + " by '" + holder_ +
                                     "' (epoch " + std::to_string(epoch_) +
                                     ") has ended; a new term needs a new Leadership");
    }
    if (epoch_ > 0) return epoch_;
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  const milliseconds poll = std::clamp(ttl_ / 4, milliseconds(100), milliseconds(1000));
  const std::string what = "acquire the leadership of " + log_name_ + " (key " + leader_key_ + ")";
  // An etcd that cannot answer for a moment (an election, a member restarting) is waited out
  // until the deadline, as a leader that still holds the key is: only a definitive answer, or
  // the deadline, ends the attempt.
  auto transient = [&](const Status& s) {
    if (s.code() != ErrorCode::kDecisionLogUnavailable || Clock::now() + poll > deadline) {
      return false;
    }
    std::this_thread::sleep_for(poll);
    return true;
  };
  Clock::time_point renewed = Clock::now();  // when the lease's last grant/renewal was sent
  auto granted = client_->LeaseGrant(LeaseSeconds(ttl_), what);
  while (!granted.ok() && transient(granted.status())) {
    renewed = Clock::now();
    granted = client_->LeaseGrant(LeaseSeconds(ttl_), what);
  }
  if (!granted.ok()) return granted.status();
  int64_t lease = *granted;
  WTX_ASSIGN_OR_RETURN(value, EncodeLeaderRecord(LeaderRecord{holder_, lease}));
  SilenceWatch silence;  // how long the current leader has not beaten
  silence.own_ttl = ttl_;
  while (true) {
    if (Clock::now() - renewed > ttl_ / 3) {  // still waiting: keep the lease alive
      const Clock::time_point sent = Clock::now();
      auto ttl = client_->LeaseKeepAlive(lease, what);
      if (!ttl.ok() && transient(ttl.status())) continue;
      if (!ttl.ok() && ttl.status().code() != ErrorCode::kNotFound) return ttl.status();
      if (!ttl.ok() || *ttl <= 0) {  // it expired while this waited: take a new one
        auto fresh = client_->LeaseGrant(LeaseSeconds(ttl_), what);
        if (!fresh.ok() && transient(fresh.status())) continue;
        if (!fresh.ok()) return fresh.status();
        lease = *fresh;
        WTX_ASSIGN_OR_RETURN(renamed, EncodeLeaderRecord(LeaderRecord{holder_, lease}));
        value = std::move(renamed);
      }
      renewed = sent;
    }
    auto attempt =
        client_->Txn({etcd::Compare::CreateRevision(leader_key_, etcd::Compare::Result::kEqual, 0)},
                     {etcd::Op::Put(leader_key_, value, lease)},
                     {etcd::Op::Get(leader_key_), etcd::Op::Get(beat_key_)}, what);
    if (!attempt.ok() && transient(attempt.status())) continue;
    if (!attempt.ok()) return attempt.status();
    const etcd::TxnResponse& txn = *attempt;
    int64_t epoch = 0;
    if (txn.succeeded) {
      epoch = txn.revision;  // the put's revision: the key's create revision
    } else if (!txn.responses.empty() && !txn.responses[0].kvs.empty()) {
      const etcd::KeyValue& kv = txn.responses[0].kvs[0];
      auto holder = DecodeLeaderRecord(kv.value);
      if (!holder.ok()) return NameStoredKey(holder.status(), leader_key_, txn.endpoint);
      if (holder->lease == lease) {
        epoch = kv.create_revision;  // ours: an earlier try was applied but its answer lost
      } else if (silence.Observe(kv, txn) && DeposeSilentLeader(silence, holder->holder)) {
        continue;  // the key is gone: create it at once
      } else if (Clock::now() + poll > deadline) {
        client_->LeaseRevoke(lease, what).ok();  // best effort: it would expire anyway
        return Status(ErrorCode::kTimeout,
                      "the leadership of " + log_name_ + " was not acquired within " +
                          std::to_string(timeout.count()) + " ms: '" + holder->holder +
                          "' leads (epoch " + std::to_string(kv.create_revision) + ")");
      } else {
        std::this_thread::sleep_for(poll);
        continue;
      }
    } else {
      continue;  // the leader went away between the compare and the read: try again
    }
    if (epoch <= 0) {
      return Status(ErrorCode::kDecisionLogUnavailable,
                    "etcd member " + txn.endpoint + " answered " + what + " without a revision");
    }
    std::lock_guard<std::mutex> lock(mu_);
    epoch_ = epoch;
    lease_ = lease;
    valid_until_ = renewed + ttl_;
    stop_ = false;
    keeper_ = std::thread([this, lease, epoch] { KeepAliveLoop(lease, epoch); });
    return epoch;
  }
}

void EtcdLeadership::KeepAliveLoop(int64_t lease, int64_t epoch) {
  const std::string what = "renew the leadership lease of " + log_name_;
  const milliseconds period = ttl_ / 4;
  const milliseconds retry = std::max(ttl_ / 20, milliseconds(50));
  const milliseconds member_timeout = std::clamp(
      ttl_ / 4, milliseconds(100), std::max(client_->request_timeout(), milliseconds(100)));
  milliseconds wait = period;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_cv_.wait_for(lock, wait, [this] { return stop_; })) return;
    }
    const Clock::time_point sent = Clock::now();
    auto ttl = client_->LeaseKeepAlive(lease, what, member_timeout);
    // The heartbeat, written only while PREFIX/leader is still this leadership's: standbys
    // depose a leader whose beat stops for a TTL, a deadline etcd does not extend at its own
    // elections as it extends leases. nullopt: not written (etcd did not answer).
    std::optional<bool> holds_key;
    if (ttl.ok() && *ttl > 0) {
      auto beat = client_->Txn(
          {etcd::Compare::CreateRevision(leader_key_, etcd::Compare::Result::kEqual, epoch)},
          {etcd::Op::Put(beat_key_, EncodeBeatRecord(BeatRecord{epoch, ttl_.count()}))}, {},
          "beat as the leader of " + log_name_);
      if (beat.ok()) holds_key = beat->succeeded;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    if (holds_key == false) {
      ended_ = true;  // deposed: a standby found this leader silent and took the key
      return;
    }
    if (ttl.ok() && *ttl > 0 && !holds_key.has_value()) {
      wait = retry;  // renewed but not beaten: what Leads() trusts is not extended
    } else if (ttl.ok() && *ttl > 0) {
      const milliseconds left = std::min<milliseconds>(ttl_, std::chrono::seconds(*ttl));
      valid_until_ = std::max(valid_until_, sent + left);
      // Renew when what is left drops to 3/4 of the TTL: a period after a prompt answer, at
      // once after a slow one (sent long ago, during an election).
      const auto remaining = std::chrono::duration_cast<milliseconds>(valid_until_ - Clock::now());
      wait = std::clamp(remaining - (ttl_ - period), milliseconds(0), period);
    } else if ((ttl.ok() && *ttl <= 0) || ttl.status().code() == ErrorCode::kNotFound) {
      ended_ = true;  // the lease expired: another may lead already
      return;
    } else {
      // No member answered (an election, a partition): Leads() turns false when valid_until_
      // passes; ask again soon rather than a whole period later.
      wait = retry;
    }
  }
}

bool EtcdLeadership::Leads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_ > 0 && !ended_ && Clock::now() < valid_until_;
}

bool EtcdLeadership::Ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

int64_t EtcdLeadership::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

void EtcdLeadership::Resign() {
  std::lock_guard<std::mutex> acquire_lock(acquire_mu_);
  StopKeepAlive();
  int64_t lease = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (epoch_ == 0 || ended_) {
      ended_ = epoch_ > 0;
      return;
    }
    ended_ = true;
    lease = lease_;
  }
  // Revoking deletes the leader key; a lease already gone (NotFound) is resigned too, and an
  // unreachable log lets it expire within the TTL.
  client_->LeaseRevoke(lease, "resign the leadership of " + log_name_).ok();
}

}  // namespace wtx
