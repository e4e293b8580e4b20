// ChunkHashPool: threads that compute chunk digests (content_hash.h) of host bytes in the
// background. The participant hands it the chunks an in-place landing covered whole when its
// options ask for landing_hash_threads > 0, so that the engine's thread goes on to its next
// transfer while the landed bytes are hashed on another core (still likely in the shared
// cache), and collects the digests before prepare reads the hash caches.
//
// Contract: the bytes of a submitted job must stay alive and unchanged until Drain() has
// returned it (the participant drains before anything may write them: prepare, decide, close).
// Digests are XXH3 of each 64 KiB chunk, exactly as ChunkDigest computes them.
//
// Thread-safety: Submit and Drain may be called from any thread (internally synchronized); the
// destructor waits for the queued jobs and joins the threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "src/util/thread_annotations.h"

namespace wtx {

class ChunkHashPool {
 public:
  // REQUIRES: threads > 0
  explicit ChunkHashPool(int threads);
  ~ChunkHashPool();
  ChunkHashPool(const ChunkHashPool&) = delete;
  ChunkHashPool& operator=(const ChunkHashPool&) = delete;

  // Digests of chunks [first, first + count) of `bytes` (the last chunk of `bytes` may be
  // shorter), tagged `tag` (the participant: a parameter index).
  // REQUIRES: count > 0, first + count <= the number of chunks of `bytes`.
  void Submit(uint32_t tag, std::span<const uint8_t> bytes, size_t first, size_t count);

  struct Done {
    uint32_t tag;
    size_t first;
    std::vector<uint64_t> digests;
  };
  // Waits until every job submitted so far is hashed and returns them all (then forgets them).
  // The calling thread hashes the jobs no pool thread has started.
  std::vector<Done> Drain();
  // Jobs submitted and not yet drained.
  size_t outstanding() const;

 private:
  struct Job {
    uint32_t tag;
    std::span<const uint8_t> bytes;
    size_t first;
    size_t count;
    size_t slot;  // index in done_
  };
  static constexpr size_t kJobChunks = 16;  // 1 MiB of 64 KiB chunks per job
  static std::vector<uint64_t> Hash(const Job& job);
  // Pops the first queued job, hashes it with mu_ released, stores its digests.
  // REQUIRES: l holds mu_, the queue is not empty.
  void RunOne(std::unique_lock<std::mutex>& l);
  void Run();

  mutable std::mutex mu_;
  std::condition_variable work_;  // a job was queued, or stopping
  std::condition_variable idle_;  // a job finished
  std::deque<Job> queue_ GUARDED_BY(mu_);
  std::vector<Done> done_ GUARDED_BY(mu_);
  size_t running_ GUARDED_BY(mu_) = 0;  // jobs being hashed with mu_ released
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace wtx
