#include "wtx/content_hash.h"

#include <xxhash.h>
#include <algorithm>
#include <cassert>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's avx512fintrin.h starts its shift and shuffle intrinsics from an uninitialized
// "undefined" vector (__Y) and then warns about it where they are inlined (a known false
// positive of the header, not of this file): silenced for the header and the AVX-512 kernel.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define WTX_AVX512_HEADER_WARNINGS_OFF 1
#endif
#include <immintrin.h>
#define WTX_FUSED_AVX2 1
#endif

#include "src/util/hash_util.h"
#include "src/util/xxh3.h"

namespace wtx {

uint64_t ChunkDigest(const void* data, size_t size) { return Xxh3_64(data, size); }

namespace {

// Copy and hash in one pass. A chunk copied with memcpy and then hashed is read twice; with
// 64 KiB chunks the second read hits the cache, but the two passes still serialize and the
// copy drags the destination into the cache (read for ownership) on the way. The fused kernel
// below loads each 64-byte stripe once, streams it to the destination and feeds the same
// registers to XXH3's accumulator, so the hash rides along with the copy's memory traffic.
//
// It is XXH3_64bits (default secret, seed 0) for inputs longer than XXH3_MIDSIZE_MAX, i.e. the
// "long" algorithm of the XXH3 specification, written for AVX2; content_hash_test checks it
// against libxxhash. Shorter inputs, and CPUs without AVX2, take memcpy + XXH3_64bits.
constexpr size_t kMidSizeMax = 240;

#ifdef WTX_FUSED_AVX2
constexpr size_t kStripe = 64;
constexpr size_t kSecretSize = 192;
constexpr size_t kStripesPerBlock = (kSecretSize - kStripe) / 8;  // 16
constexpr size_t kBlock = kStripe * kStripesPerBlock;             // 1024
constexpr size_t kPrefetchAhead = 4 * kBlock;                     // see CopyHashLongAvx2
constexpr uint64_t kPrime32_1 = 0x9E3779B1U;
constexpr uint64_t kPrime32_2 = 0x85EBCA77U;
constexpr uint64_t kPrime32_3 = 0xC2B2AE3DU;
constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;

// XXH3's default secret (XXH3_kSecret in xxhash.h; fixed by the XXH3 format since 0.8.0).
alignas(64) constexpr uint8_t kSecret[kSecretSize] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

uint64_t ReadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);  // x86-64 is little-endian
  return v;
}

uint64_t Mul128Fold64(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

uint64_t MergeAccs(const uint64_t acc[8], const uint8_t* secret, uint64_t start) {
  uint64_t h = start;
  for (int i = 0; i < 4; ++i) {
    h += Mul128Fold64(acc[2 * i] ^ ReadLE64(secret + 16 * i),
                      acc[2 * i + 1] ^ ReadLE64(secret + 16 * i + 8));
  }
  h ^= h >> 37;  // XXH3_avalanche
  h *= 0x165667919E3779F9ULL;
  h ^= h >> 32;
  return h;
}

enum class Store { kPlain, kStream128, kStream256 };

// One 64-byte stripe: XXH3_accumulate_512 on `a`/`b` (the stripe's two halves).
__attribute__((target("avx2"))) inline void Accumulate(__m256i acc[2], __m256i a, __m256i b,
                                                       const uint8_t* secret) {
  const __m256i data[2] = {a, b};
  for (int i = 0; i < 2; ++i) {
    const __m256i key = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret) + i);
    const __m256i data_key = _mm256_xor_si256(data[i], key);
    const __m256i data_key_lo = _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1));
    const __m256i product = _mm256_mul_epu32(data_key, data_key_lo);
    const __m256i swapped = _mm256_shuffle_epi32(data[i], _MM_SHUFFLE(1, 0, 3, 2));
    acc[i] = _mm256_add_epi64(product, _mm256_add_epi64(acc[i], swapped));
  }
}

