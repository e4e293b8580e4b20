#include "src/memory/checkpoint_image_digest.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <memory>

#include "src/util/xxh3.h"
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
        buf.resize(size);  // zeros: bytes that never come hash as zeros (DigestZeroFilled)
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

void CheckpointImageDigest::AddRuns(const std::vector<Run>& runs) {
  size_t k = 0;     // the run at hand
  size_t used = 0;  // its bytes already taken
  std::unique_ptr<Xxh3Stream> stream;
  auto advance = [&](size_t n) {
    used += n;
    if (used == runs[k].len) {
      ++k;
      used = 0;
    }
  };
  while (k < runs.size()) {
    const size_t off = runs[k].offset + used;
    const uint8_t* data = runs[k].data + used;
    const size_t len = runs[k].len - used;
    const size_t c = off / kHashChunkBytes;
    const size_t chunk_end = c * kHashChunkBytes + ChunkSize(c);
    if (len >= chunk_end - off || filled_[c] != 0 || off != c * kHashChunkBytes) {
      // A run that reaches the chunk's end (hashed at once if it holds it whole), or a chunk
      // already cut: the general way.
      const size_t take = std::min(len, chunk_end - off);
      Add(off, data, take);
      advance(take);
      continue;
    }
    // Does the batch fill chunk c whole from here, run after run with no gap?
    size_t reach = off + len;
    for (size_t m = k + 1; reach < chunk_end && m < runs.size() && runs[m].offset == reach; ++m) {
      reach += runs[m].len;
    }
    if (reach < chunk_end) {
      Add(off, data, len);
      advance(len);
      continue;
    }
    // It does: hashed from the pieces in order, no copy.
    if (!stream) stream = std::make_unique<Xxh3Stream>();
    stream->Reset();
    while (true) {
      const size_t at = runs[k].offset + used;
      const size_t take = std::min(runs[k].len - used, chunk_end - at);
      stream->Update(runs[k].data + used, take);
      advance(take);
      if (at + take == chunk_end) break;
    }
    chunks_[c] = stream->Digest();
    filled_[c] = static_cast<uint32_t>(chunk_end - c * kHashChunkBytes);
    ++done_;
  }
}

uint64_t CheckpointImageDigest::Digest() const {
  assert(complete() && "every byte of the image has come");
  return ParamDigestFromChunks(chunks_);
}

uint64_t CheckpointImageDigest::DigestZeroFilled() const {
  std::vector<uint64_t> chunks = chunks_;
  std::vector<uint8_t> zeros;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const size_t size = ChunkSize(c);
    if (filled_[c] == size) continue;
    if (auto it = cut_.find(c); it != cut_.end()) {
      chunks[c] = ChunkDigest(it->second.data(), size);
    } else {
      zeros.resize(size);  // value-initialized: zeros
      chunks[c] = ChunkDigest(zeros.data(), size);
    }
  }
  return ParamDigestFromChunks(chunks);
}

}  // namespace wtx
