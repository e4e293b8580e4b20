// XXH3_64bits (seed 0, default secret) as __host__ __device__ code, so that the CUDA kernels
// and their CPU reference run the very same source. This is a port of the XXH3 specification
// (xxhash.h 0.8.x, "XXH3_64bits"), in three layers:
//
//  * Hash64(p, len): the sequential algorithm, every length (0-16, 17-128, 129-240 bytes and
//    the long, > 240 byte, stripe/block algorithm).
//  * The lane decomposition of the long algorithm used by the kernels: the 8 accumulator lanes
//    are independent (a stripe adds to lane i the keyed product of word i and the raw word i^1;
//    the per-block scramble is lane-wise), and additions commute, so the contribution of one
//    1 KiB block to one lane (BlockLaneDelta) can be computed by any thread in any order, and
//    one thread per lane then chains the blocks (ChainLane). HashLongDecomposed runs that
//    decomposition sequentially; tests check it and Hash64 against libxxhash's XXH3_64bits.
//
// Endianness: little-endian hosts and devices only (x86-64, aarch64, NVIDIA GPUs).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define WTX_HD __host__ __device__ __forceinline__
#define WTX_HD_CONST __device__ __constant__
#else
#define WTX_HD inline
#define WTX_HD_CONST
#endif

namespace wtx::xxh3 {

inline constexpr size_t kSecretSize = 192;
inline constexpr size_t kStripeLen = 64;
inline constexpr size_t kStripesPerBlock = (kSecretSize - kStripeLen) / 8;  // 16
inline constexpr size_t kBlockLen = kStripeLen * kStripesPerBlock;          // 1024
inline constexpr size_t kMidSizeMax = 240;
inline constexpr size_t kSecretLastAccStart = 7;
inline constexpr size_t kSecretMergeAccsStart = 11;
inline constexpr size_t kMidSizeStartOffset = 3;
inline constexpr size_t kMidSizeLastOffset = 17;
inline constexpr size_t kSecretSizeMin = 136;

inline constexpr uint64_t kPrime32_1 = 0x9E3779B1U;
inline constexpr uint64_t kPrime32_2 = 0x85EBCA77U;
inline constexpr uint64_t kPrime32_3 = 0xC2B2AE3DU;
inline constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
inline constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
inline constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;

// XXH3's default secret (XXH3_kSecret in xxhash.h; fixed by the XXH3 format since 0.8.0).
// The default secret is read as little-endian words below; the device copy lives in constant
// memory (one copy per translation unit that includes this header from CUDA code).
#define WTX_XXH3_SECRET_BYTES                                                                     \
  {                                                                                               \
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad,     \
        0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, \
        0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, \
        0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, \
        0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, \
        0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, \
        0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, \
        0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, \
        0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, \
        0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, \
        0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d, \
        0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f, \
        0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e                    \
  }

#if defined(__CUDACC__)
WTX_HD_CONST static const uint8_t kDeviceSecret[kSecretSize] = WTX_XXH3_SECRET_BYTES;
#endif
alignas(64) inline constexpr uint8_t kHostSecret[kSecretSize] = WTX_XXH3_SECRET_BYTES;

// The default secret for the side (host or device) this instantiation runs on.
WTX_HD const uint8_t* Secret() {
#if defined(__CUDA_ARCH__)
  return kDeviceSecret;
#else
  return kHostSecret;
#endif
}

// Unaligned little-endian loads, byte by byte unless the address is aligned (the compiler
// turns the byte loop into one load on the host; on the device the aligned branch is the
// common one: chunks start at multiples of 64 KiB from a cudaMalloc'd base).
WTX_HD uint64_t Read64(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 7) == 0) return *reinterpret_cast<const uint64_t*>(p);
#endif
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
WTX_HD uint32_t Read32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) return *reinterpret_cast<const uint32_t*>(p);
#endif
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

WTX_HD uint64_t Mul128Fold64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ __umul64hi(a, b);
#else
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}

