// Element types of live parameters, with their byte widths and spec names.
//
// Thread-safety: pure functions, safe from any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace wtx {

enum class DType { kF32, kBF16, kF16, kFP8E4M3, kI8, kU8, kI32 };

// Bytes per element: 4, 2, 2, 1, 1, 1, 4.
size_t DTypeSize(DType dtype);
// "f32", "bf16", "f16", "fp8_e4m3", "i8", "u8", "i32".
std::string_view DTypeName(DType dtype);
std::optional<DType> DTypeFromName(std::string_view name);

}  // namespace wtx
