// Checked arithmetic for sizes computed from untrusted numbers: element counts, byte counts,
// box volumes, offsets, indices, frame lengths, part counts. Every function reports overflow
// (and negative extents where a size is meant) instead of wrapping; callers turn that into an
// error naming the field. Uses the compiler's overflow builtins (exact, branch-cheap).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

namespace wtx {

// *out = a * b; false (and *out unspecified) on overflow of T.
template <typename T>
[[nodiscard]] inline bool CheckedMul(T a, T b, T* out) {
  static_assert(std::is_integral_v<T>, "checked arithmetic on integers only");
  return !__builtin_mul_overflow(a, b, out);
}

// *out = a + b; false on overflow of T.
template <typename T>
[[nodiscard]] inline bool CheckedAdd(T a, T b, T* out) {
  static_assert(std::is_integral_v<T>, "checked arithmetic on integers only");
  return !__builtin_add_overflow(a, b, out);
}

// *out = a - b; false on overflow of T.
template <typename T>
[[nodiscard]] inline bool CheckedSub(T a, T b, T* out) {
  static_assert(std::is_integral_v<T>, "checked arithmetic on integers only");
  return !__builtin_sub_overflow(a, b, out);
}

// The product of `extents` (1 for none); nullopt when one is negative or the product
// overflows int64_t.
inline std::optional<int64_t> CheckedProduct(const std::vector<int64_t>& extents) {
  int64_t n = 1;
  for (int64_t d : extents) {
    if (d < 0 || !CheckedMul(n, d, &n)) return std::nullopt;
  }
  return n;
}

// elements * element_size as a byte count; nullopt on a negative count or overflow.
inline std::optional<int64_t> CheckedBytes(int64_t elements, size_t element_size) {
  int64_t bytes = 0;
  if (elements < 0 || element_size > static_cast<size_t>(INT64_MAX) ||
      !CheckedMul(elements, static_cast<int64_t>(element_size), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

}  // namespace wtx
