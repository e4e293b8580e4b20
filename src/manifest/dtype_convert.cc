// Exact-in-meaning element type conversions (dtype.h).
#include <cassert>
#include <cstdint>
#include <cstring>

#include "wtx/dtype.h"

namespace wtx {
namespace {

uint32_t F32Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float F32FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return F32FromBits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return F32FromBits(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return F32FromBits(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant << 13));
  }
  return F32FromBits(sign | (exp + 127 - 15) << 23 | (mant << 13));
}

// OCP FP8 E4M3 ("e4m3fn"): bias 7, no infinities, S.1111.111 is NaN.
float Fp8E4M3ToF32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xf && mant == 0x7) return F32FromBits(sign | 0x7fc00000u);
  if (exp == 0) {
    if (mant == 0) return F32FromBits(sign);
    // m x 2^-9
    float f = static_cast<float>(mant) * (1.0f / 512.0f);
    return sign ? -f : f;
  }
  return F32FromBits(sign | (exp + 127 - 7) << 23 | (mant << 20));
}

// An f32 that is zero, NaN, or normal in f16 with at most 10 mantissa bits (every fp8 e4m3
// value is) to f16.
uint16_t ExactF32ToF16(float f) {
  const uint32_t u = F32Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t exp = (u >> 23) & 0xffu;
  if (exp == 0) return sign;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7e00u);
  assert(exp >= 127 - 14 && exp <= 127 + 15 && (u & 0x1fffu) == 0 && "not exact in f16");
  return static_cast<uint16_t>(sign | (exp - 127 + 15) << 10 | ((u >> 13) & 0x3ffu));
}

template <typename From, typename To, typename Fn>
void Map(const void* src, void* dst, size_t count, Fn fn) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < count; ++i) {
    From a;
    std::memcpy(&a, s + i * sizeof(From), sizeof(From));
    To b = fn(a);
    std::memcpy(d + i * sizeof(To), &b, sizeof(To));
  }
}

}  // namespace

bool DTypeConversionIsExact(DType from, DType to) {
  if (from == to) return true;
  switch (from) {
    case DType::kBF16:
    case DType::kF16:
      return to == DType::kF32;
    case DType::kFP8E4M3:
      return to == DType::kF32 || to == DType::kBF16 || to == DType::kF16;
    case DType::kI8:
    case DType::kU8:
      return to == DType::kI32;
    default:
      return false;
  }
}

void ConvertDType(DType from, DType to, const void* src, void* dst, size_t count) {
  assert(DTypeConversionIsExact(from, to) && "inexact dtype conversion");
  if (from == to) {
    std::memcpy(dst, src, count * DTypeSize(from));
    return;
  }
  if (from == DType::kBF16) {
    Map<uint16_t, uint32_t>(src, dst, count, [](uint16_t v) { return uint32_t{v} << 16; });
  } else if (from == DType::kF16) {
    Map<uint16_t, float>(src, dst, count, F16ToF32);
  } else if (from == DType::kFP8E4M3 && to == DType::kF32) {
    Map<uint8_t, float>(src, dst, count, Fp8E4M3ToF32);
  } else if (from == DType::kFP8E4M3 && to == DType::kBF16) {
    Map<uint8_t, uint16_t>(src, dst, count, [](uint8_t v) {
      return static_cast<uint16_t>(F32Bits(Fp8E4M3ToF32(v)) >> 16);
    });
  } else if (from == DType::kFP8E4M3 && to == DType::kF16) {
    Map<uint8_t, uint16_t>(src, dst, count,
                           [](uint8_t v) { return ExactF32ToF16(Fp8E4M3ToF32(v)); });
  } else if (from == DType::kI8) {
    Map<int8_t, int32_t>(src, dst, count, [](int8_t v) { return int32_t{v}; });
  } else {
    Map<uint8_t, int32_t>(src, dst, count, [](uint8_t v) { return int32_t{v}; });
  }
}

}  // namespace wtx
