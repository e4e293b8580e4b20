// The cryptographic primitives of the wtx wire, all from OpenSSL (libcrypto): SHA-256,
// HMAC-SHA-256 (the handshake MACs that bind a connection's role and rank inside TLS), HKDF
// (the TLS 1.3 external PSK derived from the shared secret), random bytes and a constant-time
// comparison. Nothing here is hand-written cryptography.
//
// Thread-safety: every function is pure or uses OpenSSL's thread-safe generator.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "wtx/status.h"

namespace wtx::net {

using Digest256 = std::array<uint8_t, 32>;

Digest256 Sha256Of(std::string_view data);
Digest256 HmacSha256(std::string_view key, std::string_view message);
// HKDF-SHA-256 (RFC 5869) of `secret` with `salt` and `info`, 32 bytes.
Digest256 HkdfSha256(std::string_view secret, std::string_view salt, std::string_view info);
// `n` bytes from OpenSSL's CSPRNG (seeded by the OS); an error only if it cannot be seeded.
Result<std::string> RandomBytes(size_t n);
// Lower-case hex.
std::string ToHex(const Digest256& d);
std::string ToHex(std::string_view bytes);
// Comparison whose time does not depend on where the inputs differ (CRYPTO_memcmp).
bool ConstantTimeEqual(std::string_view a, std::string_view b);

}  // namespace wtx::net
