// EtcdLeadership: the Leadership of an etcd decision log (wtx/decision_log.h). The leader is
// whoever created PREFIX/leader; the key is attached to the leader's lease, so it disappears
// when the lease expires or is revoked, and its create revision is the leader's epoch (etcd's
// revisions only grow, so every leader's epoch is larger than every earlier one's).
//
// Contract:
//  * Acquire grants a lease of ceil(ttl) seconds (at least 1) and creates PREFIX/leader with it
//    in a transaction that requires the key to be absent; while another holds it, it retries
//    every max(ttl/4, 100 ms) (keeping its own lease alive) until `timeout`, then kTimeout
//    naming the holder and its epoch (and revokes its unused lease). An etcd that cannot
//    answer (kDecisionLogUnavailable: an election, members restarting) is retried the same way
//    until `timeout`, so that a standby taking over during an etcd election does not give up.
//  * After Acquire a thread renews the lease every ttl/4 (at once after a renewal that took
//    long, so that what Leads() trusts never drops below 3/4 ttl while etcd answers). A
//    renewal gives each etcd member at
//    most max(ttl/4, 100 ms) (a member without a raft leader stalls) before asking the next,
//    and one that no member answered is retried every max(ttl/20, 50 ms), not ttl/4 later, so
//    that the first renewal after an etcd election lands as soon as a member answers. Leads()
//    is true while the last successful renewal (or the acquisition) was sent less than `ttl`
//    ago; a renewal that finds the lease gone ends the leadership for good (Ended(); no
//    re-acquiring: make a new Leadership). A leadership whose renewals failed for a while
//    (Leads() false, not Ended()) leads again after the next successful renewal: the lease,
//    and so the leader key and the epoch, were never lost (etcd extends every lease when a new
//    raft leader is elected).
//  * The leader beats: after every renewal it rewrites PREFIX/beat (its epoch and TTL) in a
//    transaction that requires PREFIX/leader to be its own (create revision == epoch); Leads()
//    is extended only by a renewal whose beat was written. A beat refused because the key is no
//    longer its own ends the leadership (deposed).
//  * A standby waiting in Acquire deposes a silent leader: when neither PREFIX/leader's create
//    revision nor PREFIX/beat's mod revision has changed for two TTLs (the larger of its own and
//    the leader's), by its own clock, it deletes PREFIX/leader in a transaction requiring both
//    unchanged, and creates it at once. etcd extends every lease when it elects a new raft
//    leader, so a dead leader's key would outlive the election by a whole TTL; this deadline is
//    wtx's own and etcd does not extend it. A live leader deposed this way (it could not write
//    a beat for a TTL) is fenced like any deposed leader: its decisions require its epoch and
//    are refused (E_STALE_COORDINATOR), so nothing is decided twice.
//  * Resign revokes the lease (deleting the key: a standby may take over at once). The
//    destructor only stops the renewals: like a crashed process, it leaves the key to expire.
//
// Thread-safety: every method is safe from any thread (Acquire and Resign are serialized).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "src/etcd/etcd_client.h"
#include "src/util/thread_annotations.h"
#include "wtx/decision_log.h"

namespace wtx {

class EtcdLeadership final : public Leadership {
 public:
  // `leader_key`: PREFIX/leader; `log_name`: the log's url for messages. REQUIRES: ttl > 0.
  EtcdLeadership(std::shared_ptr<etcd::Client> client, std::string leader_key, std::string holder,
                 std::chrono::milliseconds ttl, std::string log_name);
  ~EtcdLeadership() override;

  Result<int64_t> Acquire(std::chrono::milliseconds timeout) override;
  bool Leads() const override;
  bool Ended() const override;
  int64_t epoch() const override;
  void Resign() override;

 private:
  using Clock = std::chrono::steady_clock;

  // What a standby saw of the leader it waits for: the leader key's create revision and the
  // beat's mod revision, when either last changed (its own clock), and how long a silence it
  // allows (two TTLs: the larger of its own and the one the leader's beat states).
  struct SilenceWatch {
    int64_t leader_rev = -1;
    int64_t beat_rev = -1;
    Clock::time_point changed_at;
    std::chrono::milliseconds own_ttl{0};
    std::chrono::milliseconds deadline{0};
    // Records what `txn` (the failed create: [leader, beat] read back) shows; true when the
    // leader `leader` has been silent past the deadline.
    bool Observe(const etcd::KeyValue& leader, const etcd::TxnResponse& txn);
  };
  // Deletes PREFIX/leader if neither it nor the beat changed since `silence` saw them; true if
  // it did.
  bool DeposeSilentLeader(const SilenceWatch& silence, const std::string& holder);

  // Renews `lease` every ttl/4, beating as leader `epoch`, until stopped, the lease is gone or
  // the leader key is no longer this leadership's.
  void KeepAliveLoop(int64_t lease, int64_t epoch);
  // Stops and joins the renewal thread, if any.
  void StopKeepAlive() REQUIRES(acquire_mu_);

  const std::shared_ptr<etcd::Client> client_;
  const std::string leader_key_;
  const std::string beat_key_;  // PREFIX/beat
  const std::string holder_;
  const std::chrono::milliseconds ttl_;
  const std::string log_name_;

  std::mutex acquire_mu_;                       // serializes Acquire, Resign and the destructor
  std::thread keeper_ GUARDED_BY(acquire_mu_);  // the renewal thread

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  int64_t epoch_ GUARDED_BY(mu_) = 0;  // 0: never acquired
  int64_t lease_ GUARDED_BY(mu_) = 0;
  Clock::time_point valid_until_ GUARDED_BY(mu_);
  bool ended_ GUARDED_BY(mu_) = false;  // resigned, or the lease was found gone
  bool stop_ GUARDED_BY(mu_) = false;   // tells the renewal thread to return
};

}  // namespace wtx
