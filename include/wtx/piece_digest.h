// Piece digests: the end-to-end proof of one piece of an M-to-N update (docs/m2n.md).
//
//   piece digest = XXH3-128 (seed 0, libxxhash's default secret) over the piece's bytes: the
//                  elements of its box (source coordinates) in row-major order of the box,
//                  each in the live dtype of the parameter the source feeds, little-endian;
//                  written as 32 lowercase hex digits (high 64 bits first).
//
// A sender computes it over the bytes it sends (PieceDigest); a rank computes it over what
// landed in its live memory (Participant::ExpectPiece, checked at prepare). Same elements, same
// digest, whatever the transport or the layout of the shard the piece lands in.
//
// Thread-safety: a PieceHasher is not synchronized; PieceDigest keeps no state.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace wtx {

std::string PieceDigest(const void* data, size_t bytes);

// The same digest over bytes given in several runs (one row of the box after another).
class PieceHasher {
 public:
  PieceHasher();
  ~PieceHasher();
  PieceHasher(const PieceHasher&) = delete;
  PieceHasher& operator=(const PieceHasher&) = delete;
  void Update(const void* data, size_t bytes);
  std::string HexDigest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// True when `digest` is 32 lowercase hex digits.
bool IsPieceDigest(const std::string& digest);

}  // namespace wtx
