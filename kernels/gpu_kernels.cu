// CUDA implementations of include/wtx/gpu.h (sm_90). The hash is kernels/xxh3_hd.h, the same
// source as the CPU reference; see docs/gpu.md for the parallel decomposition.
//
//  * Chunk digests: one thread block (512 threads) per 64 KiB chunk. Thread (block b, lane j)
//    sums what the 16 stripes of 1 KiB block b add to accumulator lane j (BlockLaneDelta; the
//    lanes are independent and additions commute), then 8 threads chain the 64 block deltas
//    through the per-block scramble, and thread 0 merges. Inputs of <= 240 bytes take XXH3's
//    short paths on one thread.
//  * Param digest: the same cooperative hash, one block, over the device array of chunk
//    digests (little-endian u64, as on the host).
//  * Scatter/restore: a validation pass (out-of-range count) before any byte changes, then one
//    thread per index (grid-stride), typed loads/stores of 1, 2, 4 or 8 bytes.
//  * Scan: grid-stride NaN/Inf counting with block reduction; one block per row (grid-stride)
//    for all-zero rows.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kernels/kernel_args.h"
#include "kernels/xxh3_hd.h"
#include "wtx/gpu.h"

namespace wtx {

namespace {

constexpr size_t kChunkBytes = 64 * 1024;  // content_hash.h kHashChunkBytes (static_assert'd)
constexpr int kHashThreads = 512;
constexpr size_t kTileBlocks = 64;  // 1 KiB blocks per tile: a whole chunk in one tile

#define WTX_CUDA_TRY(expr)                                                                   \
  do {                                                                                       \
    cudaError_t _e = (expr);                                                                 \
    if (_e != cudaSuccess) {                                                                 \
      return Status::IOError(std::string("CUDA: ") + #expr + ": " + cudaGetErrorString(_e)); \
    }                                                                                        \
  } while (0)

// A device allocation freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Status Allocate(size_t n) {
    if (n == 0) n = 1;
    WTX_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
    return Status::OK();
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

// XXH3_64bits of p[0, len) by the whole thread block; the result lands in *out (thread 0).
// `secret` is the default secret in shared memory. Every thread of the block must call it.
__device__ void CooperativeHash64(const uint8_t* p, size_t len, const uint8_t* secret,
                                  uint64_t* out) {
  __shared__ uint64_t delta[kTileBlocks][8];
  __shared__ uint64_t acc[8];
  if (len <= xxh3::kMidSizeMax) {  // uniform across the block
    if (threadIdx.x == 0) *out = xxh3::Hash64(p, len);
    return;
  }
  const size_t full = xxh3::LongFullBlocks(len);
  const size_t tail = xxh3::LongTailStripes(len);
  const size_t items = full + 1;  // the full blocks and the tail block
  if (threadIdx.x < 8) acc[threadIdx.x] = xxh3::InitAcc(threadIdx.x);
  for (size_t t0 = 0; t0 < items; t0 += kTileBlocks) {
    const size_t n = items - t0 < kTileBlocks ? items - t0 : kTileBlocks;
    for (size_t w = threadIdx.x; w < n * 8; w += blockDim.x) {
      const size_t b = t0 + w / 8;
      const int lane = static_cast<int>(w % 8);
      const size_t stripes = b < full ? xxh3::kStripesPerBlock : tail;
      delta[w / 8][lane] = xxh3::BlockLaneDelta(p + b * xxh3::kBlockLen, 0, stripes, lane, secret);
    }
    __syncthreads();
    if (threadIdx.x < 8) {
      const int lane = threadIdx.x;
      uint64_t a = acc[lane];
      for (size_t k = 0; k < n; ++k) {
        if (t0 + k < full) {
          a = xxh3::ChainLane(a, delta[k][lane], secret, lane);
        } else {
          a += delta[k][lane];
        }
      }
      acc[lane] = a;
    }
    __syncthreads();
  }
  if (threadIdx.x < 8) {
    acc[threadIdx.x] += xxh3::LastStripeLaneDelta(p, len, threadIdx.x, secret);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t a[8];
    for (int i = 0; i < 8; ++i) a[i] = acc[i];
    *out = xxh3::MergeAccs(a, len, secret);
  }
}

__device__ void LoadSecret(uint8_t* s_secret) {
  for (int i = threadIdx.x; i < static_cast<int>(xxh3::kSecretSize); i += blockDim.x) {
    s_secret[i] = xxh3::kDeviceSecret[i];
  }
  __syncthreads();
}

__global__ void ChunkDigestKernel(const uint8_t* p, size_t bytes, uint64_t* out) {
  __shared__ uint64_t s_secret64[xxh3::kSecretSize / 8];  // 8-byte aligned
  uint8_t* s_secret = reinterpret_cast<uint8_t*>(s_secret64);
  LoadSecret(s_secret);
  const size_t off = static_cast<size_t>(blockIdx.x) * kChunkBytes;
  const size_t len = bytes - off < kChunkBytes ? bytes - off : kChunkBytes;
  CooperativeHash64(p + off, len, s_secret, out + blockIdx.x);
}

__global__ void CombineKernel(const uint64_t* digests, size_t n, uint64_t* out) {
  __shared__ uint64_t s_secret64[xxh3::kSecretSize / 8];  // 8-byte aligned
  uint8_t* s_secret = reinterpret_cast<uint8_t*>(s_secret64);
  LoadSecret(s_secret);
  CooperativeHash64(reinterpret_cast<const uint8_t*>(digests), n * sizeof(uint64_t), s_secret, out);
}

Status LaunchChunkDigests(const void* dev, size_t bytes, uint64_t* dev_out, size_t chunks,
                          cudaStream_t stream = nullptr) {
  if (chunks == 0) return Status::OK();
  ChunkDigestKernel<<<static_cast<unsigned>(chunks), kHashThreads, 0, stream>>>(
      static_cast<const uint8_t*>(dev), bytes, dev_out);
  WTX_CUDA_TRY(cudaGetLastError());
  return Status::OK();
}

size_t NumChunks(size_t bytes) { return (bytes + kChunkBytes - 1) / kChunkBytes; }

unsigned GridFor(size_t n, int threads) {
  size_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535 * 8) blocks = 65535 * 8;  // grid-stride loops cover the rest
  return static_cast<unsigned>(blocks == 0 ? 1 : blocks);
}

__global__ void ValidateIndicesKernel(const int64_t* idx, size_t count, int64_t elems,
                                      unsigned long long* bad, unsigned long long* first_bad) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int64_t v = idx[i];
    if (v < 0 || v >= elems) {
      atomicAdd(bad, 1ULL);
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

template <typename T>
__global__ void ScatterKernel(T* param, const int64_t* idx, size_t count, const T* values,
                              T* before) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    T* at = param + idx[i];
    if (before != nullptr) before[i] = *at;
    *at = values[i];
  }
}

template <typename T>
__global__ void RestoreKernel(T* param, const int64_t* idx, size_t count, const T* before) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    param[idx[i]] = before[i];
  }
}

