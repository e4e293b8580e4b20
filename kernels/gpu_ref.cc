// CPU references of the GPU kernels (include/wtx/gpu.h). The hash goes through the same
// __host__ __device__ code and the same lane decomposition as the device (kernels/xxh3_hd.h);
// scatter and scan are the plain loops the kernels parallelize.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel_args.h"
#include "kernels/xxh3_hd.h"
#include "wtx/content_hash.h"
#include "wtx/gpu.h"

namespace wtx {

// gpu_kernels.cu hard-codes the chunk size (it does not include content_hash.h).
static_assert(kHashChunkBytes == 64 * 1024, "update kChunkBytes in kernels/gpu_kernels.cu");

namespace {

// What one thread block computes for one buffer: the short paths directly, the long path
// through per-(block, lane) deltas chained per lane.
uint64_t DecomposedHash64(const uint8_t* p, size_t len) {
  if (len <= xxh3::kMidSizeMax) return xxh3::Hash64(p, len);
  return xxh3::HashLongDecomposed(p, len, xxh3::Secret());
}

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

void ChunkDigestsRef(const void* data, size_t bytes, uint64_t* out) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t off = 0, c = 0; off < bytes; off += kHashChunkBytes, ++c) {
    out[c] = DecomposedHash64(p + off, std::min(kHashChunkBytes, bytes - off));
  }
}

uint64_t ParamDigestRef(const void* data, size_t bytes) {
  std::vector<uint64_t> chunks((bytes + kHashChunkBytes - 1) / kHashChunkBytes);
  ChunkDigestsRef(data, bytes, chunks.data());
  return DecomposedHash64(reinterpret_cast<const uint8_t*>(chunks.data()),
                          chunks.size() * sizeof(uint64_t));
}

Status ScatterRef(void* param, size_t param_bytes, std::span<const int64_t> indices,
                  const void* values, size_t elem_size, void* before, size_t before_capacity) {
  // The same checks, in the same order, as GpuScatter.
  WTX_RETURN_IF_ERROR(
      kernel_args::CheckScatter(indices.size(), elem_size, before != nullptr, before_capacity));
  WTX_RETURN_IF_ERROR(kernel_args::CheckIndices(indices, param_bytes, elem_size));
  uint8_t* dst = static_cast<uint8_t*>(param);
  const uint8_t* src = static_cast<const uint8_t*>(values);
  uint8_t* save = static_cast<uint8_t*>(before);
  for (size_t i = 0; i < indices.size(); ++i) {
    uint8_t* at = dst + static_cast<size_t>(indices[i]) * elem_size;
    if (save != nullptr) std::memcpy(save + i * elem_size, at, elem_size);
    std::memcpy(at, src + i * elem_size, elem_size);
  }
  return Status::OK();
}

Status RestoreRef(void* param, size_t param_bytes, std::span<const int64_t> indices,
                  const void* before, size_t elem_size) {
  WTX_RETURN_IF_ERROR(kernel_args::CheckElemSize(elem_size));
  WTX_RETURN_IF_ERROR(kernel_args::CheckIndices(indices, param_bytes, elem_size));
  uint8_t* dst = static_cast<uint8_t*>(param);
  const uint8_t* save = static_cast<const uint8_t*>(before);
  for (size_t i = indices.size(); i-- > 0;) {
    std::memcpy(dst + static_cast<size_t>(indices[i]) * elem_size, save + i * elem_size, elem_size);
  }
  return Status::OK();
}

Result<ScanCounts> VerifyScanRef(const void* data, size_t bytes, DType dtype, size_t row_elems) {
  WTX_RETURN_IF_ERROR(kernel_args::CheckScanRows(bytes, dtype, row_elems));
  const size_t esize = DTypeSize(dtype);
  const size_t row_bytes = row_elems * esize;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  ScanCounts c;
  c.digest = ParamDigestRef(data, bytes);
  for (size_t off = 0; off + esize <= bytes; off += esize) {
    switch (dtype) {
      case DType::kF32: {
        const uint32_t v = Load32(p + off);
        if ((v & 0x7F800000U) == 0x7F800000U) ((v & 0x007FFFFFU) ? c.nan : c.inf)++;
        break;
      }
      case DType::kBF16: {
        const uint16_t v = Load16(p + off);
        if ((v & 0x7F80U) == 0x7F80U) ((v & 0x007FU) ? c.nan : c.inf)++;
        break;
      }
      case DType::kF16: {
        const uint16_t v = Load16(p + off);
        if ((v & 0x7C00U) == 0x7C00U) ((v & 0x03FFU) ? c.nan : c.inf)++;
        break;
      }
      default:
        break;
    }
  }
  if (row_elems != 0) {
    c.rows = bytes / row_bytes;
    for (size_t r = 0; r < c.rows; ++r) {
      const uint8_t* row = p + r * row_bytes;
      bool zero = true;
      for (size_t k = 0; k < row_bytes && zero; ++k) zero = row[k] == 0;
      c.zero_rows += zero;
    }
  }
  return c;
}

}  // namespace wtx
