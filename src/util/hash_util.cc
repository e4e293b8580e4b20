#include "src/util/hash_util.h"

#include <cstdio>

namespace wtx {

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Hex128(XXH128_hash_t h) { return Hex64(h.high64) + Hex64(h.low64); }

std::string Hasher128::HexDigest() const { return Hex128(Digest()); }

}  // namespace wtx