// XXH3_scrambleAcc with the block-end secret.
__attribute__((target("avx2"))) inline void Scramble(__m256i acc[2]) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(kPrime32_1));
  const uint8_t* secret = kSecret + kSecretSize - kStripe;
  for (int i = 0; i < 2; ++i) {
    const __m256i shifted = _mm256_xor_si256(acc[i], _mm256_srli_epi64(acc[i], 47));
    const __m256i key = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret) + i);
    const __m256i data_key = _mm256_xor_si256(shifted, key);
    const __m256i data_key_hi = _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1));
    const __m256i lo = _mm256_mul_epu32(data_key, prime);
    const __m256i hi = _mm256_mul_epu32(data_key_hi, prime);
    acc[i] = _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
  }
}

// Copies one stripe and accumulates it.
template <Store kStore>
__attribute__((target("avx2"))) inline void CopyStripe(__m256i acc[2], uint8_t* dst,
                                                       const uint8_t* src, const uint8_t* secret) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src) + 1);
  __m256i* d = reinterpret_cast<__m256i*>(dst);
  if constexpr (kStore == Store::kStream256) {
    _mm256_stream_si256(d, a);
    _mm256_stream_si256(d + 1, b);
  } else if constexpr (kStore == Store::kStream128) {
    __m128i* d2 = reinterpret_cast<__m128i*>(dst);
    _mm_stream_si128(d2, _mm256_castsi256_si128(a));
    _mm_stream_si128(d2 + 1, _mm256_extracti128_si256(a, 1));
    _mm_stream_si128(d2 + 2, _mm256_castsi256_si128(b));
    _mm_stream_si128(d2 + 3, _mm256_extracti128_si256(b, 1));
  } else {
    _mm256_storeu_si256(d, a);
    _mm256_storeu_si256(d + 1, b);
  }
  Accumulate(acc, a, b, secret);
}

// XXH3_hashLong_64b_default, copying as it goes. REQUIRES: len > kMidSizeMax.
template <Store kStore>
__attribute__((target("avx2"))) uint64_t CopyHashLongAvx2(uint8_t* dst, const uint8_t* src,
                                                          size_t len) {
  alignas(32) uint64_t init[8] = {kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
                                  kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1};
  __m256i acc[2] = {_mm256_load_si256(reinterpret_cast<const __m256i*>(init)),
                    _mm256_load_si256(reinterpret_cast<const __m256i*>(init) + 1)};
  const size_t nb_blocks = (len - 1) / kBlock;
  size_t off = 0;
  // The hardware prefetcher alone falls behind once the loop also hashes; asking for the line
  // kPrefetchAhead bytes ahead keeps enough loads in flight to run at the speed of a streaming
  // copy, also when another core streams at the same time (a block ahead was enough for one).
  // (A prefetch past the end of the input is a hint, never a fault.)
  auto prefetch = [&] {
    _mm_prefetch(reinterpret_cast<const char*>(src + off + kPrefetchAhead), _MM_HINT_T0);
  };
  for (size_t n = 0; n < nb_blocks; ++n) {
    for (size_t s = 0; s < kStripesPerBlock; ++s, off += kStripe) {
      prefetch();
      CopyStripe<kStore>(acc, dst + off, src + off, kSecret + s * 8);
    }
    Scramble(acc);
  }
  const size_t nb_stripes = ((len - 1) - kBlock * nb_blocks) / kStripe;
  for (size_t s = 0; s < nb_stripes; ++s, off += kStripe) {
    prefetch();
    CopyStripe<kStore>(acc, dst + off, src + off, kSecret + s * 8);
  }
  // The rest (1..64 bytes) is copied plainly; the last stripe, which overlaps what was already
  // accumulated, is hashed from the (cache-hot) source with its own secret offset.
  std::memcpy(dst + off, src + off, len - off);
  if constexpr (kStore != Store::kPlain) _mm_sfence();  // order the streamed stores
  const uint8_t* last = src + len - kStripe;
  Accumulate(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(last)),
             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(last) + 1),
             kSecret + kSecretSize - kStripe - 7);  // XXH_SECRET_LASTACC_START
  alignas(32) uint64_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), acc[0]);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out) + 1, acc[1]);
  return MergeAccs(out, kSecret + 11, static_cast<uint64_t>(len) * kPrime64_1);
}