WTX_HD uint64_t Rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
WTX_HD uint32_t Swap32(uint32_t x) {
  return ((x << 24) & 0xff000000U) | ((x << 8) & 0x00ff0000U) | ((x >> 8) & 0x0000ff00U) |
         ((x >> 24) & 0x000000ffU);
}
WTX_HD uint64_t Swap64(uint64_t x) {
  return (static_cast<uint64_t>(Swap32(static_cast<uint32_t>(x))) << 32) |
         Swap32(static_cast<uint32_t>(x >> 32));
}

WTX_HD uint64_t Xxh64Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  h ^= h >> 32;
  return h;
}
WTX_HD uint64_t Avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  h ^= h >> 32;
  return h;
}
WTX_HD uint64_t Rrmxmx(uint64_t h, uint64_t len) {
  h ^= Rotl64(h, 49) ^ Rotl64(h, 24);
  h *= 0x9FB21C651E98DF25ULL;
  h ^= (h >> 35) + len;
  h *= 0x9FB21C651E98DF25ULL;
  return h ^ (h >> 28);
}

// ---- short inputs (0-240 bytes), seed 0 ----

WTX_HD uint64_t Len0To16(const uint8_t* p, size_t len, const uint8_t* secret) {
  if (len > 8) {
    const uint64_t bitflip1 = Read64(secret + 24) ^ Read64(secret + 32);
    const uint64_t bitflip2 = Read64(secret + 40) ^ Read64(secret + 48);
    const uint64_t lo = Read64(p) ^ bitflip1;
    const uint64_t hi = Read64(p + len - 8) ^ bitflip2;
    const uint64_t acc = len + Swap64(lo) + hi + Mul128Fold64(lo, hi);
    return Avalanche(acc);
  }
  if (len >= 4) {
    const uint32_t in1 = Read32(p);
    const uint32_t in2 = Read32(p + len - 4);
    const uint64_t bitflip = Read64(secret + 8) ^ Read64(secret + 16);
    const uint64_t in64 = in2 + (static_cast<uint64_t>(in1) << 32);
    return Rrmxmx(in64 ^ bitflip, len);
  }
  if (len > 0) {
    const uint32_t c1 = p[0];
    const uint32_t c2 = p[len >> 1];
    const uint32_t c3 = p[len - 1];
    const uint32_t combined =
        (c1 << 16) | (c2 << 24) | (c3 << 0) | (static_cast<uint32_t>(len) << 8);
    const uint64_t bitflip = Read32(secret) ^ Read32(secret + 4);
    return Xxh64Avalanche(static_cast<uint64_t>(combined) ^ bitflip);
  }
  return Xxh64Avalanche(Read64(secret + 56) ^ Read64(secret + 64));
}

WTX_HD uint64_t Mix16B(const uint8_t* p, const uint8_t* secret) {
  return Mul128Fold64(Read64(p) ^ Read64(secret), Read64(p + 8) ^ Read64(secret + 8));
}

WTX_HD uint64_t Len17To128(const uint8_t* p, size_t len, const uint8_t* secret) {
  uint64_t acc = len * kPrime64_1;
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        acc += Mix16B(p + 48, secret + 96);
        acc += Mix16B(p + len - 64, secret + 112);
      }
      acc += Mix16B(p + 32, secret + 64);
      acc += Mix16B(p + len - 48, secret + 80);
    }
    acc += Mix16B(p + 16, secret + 32);
    acc += Mix16B(p + len - 32, secret + 48);
  }
  acc += Mix16B(p + 0, secret + 0);
  acc += Mix16B(p + len - 16, secret + 16);
  return Avalanche(acc);
}

WTX_HD uint64_t Len129To240(const uint8_t* p, size_t len, const uint8_t* secret) {
  uint64_t acc = len * kPrime64_1;
  const int rounds = static_cast<int>(len / 16);
  for (int i = 0; i < 8; ++i) acc += Mix16B(p + 16 * i, secret + 16 * i);
  acc = Avalanche(acc);
  for (int i = 8; i < rounds; ++i) {
    acc += Mix16B(p + 16 * i, secret + 16 * (i - 8) + kMidSizeStartOffset);
  }
  acc += Mix16B(p + len - 16, secret + kSecretSizeMin - kMidSizeLastOffset);
  return Avalanche(acc);
}

