// HostArena: one zeroed, 2 MiB-aligned host mapping holding every parameter of a rank's host
// live memory (NewHostLiveMemory), each parameter at a 64-byte aligned offset.
//
// Why one mapping: the whole arena is advised to transparent huge pages (where the kernel
// allows them: madvise mode), so the first write of any 2 MiB takes one fault instead of 512,
// whatever the sizes of the parameters in it. Per-parameter buffers left every parameter under
// 4 MiB (attention projections at tp > 1) and every large one's tail on 4 KiB pages, and a
// load into fresh live memory (`wtx load`) spent most of its time in those faults on machines
// where a fault is expensive (paravirtualized guests). The OS still hands the pages out lazily:
// untouched parameters cost nothing. Every 64 KiB hash chunk starts on a 64-byte boundary, so
// the fused copy+hash kernel streams whole 64-byte (AVX-512) or 32-byte (AVX2) stores.
//
// Under AddressSanitizer each parameter is followed by a poisoned red zone of at least 64
// bytes, so a store past a parameter is reported as it would be for separate allocations.
//
// Thread-safety: immutable after construction; the bytes are the caller's to synchronize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wtx {

class HostArena {
 public:
  // A zeroed region for each of `sizes` (in order). A mapping that fails (a process at its
  // map count or address-space limit) falls back to one zeroed heap allocation.
  explicit HostArena(const std::vector<size_t>& sizes);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // REQUIRES: i < number of sizes given.
  std::span<uint8_t> Region(size_t i) const { return {base_ + offsets_[i], sizes_[i]}; }

 private:
  std::vector<size_t> sizes_;
  std::vector<size_t> offsets_;
  size_t bytes_ = 0;  // the regions, their alignment and red zones
  uint8_t* base_ = nullptr;
  bool mapped_ = false;
};

}  // namespace wtx
