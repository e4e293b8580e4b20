#include "wtx/live_memory.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/memory/host_arena.h"
#include "wtx/content_hash.h"

namespace wtx {

Status LiveMemory::Store(uint32_t index, size_t offset, const void* src, size_t len) {
  std::span<uint8_t> b = Param(index);
  assert(offset + len <= b.size() && "store past the parameter");
  if (len > 0) std::memcpy(b.data() + offset, src, len);
  return Status::OK();
}

Status LiveMemory::Load(uint32_t index, size_t offset, void* dst, size_t len) {
  std::span<uint8_t> b = Param(index);
  assert(offset + len <= b.size() && "load past the parameter");
  if (len > 0) std::memcpy(dst, b.data() + offset, len);
  return Status::OK();
}

Status LiveMemory::Scatter(uint32_t index, std::span<const int64_t> flat, const void* values,
                           size_t elem_size, void* before) {
  std::span<uint8_t> b = Param(index);
  const auto* v = static_cast<const uint8_t*>(values);
  auto* old = static_cast<uint8_t*>(before);
  for (size_t k = 0; k < flat.size(); ++k) {
    const size_t off = static_cast<size_t>(flat[k]) * elem_size;
    assert(flat[k] >= 0 && off + elem_size <= b.size() && "scatter index outside the parameter");
    if (old) std::memcpy(old + k * elem_size, b.data() + off, elem_size);
    std::memcpy(b.data() + off, v + k * elem_size, elem_size);
  }
  return Status::OK();
}

Status LiveMemory::ChunkDigests(uint32_t index, size_t first, size_t count, uint64_t* out) {
  std::span<uint8_t> b = Param(index);
  for (size_t k = 0; k < count; ++k) {
    const size_t off = (first + k) * kHashChunkBytes;
    assert(off < b.size() || (off == 0 && b.empty()));
    out[k] = ChunkDigest(b.data() + off, std::min(kHashChunkBytes, b.size() - off));
  }
  return Status::OK();
}

Status LiveMemory::StoreFromDevice(uint32_t index, size_t, const void*, size_t) {
  return Status::InvalidArgument("parameter " + std::to_string(index) +
                                 ": a device source needs device live memory (this rank's live "
                                 "bytes are host memory)");
}

Status LiveMemory::CopyDeviceToHost(const void*, void*, size_t) {
  return Status::InvalidArgument(
      "a device array needs device live memory (this rank's live bytes are host memory)");
}

Status LiveMemory::Rebind(uint32_t index, uint64_t) {
  return Status::InvalidArgument("parameter " + std::to_string(index) +
                                 ": this live memory is owned by wtx, not borrowed; it cannot be "
                                 "rebound to other storage");
}

namespace {

class HostLiveMemory : public LiveMemory {
 public:
  explicit HostLiveMemory(const Manifest& m) {
    for (const auto& p : m.params()) sizes_.push_back(static_cast<size_t>(p.live_bytes()));
    Allocate();
  }
  std::span<uint8_t> Param(uint32_t i) override { return arena_->Region(i); }
  void Discard() override { Allocate(); }

 private:
  // Fresh zero pages: the old arena is unmapped first, so the process never holds both.
  void Allocate() {
    arena_.reset();
    arena_ = std::make_unique<HostArena>(sizes_);
  }
  std::vector<size_t> sizes_;
  std::unique_ptr<HostArena> arena_;  // src/memory/host_arena.h
};

class BorrowedLiveMemory : public LiveMemory {
 public:
  explicit BorrowedLiveMemory(std::vector<std::span<uint8_t>> spans) : spans_(std::move(spans)) {}
  std::span<uint8_t> Param(uint32_t i) override { return spans_[i]; }
  void Discard() override {
    for (auto s : spans_) std::memset(s.data(), 0, s.size());
  }
  Status Rebind(uint32_t index, uint64_t address) override {
    spans_[index] = {reinterpret_cast<uint8_t*>(address), spans_[index].size()};  // NOLINT
    return Status::OK();
  }

 private:
  std::vector<std::span<uint8_t>> spans_;
};

}  // namespace

std::unique_ptr<LiveMemory> NewHostLiveMemory(const Manifest& manifest) {
  return std::make_unique<HostLiveMemory>(manifest);
}

Result<std::unique_ptr<LiveMemory>> NewBorrowedLiveMemory(const Manifest& manifest,
                                                          std::vector<std::span<uint8_t>> spans) {
  if (spans.size() != manifest.params().size()) {
    return Status::InvalidArgument("borrowed memory: " + std::to_string(spans.size()) +
                                   " buffers for " + std::to_string(manifest.params().size()) +
                                   " parameters");
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto& p = manifest.params()[i];
    if (spans[i].size() != static_cast<size_t>(p.live_bytes())) {
      return Status::InvalidArgument("borrowed memory: buffer of " + p.name + " has " +
                                     std::to_string(spans[i].size()) + " bytes, expected " +
                                     std::to_string(p.live_bytes()));
    }
  }
  return std::unique_ptr<LiveMemory>(std::make_unique<BorrowedLiveMemory>(std::move(spans)));
}

}  // namespace wtx