// ---- long inputs (> 240 bytes) ----

// XXH3_INIT_ACC.
WTX_HD uint64_t InitAcc(int lane) {
  switch (lane) {
    case 0:
      return kPrime32_3;
    case 1:
      return kPrime64_1;
    case 2:
      return kPrime64_2;
    case 3:
      return kPrime64_3;
    case 4:
      return kPrime64_4;
    case 5:
      return kPrime32_2;
    case 6:
      return kPrime64_5;
    default:
      return kPrime32_1;
  }
}

// What XXH3_accumulate_512 adds to lane `lane` for the stripe at `stripe` keyed by `secret`.
WTX_HD uint64_t StripeLaneDelta(const uint8_t* stripe, const uint8_t* secret, int lane) {
  const uint64_t own = Read64(stripe + 8 * lane);
  const uint64_t key = own ^ Read64(secret + 8 * lane);
  const uint64_t swapped = Read64(stripe + 8 * (lane ^ 1));
  return swapped + (key & 0xFFFFFFFFULL) * (key >> 32);
}

// XXH3_scrambleAcc on one lane, with the block-end secret.
WTX_HD uint64_t ScrambleLane(uint64_t acc, const uint8_t* secret, int lane) {
  const uint64_t key = Read64(secret + kSecretSize - kStripeLen + 8 * lane);
  acc ^= acc >> 47;
  acc ^= key;
  return acc * kPrime32_1;
}

// Number of 1 KiB blocks scrambled, and stripes in the (unscrambled) tail block, for `len`.
WTX_HD size_t LongFullBlocks(size_t len) { return (len - 1) / kBlockLen; }
WTX_HD size_t LongTailStripes(size_t len) {
  return ((len - 1) - kBlockLen * LongFullBlocks(len)) / kStripeLen;
}

// Sum of the contributions to lane `lane` of stripes [first, first + count) of the block at
// `block` (the stripes use secret offsets 8 * stripe).
WTX_HD uint64_t BlockLaneDelta(const uint8_t* block, size_t first, size_t count, int lane,
                               const uint8_t* secret) {
  uint64_t sum = 0;
  for (size_t s = first; s < first + count; ++s) {
    sum += StripeLaneDelta(block + s * kStripeLen, secret + 8 * s, lane);
  }
  return sum;
}

// The contribution of the last stripe (at len - 64, XXH3's "last stripe" secret offset).
WTX_HD uint64_t LastStripeLaneDelta(const uint8_t* p, size_t len, int lane, const uint8_t* secret) {
  return StripeLaneDelta(p + len - kStripeLen,
                         secret + kSecretSize - kStripeLen - kSecretLastAccStart, lane);
}

// Folds block deltas into a lane: acc = scramble(acc + delta) per full block.
WTX_HD uint64_t ChainLane(uint64_t acc, uint64_t block_delta, const uint8_t* secret, int lane) {
  return ScrambleLane(acc + block_delta, secret, lane);
}

// XXH3_mergeAccs after the last stripe.
WTX_HD uint64_t MergeAccs(const uint64_t acc[8], size_t len, const uint8_t* secret) {
  uint64_t h = len * kPrime64_1;
  for (int i = 0; i < 4; ++i) {
    h += Mul128Fold64(acc[2 * i] ^ Read64(secret + kSecretMergeAccsStart + 16 * i),
                      acc[2 * i + 1] ^ Read64(secret + kSecretMergeAccsStart + 16 * i + 8));
  }
  return Avalanche(h);
}

