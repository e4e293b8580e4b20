// NewDeviceLiveMemory for builds with the CUDA kernels: parameters in cudaMalloc'd memory,
// operated on by gpu.h. Every call is synchronous (legacy default stream) and turns a CUDA
// error into IOError naming the operation and the parameter.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

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
  ~CudaLiveMemory() override {
    for (void* p : bufs_) cudaFree(p);
  }
  Status Init(const Manifest& m) {
    for (const auto& p : m.params()) {
      const size_t n = static_cast<size_t>(p.num_bytes());
      void* d = nullptr;
      WTX_RETURN_IF_ERROR(Cuda(cudaMalloc(&d, n ? n : 1), "allocating '" + p.name + "'"));
      bufs_.push_back(d);
      sizes_.push_back(n);
      names_.push_back(p.name);
      WTX_RETURN_IF_ERROR(Cuda(cudaMemset(d, 0, n), "zeroing '" + p.name + "'"));
    }
    return Status::OK();
  }

  std::span<uint8_t> Param(uint32_t) override { return {}; }  // device memory
  void Discard() override {
    for (size_t i = 0; i < bufs_.size(); ++i) cudaMemset(bufs_[i], 0, sizes_[i]);
    cudaDeviceSynchronize();
  }
  bool HostAddressable() const override { return false; }
  size_t Size(uint32_t i) override { return sizes_[i]; }

  Status Store(uint32_t i, size_t offset, const void* src, size_t len) override {
    WTX_RETURN_IF_ERROR(CheckRange(i, offset, len, "store"));
    if (len == 0) return Status::OK();
    return Cuda(cudaMemcpy(At(i, offset), src, len, cudaMemcpyHostToDevice),
                "store into '" + names_[i] + "'");
  }
  Status Load(uint32_t i, size_t offset, void* dst, size_t len) override {
    WTX_RETURN_IF_ERROR(CheckRange(i, offset, len, "load"));
    if (len == 0) return Status::OK();
    return Cuda(cudaMemcpy(dst, At(i, offset), len, cudaMemcpyDeviceToHost),
                "load from '" + names_[i] + "'");
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
        cudaMemcpy(idx.get(), flat.data(), flat.size_bytes(), cudaMemcpyHostToDevice), what));
    WTX_RETURN_IF_ERROR(
        Cuda(cudaMemcpy(vals.get(), values, value_bytes, cudaMemcpyHostToDevice), what));
    WTX_RETURN_IF_ERROR(GpuScatter(bufs_[i], sizes_[i], static_cast<const int64_t*>(idx.get()),
                                   flat.size(), vals.get(), elem_size, old.get(),
                                   before ? value_bytes : 0));
    if (!before) return Status::OK();
    return Cuda(cudaMemcpy(before, old.get(), value_bytes, cudaMemcpyDeviceToHost), what);
  }
  Status ChunkDigests(uint32_t i, size_t first, size_t count, uint64_t* out) override {
    if (count == 0) return Status::OK();
    const size_t begin = first * kHashChunkBytes;
    if (begin >= sizes_[i]) {
      return Status::Error(ErrorCode::kOutOfRange,
                           "chunk " + std::to_string(first) + " outside '" + names_[i] + "'");
    }
    const size_t bytes = std::min(count * kHashChunkBytes, sizes_[i] - begin);
    return GpuChunkDigests(At(i, begin), bytes, out);
  }

 private:
  void* At(uint32_t i, size_t offset) const { return static_cast<char*>(bufs_[i]) + offset; }
  Status CheckRange(uint32_t i, size_t offset, size_t len, const char* what) const {
    if (offset > sizes_[i] || len > sizes_[i] - offset) {
      return Status::Error(ErrorCode::kOutOfRange,
                           std::string(what) + " of " + std::to_string(len) + " bytes at " +
                               std::to_string(offset) + " outside '" + names_[i] + "' (" +
                               std::to_string(sizes_[i]) + " bytes)");
    }
    return Status::OK();
  }

  std::vector<void*> bufs_;
  std::vector<size_t> sizes_;
  std::vector<std::string> names_;
};

}  // namespace

Result<std::unique_ptr<LiveMemory>> NewDeviceLiveMemory(const Manifest& manifest,
                                                        DeviceLiveMemoryOptions options) {
  WTX_RETURN_IF_ERROR(GpuProbe());
  auto m = std::make_unique<CudaLiveMemory>();
  WTX_RETURN_IF_ERROR(m->Init(manifest));
  return std::unique_ptr<LiveMemory>(std::move(m));
}

}  // namespace wtx
