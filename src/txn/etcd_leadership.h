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

  // Renews `lease` every ttl/4 until stopped or the lease is gone.
  void KeepAliveLoop(int64_t lease);
  // Stops and joins the renewal thread, if any.
  void StopKeepAlive() REQUIRES(acquire_mu_);

  const std::shared_ptr<etcd::Client> client_;
  const std::string leader_key_;
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
