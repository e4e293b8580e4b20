// Little-endian fixed-width integers in byte strings, as the journal's binary formats store them
// (journal/record.cc: record headers and binary WRITE records; journal/watermark.cc: the sync
// watermark's copies). One definition for both.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace wtx {

inline void PutFixed64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 8);
}

// REQUIRES: p points at 8 readable bytes.
inline uint64_t LoadFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// REQUIRES: p points at 4 readable bytes.
inline uint32_t LoadFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace wtx
