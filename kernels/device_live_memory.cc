// NewReferenceDeviceLiveMemory (the device contract on the kernels' CPU references), the
// LiveMemoryKind helpers, and NewDeviceLiveMemory for builds without the CUDA kernels.
#include "wtx/device_live_memory.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel_args.h"
#include "wtx/content_hash.h"
#include "wtx/gpu.h"

namespace wtx {
namespace {

class ReferenceDeviceLiveMemory : public LiveMemory {
 public:
  // Owned, zeroed buffers.
  explicit ReferenceDeviceLiveMemory(const Manifest& m) {
    for (const auto& p : m.params()) {
      owned_.emplace_back(static_cast<size_t>(p.live_bytes()), 0);
      bufs_.emplace_back(owned_.back().data(), owned_.back().size());
      names_.push_back(p.name);
    }
  }
  // Borrowed buffers (the caller's "device tensors"), left as they are.
  // REQUIRES: one span per parameter of `m`, each of its size
  ReferenceDeviceLiveMemory(const Manifest& m, std::vector<std::span<uint8_t>> spans)
      : bufs_(std::move(spans)) {
    for (const auto& p : m.params()) names_.push_back(p.name);
  }

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
    if (count == 0) return Status::OK();
    WTX_RETURN_IF_ERROR(
        kernel_args::CheckFirstChunk(names_[i], bufs_[i].size(), first, kHashChunkBytes));
    const size_t begin = first * kHashChunkBytes;
    const size_t bytes = std::min(count * kHashChunkBytes, bufs_[i].size() - begin);
    ChunkDigestsRef(bufs_[i].data() + begin, bytes, out);
    return Status::OK();
  }
  uint64_t DeviceAddress(uint32_t i) override {
    return reinterpret_cast<uint64_t>(bufs_[i].data());
  }
  Status Rebind(uint32_t i, uint64_t address) override {
    if (!owned_.empty()) return LiveMemory::Rebind(i, address);
    bufs_[i] = {reinterpret_cast<uint8_t*>(address), bufs_[i].size()};  // NOLINT
    return Status::OK();
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
    return kernel_args::CheckByteRange(what, names_[i], bufs_[i].size(), offset, len);
  }
  std::vector<std::vector<uint8_t>> owned_;
  std::vector<std::span<uint8_t>> bufs_;
  std::vector<std::string> names_;  // the parameters', for errors
};

}  // namespace

std::unique_ptr<LiveMemory> NewReferenceDeviceLiveMemory(const Manifest& manifest) {
  return std::make_unique<ReferenceDeviceLiveMemory>(manifest);
}

Result<std::unique_ptr<LiveMemory>> NewBorrowedReferenceDeviceLiveMemory(
    const Manifest& manifest, std::vector<std::span<uint8_t>> spans) {
  const auto& params = manifest.params();
  WTX_RETURN_IF_ERROR(kernel_args::CheckBufferCount("buffer", spans.size(), params.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    WTX_RETURN_IF_ERROR(kernel_args::CheckBufferSize("buffer", params[i].name, spans[i].size(),
                                                     static_cast<size_t>(params[i].live_bytes())));
  }
  return std::unique_ptr<LiveMemory>(
      std::make_unique<ReferenceDeviceLiveMemory>(manifest, std::move(spans)));
}

#ifndef WTX_HAVE_CUDA
namespace {
Status NoCuda() {
  return Status::Error(ErrorCode::kInvalidArgument,
                       "device live memory needs the CUDA kernels: this build has none (nvcc "
                       "not found or -DWTX_ENABLE_CUDA=OFF)");
}
}  // namespace

Result<std::unique_ptr<LiveMemory>> NewDeviceLiveMemory(const Manifest&, DeviceLiveMemoryOptions) {
  return NoCuda();
}

Result<std::unique_ptr<LiveMemory>> NewBorrowedDeviceLiveMemory(const Manifest&,
                                                                const std::vector<DeviceSpan>&,
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
