// NewReferenceDeviceLiveMemory (the device contract on the kernels' CPU references), the
// LiveMemoryKind helpers, and NewDeviceLiveMemory for builds without the CUDA kernels.
#include "wtx/device_live_memory.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "wtx/content_hash.h"
#include "wtx/gpu.h"

namespace wtx {
namespace {

class ReferenceDeviceLiveMemory : public LiveMemory {
 public:
  // Owned, zeroed buffers.
  explicit ReferenceDeviceLiveMemory(const Manifest& m) {
    for (const auto& p : m.params()) {
      owned_.emplace_back(static_cast<size_t>(p.num_bytes()), 0);
      bufs_.emplace_back(owned_.back().data(), owned_.back().size());
    }
  }
  // Borrowed buffers (the caller's "device tensors"), left as they are.
  explicit ReferenceDeviceLiveMemory(std::vector<std::span<uint8_t>> spans)
      : bufs_(std::move(spans)) {}

  std::span<uint8_t> Param(uint32_t) override { return {}; }  // not host-addressable
  void Discard() override {
    for (auto& b : bufs_) std::fill(b.begin(), b.end(), 0);
  }
  bool HostAddressable() const override { return false; }
  size_t Size(uint32_t i) override { return bufs_[i].size(); }

  Status Store(uint32_t i, size_t offset, const void* src, size_t len) override {
    WTX_RETURN_IF_ERROR(CheckRange(i, offset, len, "store"));
    if (len > 0) std::memmove(bufs_[i].data() + offset, src, len);
    return Status::OK();
  }
  Status Load(uint32_t i, size_t offset, void* dst, size_t len) override {
    WTX_RETURN_IF_ERROR(CheckRange(i, offset, len, "load"));
    if (len > 0) std::memcpy(dst, bufs_[i].data() + offset, len);
    return Status::OK();
  }
  Status Scatter(uint32_t i, std::span<const int64_t> flat, const void* values, size_t elem_size,
                 void* before) override {
    return ScatterRef(bufs_[i].data(), bufs_[i].size(), flat, values, elem_size, before,
                      before ? flat.size() * elem_size : 0);
  }
  Status ChunkDigests(uint32_t i, size_t first, size_t count, uint64_t* out) override {
    const size_t begin = first * kHashChunkBytes;
    if (count == 0) return Status::OK();
    if (begin >= bufs_[i].size()) {
      return Status::Error(ErrorCode::kOutOfRange, "chunk " + std::to_string(first) +
                                                       " outside parameter " + std::to_string(i));
    }
    const size_t bytes = std::min(count * kHashChunkBytes, bufs_[i].size() - begin);
    ChunkDigestsRef(bufs_[i].data() + begin, bytes, out);
    return Status::OK();
  }
  uint64_t DeviceAddress(uint32_t i) override {
    return reinterpret_cast<uint64_t>(bufs_[i].data());
  }
  // The reference "device" is host memory: device-to-device is memmove.
  Status StoreFromDevice(uint32_t i, size_t offset, const void* src, size_t len) override {
    return Store(i, offset, src, len);
  }
  Status CopyDeviceToHost(const void* src, void* dst, size_t len) override {
    if (len > 0) std::memcpy(dst, src, len);
    return Status::OK();
  }

 private:
  Status CheckRange(uint32_t i, size_t offset, size_t len, const char* what) const {
    if (offset > bufs_[i].size() || len > bufs_[i].size() - offset) {
      return Status::Error(ErrorCode::kOutOfRange,
                           std::string(what) + " of " + std::to_string(len) + " bytes at " +
                               std::to_string(offset) + " outside parameter " +
                               std::to_string(i) + " (" + std::to_string(bufs_[i].size()) +
                               " bytes)");
    }
    return Status::OK();
  }
  std::vector<std::vector<uint8_t>> owned_;
  std::vector<std::span<uint8_t>> bufs_;
};

}  // namespace

std::unique_ptr<LiveMemory> NewReferenceDeviceLiveMemory(const Manifest& manifest) {
  return std::make_unique<ReferenceDeviceLiveMemory>(manifest);
}

Result<std::unique_ptr<LiveMemory>> NewBorrowedReferenceDeviceLiveMemory(
    const Manifest& manifest, std::vector<std::span<uint8_t>> spans) {
  const auto& params = manifest.params();
  if (spans.size() != params.size()) {
    return Status::InvalidArgument(std::to_string(spans.size()) + " buffers for " +
                                   std::to_string(params.size()) + " parameters");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (spans[i].size() != static_cast<size_t>(params[i].num_bytes())) {
      return Status::InvalidArgument("buffer of '" + params[i].name + "' has " +
                                     std::to_string(spans[i].size()) + " bytes, expected " +
                                     std::to_string(params[i].num_bytes()));
    }
  }
  return std::unique_ptr<LiveMemory>(
      std::make_unique<ReferenceDeviceLiveMemory>(std::move(spans)));
}

#ifndef WTX_HAVE_CUDA
namespace {
Status NoCuda() {
  return Status::Error(ErrorCode::kInvalidArgument,
                       "device live memory needs the CUDA kernels: this build has none (nvcc "
                       "not found or -DWTX_ENABLE_CUDA=OFF)");
}
}  // namespace

Result<std::unique_ptr<LiveMemory>> NewDeviceLiveMemory(const Manifest&,
                                                        DeviceLiveMemoryOptions) {
  return NoCuda();
}

Result<std::unique_ptr<LiveMemory>> NewBorrowedDeviceLiveMemory(const Manifest&,
                                                                std::vector<DeviceSpan>,
                                                                DeviceLiveMemoryOptions) {
  return NoCuda();
}
#endif

Result<LiveMemoryKind> ParseLiveMemoryKind(const std::string& name) {
  for (LiveMemoryKind k :
       {LiveMemoryKind::kHost, LiveMemoryKind::kReferenceDevice, LiveMemoryKind::kDevice}) {
    if (name == LiveMemoryKindName(k)) return k;
  }
  return Status::InvalidArgument("unknown live memory '" + name +
                                 "' (expected host, reference-device or device)");
}

const char* LiveMemoryKindName(LiveMemoryKind kind) {
  switch (kind) {
    case LiveMemoryKind::kHost:
      return "host";
    case LiveMemoryKind::kReferenceDevice:
      return "reference-device";
    case LiveMemoryKind::kDevice:
      return "device";
  }
  return "?";
}

Result<std::shared_ptr<LiveMemory>> NewLiveMemory(LiveMemoryKind kind, const Manifest& manifest) {
  switch (kind) {
    case LiveMemoryKind::kHost:
      return std::shared_ptr<LiveMemory>();
    case LiveMemoryKind::kReferenceDevice:
      return std::shared_ptr<LiveMemory>(NewReferenceDeviceLiveMemory(manifest));
    case LiveMemoryKind::kDevice: {
      auto m = NewDeviceLiveMemory(manifest);
      if (!m.ok()) return m.status();
      return std::shared_ptr<LiveMemory>(std::move(m).value());
    }
  }
  return Status::InvalidArgument("unknown live memory kind");
}

}  // namespace wtx
