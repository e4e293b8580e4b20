#include "src/memory/host_arena.h"

#include <sys/mman.h>

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define WTX_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WTX_ARENA_ASAN 1
#endif
#endif
#ifdef WTX_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace wtx {

namespace {

constexpr size_t kAlign = 64;  // one cache line: whole AVX-512 streaming stores
constexpr size_t kPage = 4096;
constexpr size_t kHuge = size_t{2} << 20;
#ifdef WTX_ARENA_ASAN
constexpr size_t kRedZone = kAlign;
#else
constexpr size_t kRedZone = 0;
#endif

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

HostArena::HostArena(const std::vector<size_t>& sizes) : sizes_(sizes) {
  offsets_.reserve(sizes_.size());
  for (size_t s : sizes_) {
    offsets_.push_back(bytes_);
    bytes_ = RoundUp(bytes_ + s + kRedZone, kAlign);
  }
  const size_t length = RoundUp(bytes_ > 0 ? bytes_ : 1, kPage);
  // Mapped with 2 MiB of slack, then trimmed to a 2 MiB-aligned start.
  void* a =
      mmap(nullptr, length + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a != MAP_FAILED) {
    auto* raw = static_cast<uint8_t*>(a);
    const size_t head = (kHuge - reinterpret_cast<uintptr_t>(raw) % kHuge) % kHuge;
    if (head > 0) munmap(raw, head);
    if (kHuge > head) munmap(raw + head + length, kHuge - head);
    base_ = raw + head;
    mapped_ = true;
    // Advice failures are ignored: the pages are then 4 KiB, which is only slower.
    if (length >= kHuge) madvise(base_, length, MADV_HUGEPAGE);
  } else {
    base_ = static_cast<uint8_t*>(std::aligned_alloc(kAlign, RoundUp(length, kAlign)));
    if (base_ == nullptr) throw std::bad_alloc();
    std::memset(base_, 0, length);
  }
#ifdef WTX_ARENA_ASAN
  for (size_t i = 0; i < sizes_.size(); ++i) {
    const size_t end = offsets_[i] + sizes_[i];
    const size_t next = i + 1 < sizes_.size() ? offsets_[i + 1] : bytes_;
    ASAN_POISON_MEMORY_REGION(base_ + end, next - end);
  }
#endif
}

HostArena::~HostArena() {
#ifdef WTX_ARENA_ASAN
  ASAN_UNPOISON_MEMORY_REGION(base_, bytes_);
#endif
  if (mapped_) {
    munmap(base_, RoundUp(bytes_ > 0 ? bytes_ : 1, kPage));
  } else {
    std::free(base_);
  }
}

}  // namespace wtx
