#include "src/net/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cassert>

namespace wtx::net {

Digest256 Sha256Of(std::string_view data) {
  Digest256 d{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data());
  return d;
}

Digest256 HmacSha256(std::string_view key, std::string_view message) {
  Digest256 d{};
  unsigned int len = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), d.data(), &len);
  assert(ok && len == d.size() && "HMAC-SHA-256 cannot fail on valid inputs");
  (void)ok;
  return d;
}

Digest256 HkdfSha256(std::string_view secret, std::string_view salt, std::string_view info) {
  Digest256 out{};
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  size_t len = out.size();
  const bool ok =
      ctx && EVP_PKEY_derive_init(ctx) > 0 && EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) > 0 &&
      EVP_PKEY_CTX_set1_hkdf_salt(ctx, reinterpret_cast<const unsigned char*>(salt.data()),
                                  static_cast<int>(salt.size())) > 0 &&
      EVP_PKEY_CTX_set1_hkdf_key(ctx, reinterpret_cast<const unsigned char*>(secret.data()),
                                 static_cast<int>(secret.size())) > 0 &&
      EVP_PKEY_CTX_add1_hkdf_info(ctx, reinterpret_cast<const unsigned char*>(info.data()),
                                  static_cast<int>(info.size())) > 0 &&
      EVP_PKEY_derive(ctx, out.data(), &len) > 0;
  EVP_PKEY_CTX_free(ctx);
  assert(ok && len == out.size() && "HKDF-SHA-256 cannot fail on valid inputs");
  (void)ok;
  return out;
}

Result<std::string> RandomBytes(size_t n) {
  std::string b(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(b.data()), static_cast<int>(n)) != 1) {
    return Status::IOError("the random generator could not be seeded");
  }
  return b;
}

std::string ToHex(std::string_view bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    s.push_back(kHex[c >> 4]);
    s.push_back(kHex[c & 15]);
  }
  return s;
}

std::string ToHex(const Digest256& d) {
  return ToHex(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace wtx::net
