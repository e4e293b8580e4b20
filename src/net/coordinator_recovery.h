// CoordinatorRecovery: the recovery duties of a coordinator process on the TCP transport
// (docs/protocol.md, "Recovery"), apart from the process that hosts it (`wtx coordinator`).
// Start() runs, in the background: wait up to `startup_wait` for every rank; Recover (re-send
// the logged decisions that lack END); only then install the coordinator as the transport's
// decision oracle, so that in-doubt ranks are answered after the re-sends; and from then on
// re-send pending decisions whenever a rank (re)registers. Failures are logged, never fatal:
// the next registration retries.
//
// Thread-safety: Start and Stop are called by the owning thread; the work runs on the
// object's own threads. Stop (or the destructor) returns once they have ended; call the
// transport's Shutdown() first so that a startup wait ends at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "src/util/thread_annotations.h"
#include "wtx/coordinator.h"
#include "wtx/tcp_transport.h"

namespace wtx::net {

class CoordinatorRecovery {
 public:
  // REQUIRES: coordinator and transport outlive this object; transport is the coordinator's.
  CoordinatorRecovery(Coordinator* coordinator, TcpTransport* transport);
  ~CoordinatorRecovery();  // Stop()
  CoordinatorRecovery(const CoordinatorRecovery&) = delete;
  CoordinatorRecovery& operator=(const CoordinatorRecovery&) = delete;

  // REQUIRES: called at most once, before Stop.
  void Start(int ranks, std::chrono::milliseconds startup_wait);
  // Marks the work as ending without waiting for it: call it before shutting the transport
  // down, so that a startup wait the shutdown cuts short is not taken for ranks that never
  // came (no "not every rank connected" line, no recovery on the way out).
  void RequestStop();
  // Ends the background work and unhooks the transport (no oracle, no registration callback).
  // Idempotent: after the first call the transport is no longer touched (it may be gone).
  void Stop();

 private:
  void Startup(int ranks, std::chrono::milliseconds startup_wait);
  void Resend();  // the re-send thread: one Recover per batch of registrations

  Coordinator* const c_;
  TcpTransport* const t_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool kicked_ GUARDED_BY(mu_) = false;
  std::thread startup_;
  std::thread resend_;
  bool stopped_ = false;  // owner thread only
};

}  // namespace wtx::net
