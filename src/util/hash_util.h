// Internal helpers over libxxhash: streaming 128-bit hashing for fingerprints and versions,
// hex formatting.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <xxhash.h>

namespace wtx {

class Hasher128 {
 public:
  Hasher128() : state_(XXH3_createState()) { XXH3_128bits_reset(state_); }
  ~Hasher128() { XXH3_freeState(state_); }
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;

  void Bytes(const void* p, size_t n) { XXH3_128bits_update(state_, p, n); }
  void U64(uint64_t v) { Bytes(&v, sizeof v); }
  // Length-prefixed, so concatenations cannot collide.
  void Str(std::string_view s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  XXH128_hash_t Digest() const { return XXH3_128bits_digest(state_); }
  std::string HexDigest() const;

 private:
  XXH3_state_t* state_;
};

std::string Hex64(uint64_t v);
std::string Hex128(XXH128_hash_t h);

}  // namespace wtx
