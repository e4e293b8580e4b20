// NewDeviceLiveMemory / NewBorrowedDeviceLiveMemory for builds with the CUDA kernels:
// parameters in device memory (cudaMalloc'd and owned, or the engine's own tensors by pointer),
// operated on by gpu.h. Every copy and kernel is ordered on the options' stream (null: the
// legacy default stream); every call synchronizes that stream before returning and turns a
// CUDA error into IOError naming the operation and the parameter.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/kernel_args.h"
#include "wtx/content_hash.h"
#include "wtx/device_live_memory.h"
#include "wtx/gpu.h"

namespace wtx {
namespace {

Status Cuda(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::OK();
  return Status::IOError(what + ": " + cudaGetErrorString(e));
}

// A temporary device buffer, freed on scope exit.
class Scratch {
 public:
  ~Scratch() {
    if (p_) cudaFree(p_);
  }
  Status Allocate(size_t bytes, const std::string& what) {
    return Cuda(cudaMalloc(&p_, bytes ? bytes : 1), what + ": cudaMalloc");
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

class CudaLiveMemory : public LiveMemory {
 public:
  explicit CudaLiveMemory(DeviceLiveMemoryOptions options)
      : stream_(static_cast<cudaStream_t>(options.stream)) {}
  ~CudaLiveMemory() override {
    if (!owned_) return;
    for (void* p : bufs_) cudaFree(p);
  }
  // Owned, zeroed buffers.
  Status Allocate(const Manifest& m) {
    owned_ = true;
    for (const auto& p : m.params()) {
      const size_t n = static_cast<size_t>(p.live_bytes());
      void* d = nullptr;
      WTX_RETURN_IF_ERROR(Cuda(cudaMalloc(&d, n ? n : 1), "allocating '" + p.name + "'"));
      bufs_.push_back(d);
      sizes_.push_back(n);
      names_.push_back(p.name);
      WTX_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(d, 0, n, stream_), "zeroing '" + p.name + "'"));
    }
    return Sync("zeroing");
  }
  // The engine's tensors: no allocation, no copy, no zeroing.
  Status Borrow(const Manifest& m, const std::vector<DeviceSpan>& spans) {
    const auto& params = m.params();
    WTX_RETURN_IF_ERROR(
        kernel_args::CheckBufferCount("device tensor", spans.size(), params.size()));
    for (size_t i = 0; i < params.size(); ++i) {
      WTX_RETURN_IF_ERROR(
          kernel_args::CheckBufferSize("device tensor", params[i].name, spans[i].bytes,
                                       static_cast<size_t>(params[i].live_bytes())));
      if (spans[i].ptr == 0 && spans[i].bytes > 0) {
        return Status::InvalidArgument("device tensor of '" + params[i].name + "' is null");
      }
      bufs_.push_back(reinterpret_cast<void*>(spans[i].ptr));
      sizes_.push_back(spans[i].bytes);
      names_.push_back(params[i].name);
    }
    return Status::OK();
  }

  std::span<uint8_t> Param(uint32_t) override { return {}; }  // device memory
  void Discard() override {
    for (size_t i = 0; i < bufs_.size(); ++i) cudaMemsetAsync(bufs_[i], 0, sizes_[i], stream_);
    cudaStreamSynchronize(stream_);
  }
  bool HostAddressable() const override { return false; }
  size_t Size(uint32_t i) override { return sizes_[i]; }