Status ValidateIndices(const int64_t* dev_indices, size_t count, size_t param_bytes,
                       size_t elem_size, cudaStream_t stream) {
  if (count == 0) return Status::OK();
  const int64_t elems = kernel_args::ParamElems(param_bytes, elem_size);
  DeviceBuffer<unsigned long long> flags;
  WTX_RETURN_IF_ERROR(flags.Allocate(2));
  const unsigned long long init[2] = {0, ~0ULL};
  WTX_CUDA_TRY(cudaMemcpyAsync(flags.get(), init, sizeof init, cudaMemcpyHostToDevice, stream));
  ValidateIndicesKernel<<<GridFor(count, 256), 256, 0, stream>>>(dev_indices, count, elems,
                                                                 flags.get(), flags.get() + 1);
  WTX_CUDA_TRY(cudaGetLastError());
  unsigned long long out[2];
  WTX_CUDA_TRY(cudaMemcpyAsync(out, flags.get(), sizeof out, cudaMemcpyDeviceToHost, stream));
  WTX_CUDA_TRY(cudaStreamSynchronize(stream));
  if (out[0] != 0) {
    int64_t v = 0;
    WTX_CUDA_TRY(cudaMemcpy(&v, dev_indices + out[1], sizeof v, cudaMemcpyDeviceToHost));
    return kernel_args::IndicesOutOfRange(out[0], v, out[1], elems);
  }
  return Status::OK();
}

template <typename T>
void LaunchScatter(void* param, const int64_t* idx, size_t count, const void* values, void* before,
                   cudaStream_t stream) {
  ScatterKernel<T><<<GridFor(count, 256), 256, 0, stream>>>(
      static_cast<T*>(param), idx, count, static_cast<const T*>(values), static_cast<T*>(before));
}

