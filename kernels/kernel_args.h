// Argument validation shared by the CUDA kernels (kernels/gpu_kernels.cu, device live memory in
// kernels/device_live_memory_cuda.cc) and their CPU references (kernels/gpu_ref.cc,
// kernels/device_live_memory.cc): one check per rule, so that both paths refuse the same inputs
// with the same error code and message (include/wtx/gpu.h, include/wtx/device_live_memory.h).
//
// Header-only (inline) because it is compiled into two libraries, wtx_kernels and wtx_gpu, the
// second by nvcc; it includes no CUDA header and allocates only to build error messages.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "wtx/dtype.h"
#include "wtx/status.h"

namespace wtx::kernel_args {

// ---- scatter / restore (include/wtx/gpu.h) ----

// The element size of a scatter or restore: 1, 2, 4 or 8 bytes.
inline Status CheckElemSize(size_t elem_size) {
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8) {
    return Status::InvalidArgument("scatter: element size " + std::to_string(elem_size) +
                                   " is not 1, 2, 4 or 8");
  }
  return Status::OK();
}

// Device pointers (null ones skipped) must be aligned to the element size for the kernels'
// typed loads and stores. `op` names the operation ("scatter", "scan").
inline Status CheckAligned(std::string_view op, size_t elem_size,
                           std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % elem_size != 0) {
      return Status::InvalidArgument(std::string(op) +
                                     ": device pointer not aligned to the element size");
    }
  }
  return Status::OK();
}

// The O(1) checks of a scatter, before its indices are looked at: the element size, then the
// before-image budget (`has_before`: a before-image buffer of `before_capacity` bytes must hold
// count * elem_size bytes; E_ROLLBACK_BUDGET otherwise).
inline Status CheckScatter(size_t count, size_t elem_size, bool has_before,
                           size_t before_capacity) {
  WTX_RETURN_IF_ERROR(CheckElemSize(elem_size));
  const size_t need = count * elem_size;
  if (has_before && need > before_capacity) {
    return Status::Error(ErrorCode::kBudgetExceeded,
                         "scatter: before-image needs " + std::to_string(need) +
                             " bytes, buffer holds " + std::to_string(before_capacity));
  }
  return Status::OK();
}

// The number of whole elements of a parameter: valid indices are [0, ParamElems).
// REQUIRES: CheckElemSize(elem_size).ok()
inline int64_t ParamElems(size_t param_bytes, size_t elem_size) {
  return static_cast<int64_t>(param_bytes / elem_size);
}

// The error for `bad` indices outside [0, elems), the first of them `first_value` at position
// `first_entry` of the index array (E_OUT_OF_RANGE).
inline Status IndicesOutOfRange(uint64_t bad, int64_t first_value, uint64_t first_entry,
                                int64_t elems) {
  return Status::Error(ErrorCode::kOutOfRange, "scatter: " + std::to_string(bad) +
                                                   (bad == 1 ? " index" : " indices") +
                                                   " outside [0, " + std::to_string(elems) +
                                                   "), first: " + std::to_string(first_value) +
                                                   " (entry " + std::to_string(first_entry) + ")");
}

// The host-side index check (the GPU counts on the device, then reports IndicesOutOfRange).
inline Status CheckIndices(std::span<const int64_t> indices, size_t param_bytes, size_t elem_size) {
  const int64_t elems = ParamElems(param_bytes, elem_size);
  uint64_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= elems) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return Status::OK();
  return IndicesOutOfRange(bad, indices[first], first, elems);
}

// ---- scan ----

// A scan's rows: row_elems == 0 (no row check), or `bytes` a whole number of
// row_elems * DTypeSize(dtype) rows.
inline Status CheckScanRows(size_t bytes, DType dtype, size_t row_elems) {
  const size_t row_bytes = row_elems * DTypeSize(dtype);
  if (row_elems != 0 && bytes % row_bytes != 0) {
    return Status::InvalidArgument("scan: " + std::to_string(bytes) +
                                   " bytes is not a whole number of " + std::to_string(row_bytes) +
                                   "-byte rows");
  }
  return Status::OK();
}

// ---- device live memory (include/wtx/device_live_memory.h) ----

// A byte range [offset, offset + len) of parameter `param` (`size` bytes), for `what` ("store",
// "load"): E_OUT_OF_RANGE naming the parameter when it does not fit.
inline Status CheckByteRange(std::string_view what, std::string_view param, size_t size,
                             size_t offset, size_t len) {
  if (offset > size || len > size - offset) {
    return Status::Error(ErrorCode::kOutOfRange, std::string(what) + " of " + std::to_string(len) +
                                                     " bytes at " + std::to_string(offset) +
                                                     " outside '" + std::string(param) + "' (" +
                                                     std::to_string(size) + " bytes)");
  }
  return Status::OK();
}

// The first of `count` > 0 hash chunks of parameter `param` (`size` bytes) must start inside it.
inline Status CheckFirstChunk(std::string_view param, size_t size, size_t first,
                              size_t chunk_bytes) {
  if (first >= (size + chunk_bytes - 1) / chunk_bytes) {
    return Status::Error(ErrorCode::kOutOfRange, "chunk " + std::to_string(first) + " outside '" +
                                                     std::string(param) + "' (" +
                                                     std::to_string(size) + " bytes)");
  }
  return Status::OK();
}

// Borrowed buffers ("buffer" on the host, "device tensor" on a GPU): one per parameter of
// the manifest (`buffers` of `params`) ...
inline Status CheckBufferCount(std::string_view kind, size_t buffers, size_t params) {
  if (buffers != params) {
    return Status::InvalidArgument(std::to_string(buffers) + " " + std::string(kind) + "s for " +
                                   std::to_string(params) + " parameters");
  }
  return Status::OK();
}
// ... each exactly as large as its parameter.
inline Status CheckBufferSize(std::string_view kind, std::string_view param, size_t bytes,
                              size_t expected) {
  if (bytes != expected) {
    return Status::InvalidArgument(std::string(kind) + " of '" + std::string(param) + "' has " +
                                   std::to_string(bytes) + " bytes, expected " +
                                   std::to_string(expected));
  }
  return Status::OK();
}

}  // namespace wtx::kernel_args
