// Internal helpers of the `wtx bench` measurements: scratch directories that remove
// themselves, aligned buffers, progress lines.
//
// Thread-safety: ScratchDir::Make and the objects are not synchronized; one bench at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "src/txn/test_hooks.h"
#include "tools/bench/bench.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"
#include "wtx/participant.h"
#include "wtx/status.h"

namespace wtx::bench {

// A fresh directory under `parent`, removed with everything in it on destruction.
class ScratchDir {
 public:
  static Result<ScratchDir> Make(const std::string& parent, const std::string& name);
  ScratchDir(ScratchDir&& o) noexcept : path_(std::exchange(o.path_, std::string())) {}
  ScratchDir& operator=(ScratchDir&&) = delete;
  ~ScratchDir();
  const std::string& path() const { return path_; }

 private:
  ScratchDir() = default;
  std::string path_;
};

// n bytes, 64-byte aligned; `zeroed` ones come from calloc instead (16-byte aligned, zero pages
// the OS maps lazily, so memory never touched is never resident). data() is null when the
// allocation failed.
class Buffer {
 public:
  Buffer(size_t n, bool zeroed);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() { return p_; }
  // Advises the kernel to back the buffer with transparent huge pages, as host live memory is
  // (src/memory/live_memory.cc): a baseline writing fresh memory pays the same faults.
  void AdviseHugePages();
  size_t size() const { return size_; }

 private:
  uint8_t* p_ = nullptr;
  size_t size_ = 0;
};

void Progress(const BenchOptions& options, const std::string& line);

// The one-rank (tp 1) bf16 manifest of options.model: the model the update and landing figures
// move.
Result<ManifestPtr> Tp1Bf16Manifest(const BenchOptions& options);

// One rank and a coordinator over the in-process transport, journals under `dir` (rank0/,
// coordinator/). Members are destroyed coordinator first.
struct OneRankOptions {
  ParticipantHooks hooks;
  std::shared_ptr<LiveMemory> memory;  // null: the participant's own host buffers
  int threads = 0;                     // ParticipantOptions::threads
};
struct OneRank {
  std::unique_ptr<Participant> participant;
  std::unique_ptr<InProcTransport> transport;
  std::unique_ptr<Coordinator> coordinator;
};
Result<OneRank> OpenOneRank(const std::string& dir, ManifestPtr manifest,
                            const OneRankOptions& options = {});

}  // namespace wtx::bench
