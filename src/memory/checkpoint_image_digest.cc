#include "src/memory/checkpoint_image_digest.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "wtx/content_hash.h"

namespace wtx {

CheckpointImageDigest::CheckpointImageDigest(size_t bytes)
    : bytes_(bytes),
      chunks_((bytes + kHashChunkBytes - 1) / kHashChunkBytes),
      filled_(chunks_.size(), 0) {}

size_t CheckpointImageDigest::ChunkSize(size_t c) const {
  return std::min(kHashChunkBytes, bytes_ - c * kHashChunkBytes);
}

void CheckpointImageDigest::Add(size_t offset, const uint8_t* data, size_t len) {
  assert(offset + len <= bytes_ && "a run inside the image");
  while (len > 0) {
    const size_t c = offset / kHashChunkBytes;
    const size_t in_chunk = offset - c * kHashChunkBytes;
    const size_t size = ChunkSize(c);
    const size_t take = std::min(len, size - in_chunk);
    if (take == size) {
      assert(filled_[c] == 0 && "disjoint runs");
      chunks_[c] = ChunkDigest(data, size);
      filled_[c] = static_cast<uint32_t>(size);
      ++done_;
    } else {
      std::vector<uint8_t>& buf = cut_[c];
      if (buf.empty()) {
        buf.resize(size);
        pending_bytes_ += size;
      }
      std::memcpy(buf.data() + in_chunk, data, take);
      filled_[c] += static_cast<uint32_t>(take);
      assert(filled_[c] <= size && "disjoint runs");
      if (filled_[c] == size) {
        chunks_[c] = ChunkDigest(buf.data(), size);
        pending_bytes_ -= size;
        cut_.erase(c);
        ++done_;
      }
    }
    offset += take;
    data += take;
    len -= take;
  }
}

uint64_t CheckpointImageDigest::Digest() const {
  assert(complete() && "every byte of the image has come");
  return ParamDigestFromChunks(chunks_);
}

}  // namespace wtx
