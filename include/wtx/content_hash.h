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
// touched. Thread-safety: a ParamHashCache is not synchronized.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "wtx/manifest.h"

namespace wtx {

inline constexpr size_t kHashChunkBytes = 64 * 1024;

uint64_t ChunkDigest(const void* data, size_t size);
uint64_t ParamDigestFromChunks(std::span<const uint64_t> chunk_digests);
// Whole-buffer reference: chunks + combination in one call.
uint64_t ParamDigest(std::span<const uint8_t> bytes);
std::string RankDigest(const Manifest& manifest, std::span<const uint64_t> param_digests);
std::string CombineRankDigests(std::span<const std::string> rank_digests);

class ParamHashCache {
 public:
  explicit ParamHashCache(size_t num_bytes = 0);
  // Bytes [offset, offset + len) changed.
  void Touch(size_t offset, size_t len);
  void TouchAll();
  // Rehashes touched chunks of `bytes` and returns the parameter digest.
  // REQUIRES: bytes.size() equals the constructor's num_bytes.
  uint64_t Digest(std::span<const uint8_t> bytes);
  size_t touched_chunks() const { return touched_count_; }

 private:
  size_t num_bytes_;
  std::vector<uint64_t> chunks_;
  std::vector<bool> touched_;
  size_t touched_count_;
  uint64_t digest_ = 0;
  bool digest_valid_ = false;
};

}  // namespace wtx
