// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), small and dependency-free, for the
// authentication of wtx network connections. Why not HMAC over XXH3: XXH3 is a fast
// non-cryptographic hash with no collision or preimage resistance against an adversary, so a
// MAC built on it proves nothing about knowing the secret; SHA-256 is the smallest standard
// primitive that does, and it is checked against the FIPS 180-2 and RFC 4231 test vectors
// (tests/net_test.cc). Performance is irrelevant here: a handful of MACs per connection.
//
// Thread-safety: Sha256 objects are not synchronized; the free functions are pure.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace wtx::net {

using Digest256 = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  // REQUIRES: called once; the object is spent afterwards.
  Digest256 Final();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

Digest256 Sha256Of(std::string_view data);
Digest256 HmacSha256(std::string_view key, std::string_view message);
// Lower-case hex of `d`.
std::string ToHex(const Digest256& d);
// Comparison whose time does not depend on where the inputs differ.
bool ConstantTimeEqual(std::string_view a, std::string_view b);

}  // namespace wtx::net