template <typename T>
void LaunchRestore(void* param, const int64_t* idx, size_t count, const void* before,
                   cudaStream_t stream) {
  RestoreKernel<T><<<GridFor(count, 256), 256, 0, stream>>>(static_cast<T*>(param), idx, count,
                                                            static_cast<const T*>(before));
}

// Scan: NaN/Inf per element, block-reduced.
template <int kKind>  // 0: f32, 1: bf16, 2: f16
__global__ void NanInfKernel(const uint8_t* p, size_t elems, unsigned long long* counts) {
  __shared__ unsigned long long s_nan, s_inf;
  if (threadIdx.x == 0) s_nan = s_inf = 0;
  __syncthreads();
  unsigned long long nan = 0, inf = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < elems;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (kKind == 0) {
      const uint32_t v = reinterpret_cast<const uint32_t*>(p)[i];
      if ((v & 0x7F800000U) == 0x7F800000U) ((v & 0x007FFFFFU) ? nan : inf)++;
    } else if (kKind == 1) {
      const uint16_t v = reinterpret_cast<const uint16_t*>(p)[i];
      if ((v & 0x7F80U) == 0x7F80U) ((v & 0x007FU) ? nan : inf)++;
    } else {
      const uint16_t v = reinterpret_cast<const uint16_t*>(p)[i];
      if ((v & 0x7C00U) == 0x7C00U) ((v & 0x03FFU) ? nan : inf)++;
    }
  }
  if (nan) atomicAdd(&s_nan, nan);
  if (inf) atomicAdd(&s_inf, inf);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s_nan) atomicAdd(&counts[0], s_nan);
    if (s_inf) atomicAdd(&counts[1], s_inf);
  }
}

__global__ void ZeroRowsKernel(const uint8_t* p, size_t rows, size_t row_bytes,
                               unsigned long long* zero_rows) {
  const bool words = (row_bytes % 4 == 0) && (reinterpret_cast<uintptr_t>(p) % 4 == 0);
  for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint8_t* row = p + r * row_bytes;
    int nonzero = 0;
    if (words) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(row);
      for (size_t k = threadIdx.x; k < row_bytes / 4 && !nonzero; k += blockDim.x) {
        nonzero = w[k] != 0;
      }
    } else {
      for (size_t k = threadIdx.x; k < row_bytes && !nonzero; k += blockDim.x) {
        nonzero = row[k] != 0;
      }
    }
    if (!__syncthreads_or(nonzero) && threadIdx.x == 0) atomicAdd(zero_rows, 1ULL);
  }
}

}  // namespace

Status GpuProbe() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return Status::IOError(std::string("no usable CUDA device: ") + cudaGetErrorString(e));
  }
  if (n == 0) return Status::IOError("no CUDA device");
  return Status::OK();
}

Status GpuChunkDigests(const void* dev, size_t bytes, uint64_t* host_out, void* stream_ptr) {
  const size_t chunks = NumChunks(bytes);
  if (chunks == 0) return Status::OK();
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  DeviceBuffer<uint64_t> out;
  WTX_RETURN_IF_ERROR(out.Allocate(chunks));
  WTX_RETURN_IF_ERROR(LaunchChunkDigests(dev, bytes, out.get(), chunks, stream));
  WTX_CUDA_TRY(cudaMemcpyAsync(host_out, out.get(), chunks * sizeof(uint64_t),
                               cudaMemcpyDeviceToHost, stream));
  WTX_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::OK();
}

Result<uint64_t> GpuParamDigest(const void* dev, size_t bytes) {
  const size_t chunks = NumChunks(bytes);
  if (chunks == 0) return xxh3::Hash64(nullptr, 0);
  DeviceBuffer<uint64_t> digests;
  WTX_RETURN_IF_ERROR(digests.Allocate(chunks + 1));
  WTX_RETURN_IF_ERROR(LaunchChunkDigests(dev, bytes, digests.get(), chunks));
  CombineKernel<<<1, kHashThreads>>>(digests.get(), chunks, digests.get() + chunks);
  WTX_CUDA_TRY(cudaGetLastError());
  uint64_t out = 0;
  WTX_CUDA_TRY(cudaMemcpy(&out, digests.get() + chunks, sizeof out, cudaMemcpyDeviceToHost));
  return out;
}