// The same with 512-bit registers (AVX-512F): one register per stripe, half the instructions
// of the AVX2 kernel (XXH3_accumulate_512_avx512 and XXH3_scrambleAcc_avx512 of xxhash.h).
__attribute__((target("avx512f"))) inline __m512i Accumulate512(__m512i acc, __m512i data,
                                                                const uint8_t* secret) {
  const __m512i key = _mm512_loadu_si512(secret);
  const __m512i data_key = _mm512_xor_si512(data, key);
  const __m512i data_key_lo = _mm512_srli_epi64(data_key, 32);
  const __m512i product = _mm512_mul_epu32(data_key, data_key_lo);
  const __m512i swapped =
      _mm512_shuffle_epi32(data, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_add_epi64(product, _mm512_add_epi64(acc, swapped));
}

__attribute__((target("avx512f"))) inline __m512i Scramble512(__m512i acc) {
  const __m512i prime = _mm512_set1_epi32(static_cast<int>(kPrime32_1));
  const __m512i shifted = _mm512_srli_epi64(acc, 47);
  const __m512i key = _mm512_loadu_si512(kSecret + kSecretSize - kStripe);
  const __m512i data_key = _mm512_ternarylogic_epi32(key, acc, shifted, 0x96);  // a ^ b ^ c
  const __m512i data_key_hi = _mm512_srli_epi64(data_key, 32);
  const __m512i lo = _mm512_mul_epu32(data_key, prime);
  const __m512i hi = _mm512_mul_epu32(data_key_hi, prime);
  return _mm512_add_epi64(lo, _mm512_slli_epi64(hi, 32));
}

// Copies one stripe (streamed: REQUIRES dst 64-byte aligned) and accumulates it, asking for
// the line one block ahead (see CopyHashLongAvx2).
__attribute__((target("avx512f"))) inline __m512i CopyStripe512(__m512i acc, uint8_t* dst,
                                                                const uint8_t* src,
                                                                const uint8_t* secret) {
  _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchAhead), _MM_HINT_T0);
  const __m512i data = _mm512_loadu_si512(src);
  _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), data);
  return Accumulate512(acc, data, secret);
}

// CopyHashLongAvx2 with 512-bit registers; the destination takes streaming stores.
// REQUIRES: len > kMidSizeMax, dst 64-byte aligned.
__attribute__((target("avx512f"))) uint64_t CopyHashLongAvx512(uint8_t* dst, const uint8_t* src,
                                                               size_t len) {
  alignas(64) uint64_t init[8] = {kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
                                  kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1};
  __m512i acc = _mm512_load_si512(init);
  const size_t nb_blocks = (len - 1) / kBlock;
  size_t off = 0;
  for (size_t n = 0; n < nb_blocks; ++n) {
    for (size_t s = 0; s < kStripesPerBlock; ++s, off += kStripe) {
      acc = CopyStripe512(acc, dst + off, src + off, kSecret + s * 8);
    }
    acc = Scramble512(acc);
  }
  const size_t nb_stripes = ((len - 1) - kBlock * nb_blocks) / kStripe;
  for (size_t s = 0; s < nb_stripes; ++s, off += kStripe) {
    acc = CopyStripe512(acc, dst + off, src + off, kSecret + s * 8);
  }
  std::memcpy(dst + off, src + off, len - off);
  _mm_sfence();  // order the streamed stores
  acc = Accumulate512(acc, _mm512_loadu_si512(src + len - kStripe),
                      kSecret + kSecretSize - kStripe - 7);  // XXH_SECRET_LASTACC_START
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, acc);
  return MergeAccs(out, kSecret + 11, static_cast<uint64_t>(len) * kPrime64_1);
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif  // WTX_FUSED_AVX2
#ifdef WTX_AVX512_HEADER_WARNINGS_OFF
#pragma GCC diagnostic pop
#endif

}  // namespace

