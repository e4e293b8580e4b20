#include "src/memory/chunk_hash_pool.h"

#include <algorithm>
#include <cassert>

#include "wtx/content_hash.h"

namespace wtx {

ChunkHashPool::ChunkHashPool(int threads) {
  assert(threads > 0 && "a pool needs a thread");
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

ChunkHashPool::~ChunkHashPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

void ChunkHashPool::Submit(uint32_t tag, std::span<const uint8_t> bytes, size_t first,
                           size_t count) {
  assert(count > 0 && (first + count - 1) * kHashChunkBytes < bytes.size() &&
         "chunks outside the buffer");
  {
    std::lock_guard<std::mutex> l(mu_);
    // Jobs of at most kJobChunks chunks: the threads (and a draining caller) share a large
    // landing instead of one thread taking it whole.
    for (size_t at = first, end = first + count; at < end; at += kJobChunks) {
      const size_t n = std::min(kJobChunks, end - at);
      done_.push_back({tag, at, {}});
      queue_.push_back({tag, bytes, at, n, done_.size() - 1});
    }
  }
  work_.notify_all();
}

std::vector<uint64_t> ChunkHashPool::Hash(const Job& job) {
  std::vector<uint64_t> digests(job.count);
  for (size_t k = 0; k < job.count; ++k) {
    const size_t off = (job.first + k) * kHashChunkBytes;
    digests[k] =
        ChunkDigest(job.bytes.data() + off, std::min(kHashChunkBytes, job.bytes.size() - off));
  }
  return digests;
}

void ChunkHashPool::RunOne(std::unique_lock<std::mutex>& l) {
  assert(!queue_.empty() && "RunOne needs a queued job");
  // Newest first: the bytes landed last are the likeliest to be still in cache (the engine's
  // next transfer evicts the older ones first).
  Job job = queue_.back();
  queue_.pop_back();
  ++running_;
  l.unlock();
  std::vector<uint64_t> digests = Hash(job);
  l.lock();
  done_[job.slot].digests = std::move(digests);
  --running_;
  idle_.notify_all();
}

void ChunkHashPool::Run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    work_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to do
    RunOne(l);
  }
}

std::vector<ChunkHashPool::Done> ChunkHashPool::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  // The caller hashes what no thread has taken yet instead of waiting idle (the pool's
  // threads may have no core of their own).
  while (!queue_.empty()) RunOne(l);
  idle_.wait(l, [&] { return queue_.empty() && running_ == 0; });
  std::vector<Done> out;
  out.swap(done_);
  return out;
}

size_t ChunkHashPool::outstanding() const {
  std::lock_guard<std::mutex> l(mu_);
  return done_.size();
}

}  // namespace wtx
