#include "src/memory/chunk_hash_pool.h"

#include "src/util/file_util.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstring>

namespace wtx {

namespace {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

Status ReadInAndHash(ParamHashCache& cache, std::span<uint8_t> bytes, size_t offset, int fd,
                     uint64_t file_offset, size_t len) {
  assert(offset + len <= bytes.size() && "read outside the parameter");
  // Read and hashed a few chunks at a time, so that the hash reads what the read just wrote
  // from cache.
  constexpr size_t kStep = ChunkHashPool::kJobChunks * kHashChunkBytes;
  for (size_t done = 0; done < len;) {
    // Steps end on chunk boundaries (but the last).
    const size_t at = offset + done;
    const size_t stop = std::min(offset + len, (at / kHashChunkBytes) * kHashChunkBytes + kStep);
    Status s = PreadFully(fd, file_offset + done, bytes.data() + at, stop - at);
    if (!s.ok()) {
      cache.Touch(offset, len);
      return s;
    }
    // Every chunk the step changed is marked, then those it covers whole get their digest
    // (which clears the mark): only the partly covered ones at the range's ends stay marked.
    cache.Touch(at, stop - at);
    cache.HashCovered(bytes, at, stop - at);
    done = stop - offset;
  }
  return Status::OK();
}

int DataPathThreads(int requested) {
  return requested > 0 ? requested
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ChunkHashPool::ChunkHashPool(int threads) : threads_wanted_(threads) {
  assert(threads > 0 && "a pool needs a thread");
}

ChunkHashPool::~ChunkHashPool() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  work_.notify_all();
  for (auto& t : threads) t.join();
}

void ChunkHashPool::StartThreadsLocked() {
  if (!threads_.empty() || stop_) return;
  for (int i = 0; i < threads_wanted_; ++i) threads_.emplace_back([this] { Run(); });
}

void ChunkHashPool::Submit(uint32_t tag, std::span<const uint8_t> bytes, size_t first,
                           size_t count) {
  assert(count > 0 && (first + count - 1) * kHashChunkBytes < bytes.size() &&
         "chunks outside the buffer");
  {
    std::lock_guard<std::mutex> l(mu_);
    StartThreadsLocked();
    // Jobs of at most kJobChunks chunks: the threads (and a draining caller) share a large
    // landing instead of one thread taking it whole.
    for (size_t at = first, end = first + count; at < end; at += kJobChunks) {
      const size_t n = std::min(kJobChunks, end - at);
      done_.push_back({tag, at, {}});
      queue_.push_back({tag, bytes, at, n, done_.size() - 1});
    }
    submitted_.fetch_add(1, std::memory_order_release);
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

Status ChunkHashPool::RunCopy(const Batch& b, size_t k) {
  const size_t begin = k * kJobChunks * kHashChunkBytes;
  const size_t end = std::min(b.bytes, begin + kJobChunks * kHashChunkBytes);
  if (b.fd >= 0) {
    WTX_RETURN_IF_ERROR(PreadFully(b.fd, b.file_offset + begin, b.dst + begin, end - begin));
    for (size_t off = begin, c = k * kJobChunks; off < end; off += kHashChunkBytes, ++c) {
      b.digests[c] = ChunkDigest(b.dst + off, std::min(kHashChunkBytes, end - off));
    }
    return Status::OK();
  }
  for (size_t off = begin, c = k * kJobChunks; off < end; off += kHashChunkBytes, ++c) {
    const size_t n = std::min(kHashChunkBytes, end - off);
    b.digests[c] = CopyAndChunkDigest(b.dst + off, b.src + off, n);
  }
  return Status::OK();
}

bool ChunkHashPool::RunBatchJob(std::unique_lock<std::mutex>& l) {
  for (Batch* b : batches_) {
    if (b->next == b->jobs) continue;
    const size_t k = b->next++;
    l.unlock();
    Status s = RunCopy(*b, k);
    l.lock();
    if (!s.ok() && b->error.ok()) b->error = std::move(s);
    ++b->finished;
    if (b->finished == b->jobs) idle_.notify_all();
    return true;
  }
  return false;
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
    // A synchronous copy first: its caller is waiting; landed hashes can wait for prepare.
    if (RunBatchJob(l)) continue;
    if (!queue_.empty()) {
      RunOne(l);
      continue;
    }
    if (stop_) return;
    // A loader's writes come back to back: watch for the next one a little while before
    // sleeping, so that a large write does not wait for this thread's wake-up (tens of
    // microseconds, a good part of copying a few MiB).
    const uint64_t seen = submitted_.load(std::memory_order_acquire);
    l.unlock();
    const auto until = std::chrono::steady_clock::now() + kSpin;
    bool more = false;
    for (int k = 0; !more; ++k) {
      more = submitted_.load(std::memory_order_acquire) != seen;
      if (k % 64 == 63 && std::chrono::steady_clock::now() > until) break;
      CpuRelax();
    }
    l.lock();
    if (more || !batches_.empty() || !queue_.empty() || stop_) continue;
    work_.wait(l);
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

void ChunkHashPool::CopyIn(ParamHashCache& cache, std::span<uint8_t> bytes, size_t offset,
                           const void* src, size_t len) {
  const auto [first, end] = cache.CoveredChunks(offset, len);
  if (end - first < 2 * kJobChunks) {  // not worth waking a thread
    cache.CopyIn(bytes, offset, src, len);
    return;
  }
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t whole_begin = first * kHashChunkBytes;
  const size_t whole_end = std::min(end * kHashChunkBytes, bytes.size());
  // The partly covered chunks at the ends: copied here, marked touched (CopyIn's way).
  if (whole_begin > offset) cache.CopyIn(bytes, offset, s, whole_begin - offset);
  if (offset + len > whole_end) {
    cache.CopyIn(bytes, whole_end, s + (whole_end - offset), offset + len - whole_end);
  }
  std::vector<uint64_t> digests(end - first);
  Batch batch;
  batch.dst = bytes.data() + whole_begin;
  batch.src = s + (whole_begin - offset);
  batch.bytes = whole_end - whole_begin;
  batch.digests = digests.data();
  batch.jobs = (end - first + kJobChunks - 1) / kJobChunks;
  [[maybe_unused]] const Status copied = RunBatch(batch);
  assert(copied.ok() && "a copy from memory cannot fail");
  for (size_t c = first; c < end; ++c) cache.SetChunkDigest(c, digests[c - first]);
}

Status ChunkHashPool::ReadIn(ParamHashCache& cache, std::span<uint8_t> bytes, size_t offset, int fd,
                             uint64_t file_offset, size_t len) {
  const auto [first, end] = cache.CoveredChunks(offset, len);
  if (end - first < 2 * kJobChunks) {  // not worth waking a thread
    return ReadInAndHash(cache, bytes, offset, fd, file_offset, len);
  }
  const size_t whole_begin = first * kHashChunkBytes;
  const size_t whole_end = std::min(end * kHashChunkBytes, bytes.size());
  std::vector<uint64_t> digests(end - first);
  Batch batch;
  batch.dst = bytes.data() + whole_begin;
  batch.fd = fd;
  batch.file_offset = file_offset + (whole_begin - offset);
  batch.bytes = whole_end - whole_begin;
  batch.digests = digests.data();
  batch.jobs = (end - first + kJobChunks - 1) / kJobChunks;
  // The whole chunks on every thread, then the partly covered ones at the ends on this one.
  Status s = RunBatch(batch);
  if (s.ok() && whole_begin > offset) {
    s = ReadInAndHash(cache, bytes, offset, fd, file_offset, whole_begin - offset);
  }
  if (s.ok() && offset + len > whole_end) {
    s = ReadInAndHash(cache, bytes, whole_end, fd, file_offset + (whole_end - offset),
                      offset + len - whole_end);
  }
  if (!s.ok()) {
    cache.Touch(offset, len);  // the range's bytes are undefined
    return s;
  }
  for (size_t c = first; c < end; ++c) cache.SetChunkDigest(c, digests[c - first]);
  return Status::OK();
}

Status ChunkHashPool::RunBatch(Batch& batch) {
  std::unique_lock<std::mutex> l(mu_);
  StartThreadsLocked();
  batches_.push_back(&batch);
  submitted_.fetch_add(1, std::memory_order_release);
  work_.notify_all();
  // The caller works too, then waits for the jobs the threads took.
  while (batch.next < batch.jobs) {
    const size_t k = batch.next++;
    l.unlock();
    Status s = RunCopy(batch, k);
    l.lock();
    if (!s.ok() && batch.error.ok()) batch.error = std::move(s);
    ++batch.finished;
  }
  idle_.wait(l, [&] { return batch.finished == batch.jobs; });
  batches_.erase(std::find(batches_.begin(), batches_.end(), &batch));
  return batch.error;
}

}  // namespace wtx
