#include "wtx/content_hash.h"

#include <cassert>
#include <xxhash.h>

#include "hash_util.h"

namespace wtx {

uint64_t ChunkDigest(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t ParamDigestFromChunks(std::span<const uint64_t> chunk_digests) {
  // Digests are stored in host (little-endian on every supported target) order.
  return XXH3_64bits(chunk_digests.data(), chunk_digests.size() * sizeof(uint64_t));
}

uint64_t ParamDigest(std::span<const uint8_t> bytes) {
  std::vector<uint64_t> chunks;
  for (size_t off = 0; off < bytes.size(); off += kHashChunkBytes) {
    chunks.push_back(ChunkDigest(bytes.data() + off, std::min(kHashChunkBytes, bytes.size() - off)));
  }
  return ParamDigestFromChunks(chunks);
}

std::string RankDigest(const Manifest& manifest, std::span<const uint64_t> param_digests) {
  assert(param_digests.size() == manifest.params().size() && "one digest per parameter");
  Hasher128 h;
  h.Str("wtx-rank-v1");
  h.U64(param_digests.size());
  for (uint32_t i : manifest.CanonicalOrder()) {
    const ParamSpec& p = manifest.params()[i];
    h.Str(p.name);
    h.Str(DTypeName(p.dtype));
    h.U64(p.shape.size());
    for (int64_t d : p.shape) h.U64(static_cast<uint64_t>(d));
    h.U64(param_digests[i]);
  }
  return h.HexDigest();
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

}  // namespace wtx