uint64_t CopyAndChunkDigest(void* dst, const void* src, size_t size) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
#ifdef WTX_FUSED_AVX2
  if (size > kMidSizeMax && HasAvx2()) {
    const auto a = reinterpret_cast<uintptr_t>(d);
    if (a % 64 == 0 && HasAvx512()) return CopyHashLongAvx512(d, s, size);
    if (a % 32 == 0) return CopyHashLongAvx2<Store::kStream256>(d, s, size);
    if (a % 16 == 0) return CopyHashLongAvx2<Store::kStream128>(d, s, size);
    return CopyHashLongAvx2<Store::kPlain>(d, s, size);
  }
#endif
  if (size > 0) std::memcpy(d, s, size);
  return ChunkDigest(d, size);
}

uint64_t ParamDigestFromChunks(std::span<const uint64_t> chunk_digests) {
  // Digests are stored in host (little-endian on every supported target) order.
  return Xxh3_64(chunk_digests.data(), chunk_digests.size() * sizeof(uint64_t));
}

uint64_t ParamDigest(std::span<const uint8_t> bytes) {
  std::vector<uint64_t> chunks;
  for (size_t off = 0; off < bytes.size(); off += kHashChunkBytes) {
    chunks.push_back(
        ChunkDigest(bytes.data() + off, std::min(kHashChunkBytes, bytes.size() - off)));
  }
  return ParamDigestFromChunks(chunks);
}

namespace {

std::string RankDigestOf(const Manifest& manifest, std::span<const uint64_t> param_digests,
                         bool served) {
  assert(param_digests.size() == manifest.params().size() && "one digest per parameter");
  Hasher128 h;
  h.Str("wtx-rank-v1");
  h.U64(param_digests.size());
  for (uint32_t i : manifest.CanonicalOrder()) {
    const ParamSpec& p = manifest.params()[i];
    const bool form = served && p.served;
    h.Str(p.name);
    h.Str(DTypeName(form ? p.served->dtype : p.dtype));
    const Shape& shape = form ? p.served->shape : p.shape;
    h.U64(shape.size());
    for (int64_t d : shape) h.U64(static_cast<uint64_t>(d));
    h.U64(param_digests[i]);
  }
  return h.HexDigest();
}

}  // namespace

std::string RankDigest(const Manifest& manifest, std::span<const uint64_t> param_digests) {
  return RankDigestOf(manifest, param_digests, /*served=*/false);
}

std::string ServedRankDigest(const Manifest& manifest, std::span<const uint64_t> live_digests) {
  return RankDigestOf(manifest, live_digests, /*served=*/true);
}

std::string CombineRankDigests(std::span<const std::string> rank_digests) {
  Hasher128 h;
  h.Str("wtx-version-v1");
  h.U64(rank_digests.size());
  for (const auto& d : rank_digests) h.Str(d);
  return h.HexDigest();
}

ParamHashCache::ParamHashCache(size_t num_bytes)
    : num_bytes_(num_bytes),
      chunks_((num_bytes + kHashChunkBytes - 1) / kHashChunkBytes),
      touched_(chunks_.size(), true),
      touched_count_(chunks_.size()) {}

void ParamHashCache::Touch(size_t offset, size_t len) {
  if (len == 0) return;
  size_t first = offset / kHashChunkBytes;
  size_t last = (offset + len - 1) / kHashChunkBytes;
  for (size_t c = first; c <= last && c < touched_.size(); ++c) {
    if (!touched_[c]) {
      touched_[c] = true;
      ++touched_count_;
    }
  }
  digest_valid_ = false;
}

void ParamHashCache::SetChunkDigest(size_t chunk, uint64_t digest) {
  assert(chunk < chunks_.size() && "chunk outside the parameter");
  chunks_[chunk] = digest;
  if (touched_[chunk]) {
    touched_[chunk] = false;
    --touched_count_;
  }
  digest_valid_ = false;
}

