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
  void Run();

  mutable std::mutex mu_;
  std::condition_variable work_;  // a job was queued, or stopping
  std::condition_variable idle_;  // a job finished
  std::deque<Job> queue_;
  std::vector<Done> done_;
  size_t running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace wtx
