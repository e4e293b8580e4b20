// Piece digests (wtx/piece_digest.h): XXH3-128 over a piece's bytes.
#include "wtx/piece_digest.h"

#include <algorithm>

#include "src/util/hash_util.h"

namespace wtx {

struct PieceHasher::State {
  Hasher128 h;
};

PieceHasher::PieceHasher() : state_(std::make_unique<State>()) {}
PieceHasher::~PieceHasher() = default;

void PieceHasher::Update(const void* data, size_t bytes) { state_->h.Bytes(data, bytes); }

std::string PieceHasher::HexDigest() const { return state_->h.HexDigest(); }

std::string PieceDigest(const void* data, size_t bytes) {
  return Hex128(XXH3_128bits(data, bytes));
}

bool IsPieceDigest(const std::string& digest) {
  return digest.size() == 32 && std::all_of(digest.begin(), digest.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace wtx