  Status Store(uint32_t i, size_t offset, const void* src, size_t len) override {
    return Copy(i, offset, src, len, cudaMemcpyHostToDevice, "store into");
  }
  Status StoreFromDevice(uint32_t i, size_t offset, const void* src, size_t len) override {
    return Copy(i, offset, src, len, cudaMemcpyDeviceToDevice, "device-to-device store into");
  }
  Status Load(uint32_t i, size_t offset, void* dst, size_t len) override {
    WTX_RETURN_IF_ERROR(CheckRange(i, offset, len, "load"));
    if (len == 0) return Status::OK();
    WTX_RETURN_IF_ERROR(
        Cuda(cudaMemcpyAsync(dst, At(i, offset), len, cudaMemcpyDeviceToHost, stream_),
             "load from '" + names_[i] + "'"));
    return Sync("load from '" + names_[i] + "'");
  }
  Status CopyDeviceToHost(const void* src, void* dst, size_t len) override {
    if (len == 0) return Status::OK();
    WTX_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToHost, stream_),
                             "copying a device array to the host"));
    return Sync("copying a device array to the host");
  }
  uint64_t DeviceAddress(uint32_t i) override { return reinterpret_cast<uint64_t>(bufs_[i]); }
  Status Rebind(uint32_t i, uint64_t address) override {
    if (owned_) return LiveMemory::Rebind(i, address);
    bufs_[i] = reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
    return Status::OK();
  }
  Status Scatter(uint32_t i, std::span<const int64_t> flat, const void* values, size_t elem_size,
                 void* before) override {
    if (flat.empty()) return Status::OK();
    const std::string what = "scatter into '" + names_[i] + "'";
    const size_t value_bytes = flat.size() * elem_size;
    Scratch idx, vals, old;
    WTX_RETURN_IF_ERROR(idx.Allocate(flat.size_bytes(), what));
    WTX_RETURN_IF_ERROR(vals.Allocate(value_bytes, what));
    if (before) WTX_RETURN_IF_ERROR(old.Allocate(value_bytes, what));
    WTX_RETURN_IF_ERROR(Cuda(
        cudaMemcpyAsync(idx.get(), flat.data(), flat.size_bytes(), cudaMemcpyHostToDevice, stream_),
        what));
    WTX_RETURN_IF_ERROR(Cuda(
        cudaMemcpyAsync(vals.get(), values, value_bytes, cudaMemcpyHostToDevice, stream_), what));
    WTX_RETURN_IF_ERROR(GpuScatter(bufs_[i], sizes_[i], static_cast<const int64_t*>(idx.get()),
                                   flat.size(), vals.get(), elem_size, old.get(),
                                   before ? value_bytes : 0, stream_));
    if (!before) return Status::OK();
    WTX_RETURN_IF_ERROR(Cuda(
        cudaMemcpyAsync(before, old.get(), value_bytes, cudaMemcpyDeviceToHost, stream_), what));
    return Sync(what);
  }
  Status ChunkDigests(uint32_t i, size_t first, size_t count, uint64_t* out) override {
    if (count == 0) return Status::OK();
    WTX_RETURN_IF_ERROR(kernel_args::CheckFirstChunk(names_[i], sizes_[i], first, kHashChunkBytes));
    const size_t begin = first * kHashChunkBytes;
    const size_t bytes = std::min(count * kHashChunkBytes, sizes_[i] - begin);
    return GpuChunkDigests(At(i, begin), bytes, out, stream_);
  }

 private:
  Status Sync(const std::string& what) {
    return Cuda(cudaStreamSynchronize(stream_), what + ": synchronizing the stream");
  }
  Status Copy(uint32_t i, size_t offset, const void* src, size_t len, cudaMemcpyKind kind,
              const char* what) {
    WTX_RETURN_IF_ERROR(CheckRange(i, offset, len, "store"));
    if (len == 0) return Status::OK();
    const std::string w = std::string(what) + " '" + names_[i] + "'";
    WTX_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(At(i, offset), src, len, kind, stream_), w));
    return Sync(w);
  }
  void* At(uint32_t i, size_t offset) const { return static_cast<char*>(bufs_[i]) + offset; }
  Status CheckRange(uint32_t i, size_t offset, size_t len, const char* what) const {
    return kernel_args::CheckByteRange(what, names_[i], sizes_[i], offset, len);
  }

  cudaStream_t stream_;
  bool owned_ = false;
  std::vector<void*> bufs_;
  std::vector<size_t> sizes_;
  std::vector<std::string> names_;
};

}  // namespace

Result<std::unique_ptr<LiveMemory>> NewDeviceLiveMemory(const Manifest& manifest,
                                                        DeviceLiveMemoryOptions options) {
  WTX_RETURN_IF_ERROR(GpuProbe());
  auto m = std::make_unique<CudaLiveMemory>(options);
  WTX_RETURN_IF_ERROR(m->Allocate(manifest));
  return std::unique_ptr<LiveMemory>(std::move(m));
}

Result<std::unique_ptr<LiveMemory>> NewBorrowedDeviceLiveMemory(
    const Manifest& manifest, const std::vector<DeviceSpan>& spans,
    DeviceLiveMemoryOptions options) {
  WTX_RETURN_IF_ERROR(GpuProbe());
  auto m = std::make_unique<CudaLiveMemory>(options);
  WTX_RETURN_IF_ERROR(m->Borrow(manifest, spans));
  return std::unique_ptr<LiveMemory>(std::move(m));
}

}  // namespace wtx
