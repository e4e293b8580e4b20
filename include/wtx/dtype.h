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

// Conversions between element types that are exact in meaning (every value of `from` is a
// value of `to`): the identity, bf16 -> f32, f16 -> f32, fp8_e4m3 -> bf16/f16/f32, i8 -> i32,
// u8 -> i32. Everything else (f32 -> bf16, f16 <-> bf16, ...) rounds or overflows: refused.
bool DTypeConversionIsExact(DType from, DType to);
// Converts `count` elements of `src` (type `from`) to `dst` (type `to`).
// REQUIRES: DTypeConversionIsExact(from, to); dst holds count x DTypeSize(to) bytes and does
// not overlap src.
void ConvertDType(DType from, DType to, const void* src, void* dst, size_t count);

}  // namespace wtx
