// ChunkHashPool: the data path's worker threads. They copy and hash host bytes in 64 KiB
// chunks (content_hash.h) beside the calling thread, in two ways:
//  * CopyIn (synchronous): one large copy into a parameter is split into jobs of whole chunks
//    that the caller and the pool's threads take in turn, each copying its chunks with the
//    fused copy+hash kernel (CopyAndChunkDigest: streaming stores, one read of every byte);
//    it returns when every byte is copied and every digest is installed in the hash cache.
//  * Submit / Drain (background): the chunks an in-place landing covered whole are hashed
//    while the engine's thread goes on to its next transfer (newest first: the bytes landed
//    last are the likeliest to be still in cache); Drain collects the digests before prepare
//    reads the hash caches.
//  * ReadIn (synchronous): as CopyIn, with the bytes read from a file (pread) straight into
//    the destination, each job hashing its chunks right after its read, from cache.
// The threads start at the first job, so a participant that never moves a large write costs
// no thread.
//
// Contract: the bytes of a submitted job must stay alive and unchanged until Drain() has
// returned it (the participant drains before anything may write them: prepare, decide, close).
// Digests are XXH3 of each 64 KiB chunk, exactly as ChunkDigest computes them.
//
// Thread-safety: Submit, Drain and CopyIn may be called from any thread (internally
// synchronized; CopyIn's `cache` must not be used by another thread meanwhile); the destructor
// waits for the queued jobs and joins the threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "src/util/thread_annotations.h"
#include "wtx/content_hash.h"
#include "wtx/status.h"

namespace wtx {

// The data-path threads of ParticipantOptions::threads = `requested` (0: one per core, at
// least 1), the caller's included: the one rule the participant and `wtx bench`'s baselines
// share.
int DataPathThreads(int requested);

// Reads `len` bytes at `file_offset` of the open file `fd` (pread, resumed after short reads
// and EINTR) into bytes[offset, offset + len) and keeps `cache` exact, as
// ParamHashCache::CopyIn does: each chunk the range covers whole is hashed right after its
// read, while in cache; the partly covered ones at the ends are marked touched. A failed read,
// or a file that ends before the range does, is kIOError naming the file range; the bytes of
// the range are then undefined and all of it is marked touched.
// REQUIRES: as ParamHashCache::CopyIn.
Status ReadInAndHash(ParamHashCache& cache, std::span<uint8_t> bytes, size_t offset, int fd,
                     uint64_t file_offset, size_t len);

class ChunkHashPool {
 public:
  // Chunks per job: 256 KiB. A copy is split across threads only when it covers at least two
  // jobs' worth of whole chunks; smaller ones are not worth a wake-up.
  static constexpr size_t kJobChunks = 4;

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

  // ParamHashCache::CopyIn, with the whole chunks copied and hashed by the calling thread and
  // the pool's threads together (the partly covered chunks at the ends are copied by the
  // caller and marked touched, as CopyIn does). Same REQUIRES as ParamHashCache::CopyIn.
  void CopyIn(ParamHashCache& cache, std::span<uint8_t> bytes, size_t offset, const void* src,
              size_t len);
  // ReadInAndHash, with the jobs of whole chunks (each a pread then its digests) taken by the
  // calling thread and the pool's threads together: several reads in flight.
  Status ReadIn(ParamHashCache& cache, std::span<uint8_t> bytes, size_t offset, int fd,
                uint64_t file_offset, size_t len);

 private:
  struct Batch;
  struct Job {
    uint32_t tag;
    std::span<const uint8_t> bytes;
    size_t first;
    size_t count;
    size_t slot;  // index in done_
  };
  // A synchronous copy: jobs [next, jobs) are unclaimed; `finished` counts completed ones.
  struct Batch {
    uint8_t* dst;                  // chunk `first` of the destination
    const uint8_t* src = nullptr;  // its bytes, or
    int fd = -1;                   // the file they are read from, at
    uint64_t file_offset = 0;
    size_t bytes;       // from dst/src to the end of the last whole chunk
    uint64_t* digests;  // one per chunk, from chunk `first`
    size_t jobs = 0;
    size_t next = 0;
    size_t finished = 0;
    Status error;  // the first job that failed (reads only); guarded by the pool's mu_
  };
  static std::vector<uint64_t> Hash(const Job& job);
  // Copies (or reads) and hashes job `k` of `batch` (with mu_ released).
  static Status RunCopy(const Batch& batch, size_t k);
  // Runs `batch` with the pool's threads; returns its first error.
  Status RunBatch(Batch& batch);
  // Pops the newest queued job, hashes it with mu_ released, stores its digests.
  // REQUIRES: l holds mu_, the queue is not empty.
  void RunOne(std::unique_lock<std::mutex>& l);
  // Claims and runs one job of the first batch with unclaimed jobs. REQUIRES: l holds mu_.
  // Returns false when no batch has one.
  bool RunBatchJob(std::unique_lock<std::mutex>& l);
  void Run();
  // Starts the threads the first time there is work. REQUIRES: mu_ held.
  void StartThreadsLocked();

  // How long an idle thread watches for the next job before it sleeps.
  static constexpr std::chrono::microseconds kSpin{50};

  const int threads_wanted_;
  std::atomic<uint64_t> submitted_{0};  // counts Submit calls and batches (CopyIn, ReadIn)
  mutable std::mutex mu_;
  std::condition_variable work_;  // a job was queued, or stopping
  std::condition_variable idle_;  // a job finished
  std::deque<Job> queue_ GUARDED_BY(mu_);
  std::vector<Batch*> batches_ GUARDED_BY(mu_);  // copies in progress (owned by their callers)
  std::vector<Done> done_ GUARDED_BY(mu_);
  size_t running_ GUARDED_BY(mu_) = 0;  // queued jobs being hashed with mu_ released
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
};

}  // namespace wtx
