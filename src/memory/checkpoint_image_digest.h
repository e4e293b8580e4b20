// CheckpointImageDigest: the digest of a processed parameter's checkpoint bytes (ParamSpec::
// served), which never sit in live memory whole: they pass to the engine's loader as disjoint
// runs in any order (shards, pieces, rows of column slices). The digest is ParamDigest of the
// image those runs make, chunk by chunk (kHashChunkBytes, content_hash.h), so that it equals
// the digest the trainer computes (expected_version.h) and the digest of the same bytes in live
// memory. A chunk a run covers whole is hashed from the caller's bytes at once; a chunk a run
// cuts is kept, only its bytes, until the runs that fill it have come.
//
// Thread-safety: none; one owner (the participant, under its mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace wtx {

class CheckpointImageDigest {
 public:
  explicit CheckpointImageDigest(size_t bytes);

  // Bytes [offset, offset + len) of the image.
  // REQUIRES: inside the image, disjoint from every earlier run (the caller's coverage refuses
  // overlaps before any byte is taken).
  void Add(size_t offset, const uint8_t* data, size_t len);
  // One piece of a batch: bytes [offset, offset + len) of the image.
  struct Run {
    size_t offset;
    const uint8_t* data;
    size_t len;
  };
  // The runs of one source in increasing offset order (the rows of a column slice): a chunk
  // the batch fills whole is hashed straight from the pieces, in order (no copy); the others
  // as Add does. REQUIRES: what Add requires of each run; offsets increasing.
  void AddRuns(const std::vector<Run>& runs);
  // Every byte of the image has come.
  bool complete() const { return done_ == chunks_.size(); }
  // REQUIRES: complete()
  uint64_t Digest() const;
  // The digest of the image with every byte that has not come a zero (padding, bytes no shard
  // holds): the chunks cut are hashed as they stand, the untouched ones as zeros.
  uint64_t DigestZeroFilled() const;
  // Bytes held for chunks still cut.
  size_t pending_bytes() const { return pending_bytes_; }

 private:
  size_t ChunkSize(size_t c) const;

  size_t bytes_;
  std::vector<uint64_t> chunks_;
  std::vector<uint32_t> filled_;  // bytes of each chunk that have come
  std::unordered_map<size_t, std::vector<uint8_t>> cut_;
  size_t done_ = 0;
  size_t pending_bytes_ = 0;
};

}  // namespace wtx
