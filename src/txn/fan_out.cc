#include "src/txn/fan_out.h"

#include <algorithm>
#include <cassert>

namespace wtx {

struct FanOut::Batch {
  const std::function<void(int)>* fn;
  std::mutex mu;
  std::condition_variable done_cv;
  int remaining GUARDED_BY(mu);
};

FanOut::FanOut(int max_threads) : max_threads_(max_threads < 1 ? 1 : max_threads) {}

FanOut::~FanOut() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void FanOut::Execute(const Task& t) {
  (*t.batch->fn)(t.index);
  std::lock_guard<std::mutex> l(t.batch->mu);
  if (--t.batch->remaining == 0) t.batch->done_cv.notify_all();
}

void FanOut::Work() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, nothing left
    Task t = queue_.front();
    queue_.pop_front();
    l.unlock();
    Execute(t);
    l.lock();
  }
}

void FanOut::Prestart(int n) {
  std::lock_guard<std::mutex> l(mu_);
  while (static_cast<int>(threads_.size()) < std::min(n, max_threads_)) {
    threads_.emplace_back([this] { Work(); });
  }
}

void FanOut::Run(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (n == 1) {
    fn(0);
    return;
  }
  Batch batch;
  batch.fn = &fn;
  batch.remaining = n;
  {
    std::lock_guard<std::mutex> l(mu_);
    assert(!stopping_ && "FanOut::Run on a pool being destroyed");
    // Index 0 runs on the caller; the others are queued for the pool.
    for (int i = 1; i < n; ++i) queue_.push_back({&batch, i});
    int missing = static_cast<int>(queue_.size()) - idle_;
    while (missing-- > 0 && static_cast<int>(threads_.size()) < max_threads_) {
      threads_.emplace_back([this] { Work(); });
    }
  }
  cv_.notify_all();
  Execute({&batch, 0});
  // The caller helps with its own batch's queued calls instead of only waiting.
  for (;;) {
    Task t{nullptr, 0};
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if (it->batch == &batch) {
          t = *it;
          queue_.erase(it);
          break;
        }
      }
    }
    if (!t.batch) break;
    Execute(t);
  }
  std::unique_lock<std::mutex> l(batch.mu);
  batch.done_cv.wait(l, [&] { return batch.remaining == 0; });
}

}  // namespace wtx
