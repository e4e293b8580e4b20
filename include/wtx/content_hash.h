// Content hashing: the definition of a version. This is the contract the CUDA kernels
// reproduce bit for bit.
//
//   chunk digest  = XXH3_64bits(bytes of one chunk)   (chunks of kHashChunkBytes, last shorter)
//   param digest  = XXH3_64bits(little-endian u64 array of its chunk digests)
//                   (a zero-byte parameter: XXH3_64bits of nothing)
//   rank digest   = XXH3-128 over "wtx-rank-v1" and, for each parameter in name order,
//                   (name, dtype, shape, param digest), length-prefixed
//   version       = XXH3-128 over "wtx-version-v1", the rank count and the rank digests in
//                   rank order; written as 32 hex digits
// Same bytes, same version, whatever the write order or chunking of the writes.
//
// ParamHashCache keeps the chunk digests of one parameter and rehashes only chunks marked
// touched. Writes through CopyIn hash every chunk they cover whole in the same pass as the copy
// (the bytes are hashed while they are in registers, not read back from memory later), so a
// full update costs about one memcpy; chunks a write covers only in part are marked touched and
// rehashed by Digest. Bytes the engine landed in place itself are hashed by HashCovered when
// the landing is reported complete (chunks it covers whole; the rest stay touched), so they
// are read again while still likely in cache rather than at prepare. The digests are the same
// whatever path computed them.
// Thread-safety: a ParamHashCache is not synchronized; the free functions keep no state.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "wtx/manifest.h"

namespace wtx {

inline constexpr size_t kHashChunkBytes = 64 * 1024;

uint64_t ChunkDigest(const void* data, size_t size);
// Copies `size` bytes from `src` to `dst` and returns ChunkDigest(src, size), reading the bytes
// once. Large copies bypass the cache (non-temporal stores) where the CPU supports it.
// REQUIRES: the ranges do not overlap.
uint64_t CopyAndChunkDigest(void* dst, const void* src, size_t size);
uint64_t ParamDigestFromChunks(std::span<const uint64_t> chunk_digests);
// Whole-buffer reference: chunks + combination in one call.
uint64_t ParamDigest(std::span<const uint8_t> bytes);
// The rank's checkpoint digest: each parameter's digest of its checkpoint bytes (dtype, shape).
std::string RankDigest(const Manifest& manifest, std::span<const uint64_t> param_digests);
// The rank's served digest: each parameter's digest of its live bytes, a processed parameter
// described by its served form. Equal to RankDigest where no parameter is processed.
std::string ServedRankDigest(const Manifest& manifest, std::span<const uint64_t> live_digests);
std::string CombineRankDigests(std::span<const std::string> rank_digests);

class ParamHashCache {
 public:
  explicit ParamHashCache(size_t num_bytes = 0);
  // Bytes [offset, offset + len) changed.
  void Touch(size_t offset, size_t len);
  void TouchAll();
  // The digest of chunk `chunk` over its current bytes is `digest`; clears its touched mark.
  // REQUIRES: chunk < num_chunks()
  void SetChunkDigest(size_t chunk, uint64_t digest);
  // Copies `len` bytes from `src` to bytes[offset, offset + len) and keeps the cache exact:
  // chunks the range covers whole get their digest in the same pass, the partly covered ones
  // at its ends are marked touched.
  // REQUIRES: bytes.size() equals the constructor's num_bytes, offset + len <= bytes.size(),
  // and `src` does not overlap the destination.
  void CopyIn(std::span<uint8_t> bytes, size_t offset, const void* src, size_t len);
  // Bytes [offset, offset + len) are final (an in-place landing completed): computes now the
  // digest of every chunk the range covers whole (a last, shorter chunk counts when the range
  // reaches the end) and clears its touched mark, while the bytes are likely still in cache;
  // chunks the range covers only in part keep their mark. Returns how many were hashed.
  // REQUIRES: bytes.size() equals the constructor's num_bytes, offset + len <= bytes.size().
  size_t HashCovered(std::span<const uint8_t> bytes, size_t offset, size_t len);
  // The chunks [first, end) that bytes [offset, offset + len) cover whole, as HashCovered
  // counts them (first == end: none).
  std::pair<size_t, size_t> CoveredChunks(size_t offset, size_t len) const;
  // Rehashes touched chunks of `bytes` and returns the parameter digest.
  // REQUIRES: bytes.size() equals the constructor's num_bytes.
  uint64_t Digest(std::span<const uint8_t> bytes);
  // The same for bytes the host cannot read: `compute(first, count, out)` fills the digests of
  // chunks [first, first + count) (a device kernel), called once per run of touched chunks.
  // A failing `compute` leaves its chunks touched and returns its error.
  using ChunkDigestFn = std::function<Status(size_t first, size_t count, uint64_t* out)>;
  Result<uint64_t> Digest(const ChunkDigestFn& compute);
  // The same for bytes the host cannot read: one `compute` call for the covered chunks. A
  // failing `compute` leaves them touched and returns its error.
  Result<size_t> HashCovered(size_t offset, size_t len, const ChunkDigestFn& compute);
  size_t touched_chunks() const { return touched_count_; }
  // Whether chunk `chunk` is marked for rehashing. REQUIRES: chunk < num_chunks()
  bool touched(size_t chunk) const { return touched_[chunk]; }
  // The cached chunk digests; exact for the live bytes only when touched_chunks() == 0.
  std::span<const uint64_t> chunk_digests() const { return chunks_; }
  size_t num_chunks() const { return chunks_.size(); }

 private:
  size_t num_bytes_;
  std::vector<uint64_t> chunks_;
  std::vector<bool> touched_;
  size_t touched_count_;
  uint64_t digest_ = 0;
  bool digest_valid_ = false;
};

}  // namespace wtx