Status GpuScatter(void* dev_param, size_t param_bytes, const int64_t* dev_indices, size_t count,
                  const void* dev_values, size_t elem_size, void* dev_before,
                  size_t before_capacity, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  // The same checks, in the same order, as ScatterRef (plus the device pointers' alignment).
  WTX_RETURN_IF_ERROR(
      kernel_args::CheckScatter(count, elem_size, dev_before != nullptr, before_capacity));
  WTX_RETURN_IF_ERROR(
      kernel_args::CheckAligned("scatter", elem_size, {dev_param, dev_values, dev_before}));
  WTX_RETURN_IF_ERROR(ValidateIndices(dev_indices, count, param_bytes, elem_size, stream));
  if (count == 0) return Status::OK();
  switch (elem_size) {
    case 1:
      LaunchScatter<uint8_t>(dev_param, dev_indices, count, dev_values, dev_before, stream);
      break;
    case 2:
      LaunchScatter<uint16_t>(dev_param, dev_indices, count, dev_values, dev_before, stream);
      break;
    case 4:
      LaunchScatter<uint32_t>(dev_param, dev_indices, count, dev_values, dev_before, stream);
      break;
    default:
      LaunchScatter<uint64_t>(dev_param, dev_indices, count, dev_values, dev_before, stream);
      break;
  }
  WTX_CUDA_TRY(cudaGetLastError());
  WTX_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::OK();
}

Status GpuRestore(void* dev_param, size_t param_bytes, const int64_t* dev_indices, size_t count,
                  const void* dev_before, size_t elem_size, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  WTX_RETURN_IF_ERROR(kernel_args::CheckElemSize(elem_size));
  WTX_RETURN_IF_ERROR(kernel_args::CheckAligned("scatter", elem_size, {dev_param, dev_before}));
  WTX_RETURN_IF_ERROR(ValidateIndices(dev_indices, count, param_bytes, elem_size, stream));
  if (count == 0) return Status::OK();
  switch (elem_size) {
    case 1:
      LaunchRestore<uint8_t>(dev_param, dev_indices, count, dev_before, stream);
      break;
    case 2:
      LaunchRestore<uint16_t>(dev_param, dev_indices, count, dev_before, stream);
      break;
    case 4:
      LaunchRestore<uint32_t>(dev_param, dev_indices, count, dev_before, stream);
      break;
    default:
      LaunchRestore<uint64_t>(dev_param, dev_indices, count, dev_before, stream);
      break;
  }
  WTX_CUDA_TRY(cudaGetLastError());
  WTX_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::OK();
}

Result<ScanCounts> GpuVerifyScan(const void* dev, size_t bytes, DType dtype, size_t row_elems) {
  WTX_RETURN_IF_ERROR(kernel_args::CheckScanRows(bytes, dtype, row_elems));
  const size_t esize = DTypeSize(dtype);
  const size_t row_bytes = row_elems * esize;
  WTX_RETURN_IF_ERROR(kernel_args::CheckAligned("scan", esize, {dev}));
  ScanCounts c;
  auto digest = GpuParamDigest(dev, bytes);
  if (!digest.ok()) return digest.status();
  c.digest = digest.value();
  DeviceBuffer<unsigned long long> counts;
  WTX_RETURN_IF_ERROR(counts.Allocate(3));
  WTX_CUDA_TRY(cudaMemset(counts.get(), 0, 3 * sizeof(unsigned long long)));
  const uint8_t* p = static_cast<const uint8_t*>(dev);
  const size_t elems = bytes / esize;
  if (elems > 0) {
    if (dtype == DType::kF32) NanInfKernel<0><<<GridFor(elems, 256), 256>>>(p, elems, counts.get());
    if (dtype == DType::kBF16)
      NanInfKernel<1><<<GridFor(elems, 256), 256>>>(p, elems, counts.get());
    if (dtype == DType::kF16) NanInfKernel<2><<<GridFor(elems, 256), 256>>>(p, elems, counts.get());
    WTX_CUDA_TRY(cudaGetLastError());
  }
  if (row_elems != 0) {
    c.rows = bytes / row_bytes;
    if (c.rows > 0) {
      const unsigned grid = static_cast<unsigned>(c.rows < 65535 * 8 ? c.rows : 65535 * 8);
      ZeroRowsKernel<<<grid, 256>>>(p, c.rows, row_bytes, counts.get() + 2);
      WTX_CUDA_TRY(cudaGetLastError());
    }
  }
  unsigned long long out[3];
  WTX_CUDA_TRY(cudaMemcpy(out, counts.get(), sizeof out, cudaMemcpyDeviceToHost));
  c.nan = out[0];
  c.inf = out[1];
  c.zero_rows = out[2];
  return c;
}

}  // namespace wtx