void ParamHashCache::CopyIn(std::span<uint8_t> bytes, size_t offset, const void* src, size_t len) {
  assert(bytes.size() == num_bytes_ && "copying into a buffer of another size");
  assert(offset + len <= num_bytes_ && "copy outside the parameter");
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t end = offset + len;
  for (size_t pos = offset; pos < end;) {
    const size_t c = pos / kHashChunkBytes;
    const size_t chunk_begin = c * kHashChunkBytes;
    const size_t chunk_end = std::min(chunk_begin + kHashChunkBytes, num_bytes_);
    const size_t stop = std::min(chunk_end, end);
    if (pos == chunk_begin && stop == chunk_end) {
      SetChunkDigest(c, CopyAndChunkDigest(bytes.data() + pos, s, stop - pos));
    } else {
      std::memcpy(bytes.data() + pos, s, stop - pos);
      Touch(pos, stop - pos);
    }
    s += stop - pos;
    pos = stop;
  }
}

std::pair<size_t, size_t> ParamHashCache::CoveredChunks(size_t offset, size_t len) const {
  if (len == 0) return {0, 0};
  const size_t first = (offset + kHashChunkBytes - 1) / kHashChunkBytes;
  const size_t stop = offset + len;
  const size_t end = stop == num_bytes_ ? chunks_.size() : stop / kHashChunkBytes;
  return {first, std::max(first, end)};
}

size_t ParamHashCache::HashCovered(std::span<const uint8_t> bytes, size_t offset, size_t len) {
  assert(bytes.size() == num_bytes_ && "hashing a buffer of another size");
  assert(offset + len <= num_bytes_ && "range outside the parameter");
  const auto [first, end] = CoveredChunks(offset, len);
  for (size_t c = first; c < end; ++c) {
    const size_t off = c * kHashChunkBytes;
    SetChunkDigest(c, ChunkDigest(bytes.data() + off, std::min(kHashChunkBytes, num_bytes_ - off)));
  }
  return end - first;
}

Result<size_t> ParamHashCache::HashCovered(size_t offset, size_t len,
                                           const ChunkDigestFn& compute) {
  assert(offset + len <= num_bytes_ && "range outside the parameter");
  const auto [first, end] = CoveredChunks(offset, len);
  if (first == end) return size_t{0};
  std::vector<uint64_t> out(end - first);
  WTX_RETURN_IF_ERROR(compute(first, end - first, out.data()));
  for (size_t c = first; c < end; ++c) SetChunkDigest(c, out[c - first]);
  return end - first;
}

void ParamHashCache::TouchAll() {
  touched_.assign(chunks_.size(), true);
  touched_count_ = chunks_.size();
  digest_valid_ = false;
}

uint64_t ParamHashCache::Digest(std::span<const uint8_t> bytes) {
  assert(bytes.size() == num_bytes_ && "hashing a buffer of another size");
  if (digest_valid_ && touched_count_ == 0) return digest_;
  for (size_t c = 0; c < chunks_.size() && touched_count_ > 0; ++c) {
    if (!touched_[c]) continue;
    size_t off = c * kHashChunkBytes;
    chunks_[c] = ChunkDigest(bytes.data() + off, std::min(kHashChunkBytes, num_bytes_ - off));
    touched_[c] = false;
    --touched_count_;
  }
  digest_ = ParamDigestFromChunks(chunks_);
  digest_valid_ = true;
  return digest_;
}

Result<uint64_t> ParamHashCache::Digest(const ChunkDigestFn& compute) {
  if (digest_valid_ && touched_count_ == 0) return digest_;
  std::vector<uint64_t> out;
  for (size_t c = 0; c < chunks_.size() && touched_count_ > 0;) {
    if (!touched_[c]) {
      ++c;
      continue;
    }
    size_t end = c;
    while (end < chunks_.size() && touched_[end]) ++end;
    out.resize(end - c);
    WTX_RETURN_IF_ERROR(compute(c, end - c, out.data()));
    for (size_t k = c; k < end; ++k) SetChunkDigest(k, out[k - c]);
    c = end;
  }
  digest_ = ParamDigestFromChunks(chunks_);
  digest_valid_ = true;
  return digest_;
}

}  // namespace wtx
