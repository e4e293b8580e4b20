// GPU kernels for live parameters held in device memory, and their CPU references.
//
// Three operations, each with a plain C++ reference (kernels/gpu_ref.cc, always built, tested
// against libxxhash and the participant's digests) and a CUDA implementation
// (kernels/gpu_kernels.cu, built only with -DWTX_ENABLE_CUDA=ON and nvcc found; then
// WTX_HAVE_CUDA is defined for targets linking wtx_gpu):
//
//  * Content hash: exactly content_hash.h's definition. Chunk digest = XXH3_64bits of each
//    kHashChunkBytes chunk (the last one shorter), param digest = XXH3_64bits over the
//    little-endian u64 array of chunk digests; a zero-byte parameter hashes to XXH3_64bits of
//    nothing. Bit-identical to ParamDigest() by construction: the device code and the reference
//    are the same __host__ __device__ source (kernels/xxh3_hd.h).
//  * Sparse scatter in live coordinates: values[i] (elem_size bytes) goes to flat element
//    index indices[i] of a parameter. Optionally the old values are saved first into a bounded
//    before-image buffer (before[i] = old value at indices[i]); Restore puts them back. Every
//    index is checked before any byte changes: an index outside the parameter is
//    E_OUT_OF_RANGE, a before-image larger than its buffer is E_ROLLBACK_BUDGET, and on error
//    nothing was written.
//  * Verifier scan: the param digest plus, for f32/bf16/f16, the number of NaN and Inf
//    elements, and the number of rows (row_elems elements each) whose bytes are all zero
//    (a row never written since a restart reads as zero bytes).
//
// REQUIRES (scatter/restore): indices are distinct. The reference applies duplicates in order
// (last wins; Restore walks backwards, so the oldest value comes back); on the GPU which
// duplicate wins is unspecified.
//
// Device pointers are plain CUDA device pointers (cudaMalloc or an engine's allocator); every
// Gpu* call is synchronous on the legacy default stream, or on the stream given to it, and returns
// IOError naming the CUDA error when a CUDA call fails, or when no device is present.
//
// Thread-safety: the functions share no state; concurrent calls on distinct buffers are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "wtx/dtype.h"
#include "wtx/status.h"

namespace wtx {

struct ScanCounts {
  uint64_t digest = 0;     // param digest (content_hash.h)
  uint64_t nan = 0;        // f32/bf16/f16 only; 0 for other dtypes
  uint64_t inf = 0;        // f32/bf16/f16 only
  uint64_t rows = 0;       // bytes / (row_elems * elem size); 0 when row_elems == 0
  uint64_t zero_rows = 0;  // rows whose bytes are all zero
  bool operator==(const ScanCounts&) const = default;
};

// ---- CPU references (kernels/gpu_ref.cc; always available) ----

// One digest per kHashChunkBytes chunk. REQUIRES: out has ceil(bytes / kHashChunkBytes) slots.
void ChunkDigestsRef(const void* data, size_t bytes, uint64_t* out);
// The param digest through the device algorithm's decomposition (equals ParamDigest()).
uint64_t ParamDigestRef(const void* data, size_t bytes);
// Scatter with an optional before-image (before == nullptr: none). See the contract above.
// REQUIRES: elem_size is 1, 2, 4 or 8.
Status ScatterRef(void* param, size_t param_bytes, std::span<const int64_t> indices,
                  const void* values, size_t elem_size, void* before, size_t before_capacity);
// Writes before[i] back to indices[i], last index first.
Status RestoreRef(void* param, size_t param_bytes, std::span<const int64_t> indices,
                  const void* before, size_t elem_size);
// REQUIRES: row_elems == 0 or bytes is a multiple of row_elems * DTypeSize(dtype).
Result<ScanCounts> VerifyScanRef(const void* data, size_t bytes, DType dtype, size_t row_elems);

// ---- CUDA (kernels/gpu_kernels.cu; only in builds with WTX_HAVE_CUDA) ----

// OK when a CUDA device is usable; otherwise the reason (no driver, no device, ...).
Status GpuProbe();
// `dev`: device pointer to `bytes` bytes.
// `stream` (a cudaStream_t; null: the legacy default stream) orders the kernels and copies of
// the calls that take one; they synchronize that stream before returning.
Status GpuChunkDigests(const void* dev, size_t bytes, uint64_t* host_out, void* stream = nullptr);
Result<uint64_t> GpuParamDigest(const void* dev, size_t bytes);
// All pointers are device pointers; dev_before may be null (no before-image).
Status GpuScatter(void* dev_param, size_t param_bytes, const int64_t* dev_indices, size_t count,
                  const void* dev_values, size_t elem_size, void* dev_before,
                  size_t before_capacity, void* stream = nullptr);
Status GpuRestore(void* dev_param, size_t param_bytes, const int64_t* dev_indices, size_t count,
                  const void* dev_before, size_t elem_size, void* stream = nullptr);
Result<ScanCounts> GpuVerifyScan(const void* dev, size_t bytes, DType dtype, size_t row_elems);

}  // namespace wtx
