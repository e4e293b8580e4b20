// FanOut: runs one call per rank concurrently on a bounded pool of threads and returns when
// every call has returned. The coordinator uses it for each phase of a transaction (describe,
// check, begin, prepare, decide), so a phase costs the slowest rank's answer (or one timeout),
// not the sum over ranks.
//
// Contract: Run(n, fn) calls fn(i) exactly once for every i in [0, n), each on some thread
// (pool threads or the caller), and returns after the last call returned; every write fn made
// happens-before Run returns. At most `max_threads` calls run at once per pool (the caller
// helps, so a pool of one thread still runs two calls at a time); when more calls block than
// there are threads, the remaining calls wait for a free thread, so a phase with k silent ranks
// costs ceil(k / (max_threads + 1)) timeouts. Threads are started lazily, as calls need them,
// and live until the pool is destroyed.
//
// Thread-safety: Run may be called from several threads at once (their calls share the pool).
// REQUIRES: fn must not call Run on the same pool (a pool thread waiting for the pool could
// deadlock it).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "src/util/thread_annotations.h"

namespace wtx {

class FanOut {
 public:
  explicit FanOut(int max_threads);
  ~FanOut();
  FanOut(const FanOut&) = delete;
  FanOut& operator=(const FanOut&) = delete;

  void Run(int n, const std::function<void(int)>& fn);
  // Starts threads now, up to `n` in all (and max_threads), so that the first Run that needs
  // them does not pay their start-up (a tail latency of the first transaction).
  void Prestart(int n);

 private:
  struct Batch;
  struct Task {
    Batch* batch;
    int index;
  };
  void Work() EXCLUDES(mu_);
  static void Execute(const Task& t);

  const int max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;  // a task was queued, or stopping_ set
  std::deque<Task> queue_ GUARDED_BY(mu_);
  // Written under mu_ (Run starts threads); joined by the destructor, when no Run is active.
  std::vector<std::thread> threads_;
  int idle_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace wtx