// The long algorithm, in the order of the specification (stripe after stripe).
WTX_HD uint64_t HashLong(const uint8_t* p, size_t len, const uint8_t* secret) {
  uint64_t acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = InitAcc(i);
  const size_t blocks = LongFullBlocks(len);
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t s = 0; s < kStripesPerBlock; ++s) {
      const uint8_t* stripe = p + b * kBlockLen + s * kStripeLen;
      uint64_t next[8];
      for (int i = 0; i < 8; ++i) next[i] = acc[i] + StripeLaneDelta(stripe, secret + 8 * s, i);
      for (int i = 0; i < 8; ++i) acc[i] = next[i];
    }
    for (int i = 0; i < 8; ++i) acc[i] = ScrambleLane(acc[i], secret, i);
  }
  const size_t tail = LongTailStripes(len);
  for (size_t s = 0; s < tail; ++s) {
    for (int i = 0; i < 8; ++i) {
      acc[i] += StripeLaneDelta(p + blocks * kBlockLen + s * kStripeLen, secret + 8 * s, i);
    }
  }
  for (int i = 0; i < 8; ++i) acc[i] += LastStripeLaneDelta(p, len, i, secret);
  return MergeAccs(acc, len, secret);
}

// The same, through the lane decomposition the kernels use.
WTX_HD uint64_t HashLongDecomposed(const uint8_t* p, size_t len, const uint8_t* secret) {
  uint64_t acc[8];
  const size_t blocks = LongFullBlocks(len);
  const size_t tail = LongTailStripes(len);
  for (int lane = 0; lane < 8; ++lane) {
    uint64_t a = InitAcc(lane);
    for (size_t b = 0; b < blocks; ++b) {
      a = ChainLane(a, BlockLaneDelta(p + b * kBlockLen, 0, kStripesPerBlock, lane, secret), secret,
                    lane);
    }
    a += BlockLaneDelta(p + blocks * kBlockLen, 0, tail, lane, secret);
    a += LastStripeLaneDelta(p, len, lane, secret);
    acc[lane] = a;
  }
  return MergeAccs(acc, len, secret);
}

// The decomposition in the exact loop structure of the kernel (gpu_kernels.cu,
// CooperativeHash64): the full blocks and the tail block form `items`, processed in tiles of
// `tile` items (deltas first, then the per-lane chain over the tile), then the last stripe.
WTX_HD uint64_t HashLongTiled(const uint8_t* p, size_t len, const uint8_t* secret, size_t tile) {
  const size_t full = LongFullBlocks(len);
  const size_t tail = LongTailStripes(len);
  const size_t items = full + 1;
  uint64_t acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = InitAcc(i);
  uint64_t delta[64][8];
  if (tile > 64) tile = 64;
  for (size_t t0 = 0; t0 < items; t0 += tile) {
    const size_t n = items - t0 < tile ? items - t0 : tile;
    for (size_t w = 0; w < n * 8; ++w) {  // the kernel: one thread per w
      const size_t b = t0 + w / 8;
      const int lane = static_cast<int>(w % 8);
      delta[w / 8][lane] =
          BlockLaneDelta(p + b * kBlockLen, 0, b < full ? kStripesPerBlock : tail, lane, secret);
    }
    for (int lane = 0; lane < 8; ++lane) {  // the kernel: threads 0-7
      for (size_t k = 0; k < n; ++k) {
        acc[lane] = t0 + k < full ? ChainLane(acc[lane], delta[k][lane], secret, lane)
                                  : acc[lane] + delta[k][lane];
      }
    }
  }
  for (int lane = 0; lane < 8; ++lane) acc[lane] += LastStripeLaneDelta(p, len, lane, secret);
  return MergeAccs(acc, len, secret);
}

// XXH3_64bits(p, len): seed 0, default secret.
WTX_HD uint64_t Hash64(const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const uint8_t* secret = Secret();
  if (len <= 16) return Len0To16(p, len, secret);
  if (len <= 128) return Len17To128(p, len, secret);
  if (len <= kMidSizeMax) return Len129To240(p, len, secret);
  return HashLong(p, len, secret);
}

}  // namespace wtx::xxh3
