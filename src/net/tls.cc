#include "src/net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cstring>

#include "src/net/crypto.h"

namespace wtx::net {

namespace {

constexpr char kPskIdentity[] = "wtx/1";
// TLS_AES_128_GCM_SHA256: the suite every TLS 1.3 implementation has, SHA-256 like the PSK.
constexpr unsigned char kPskCipher[] = {0x13, 0x01};

// The PSK lives in the context's ex-data slot, freed with the context.
int PskIndex() {
  static const int index = SSL_CTX_get_ex_new_index(
      0, nullptr, nullptr, nullptr, [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
        delete static_cast<Digest256*>(ptr);
      });
  return index;
}

const Digest256* PskOf(SSL* ssl) {
  return static_cast<const Digest256*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), PskIndex()));
}

SSL_SESSION* PskSession(SSL* ssl) {
  const Digest256* key = PskOf(ssl);
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskCipher);
  if (!key || !cipher) return nullptr;
  SSL_SESSION* s = SSL_SESSION_new();
  if (!s) return nullptr;
  if (!SSL_SESSION_set1_master_key(s, key->data(), key->size()) ||
      !SSL_SESSION_set_cipher(s, cipher) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

// Client: offer the PSK.
int UsePsk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* idlen,
           SSL_SESSION** sess) {
  SSL_SESSION* s = PskSession(ssl);
  if (!s) return 0;
  // On a HelloRetryRequest OpenSSL asks again with the negotiated digest: it must match.
  if (md && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s))) {
    SSL_SESSION_free(s);
    *sess = nullptr;
    return 1;
  }
  *id = reinterpret_cast<const unsigned char*>(kPskIdentity);
  *idlen = std::strlen(kPskIdentity);
  *sess = s;
  return 1;
}

// Server: accept only our identity; the binder then proves the key.
int FindPsk(SSL* ssl, const unsigned char* id, size_t idlen, SSL_SESSION** sess) {
  if (idlen != std::strlen(kPskIdentity) || std::memcmp(id, kPskIdentity, idlen) != 0) {
    *sess = nullptr;  // unknown identity: the handshake fails (no certificate to fall back to)
    return 1;
  }
  *sess = PskSession(ssl);
  return *sess ? 1 : 0;
}

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (!e) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

// "Jan  2 00:00:00 2020 GMT".
std::string AsnTimeText(const ASN1_TIME* t) {
  BIO* b = BIO_new(BIO_s_mem());
  if (b == nullptr) return "?";
  std::string out = "?";
  if (ASN1_TIME_print(b, t) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    if (n > 0) out.assign(data, static_cast<size_t>(n));
  }
  BIO_free(b);
  return out;
}

}  // namespace

std::string TlsErrorText(const boost::system::error_code& ec) {
  std::string m = ec.message();
  if (ec.category() == boost::asio::error::get_ssl_category()) {
    char buf[256];
    ERR_error_string_n(static_cast<unsigned long>(ec.value()), buf, sizeof(buf));
    m = buf;
  }
  return m;
}

std::string TlsErrorText(const boost::system::error_code& ec, const SSL* ssl) {
  std::string m = TlsErrorText(ec);
  const long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (v != X509_V_OK)
    m += " (peer certificate: " + std::string(X509_verify_cert_error_string(v)) + ")";
  return m;
}

Result<std::shared_ptr<ssl::context>> MakeTlsContext(bool server, const std::string& secret,
                                                     const TlsFiles& files) {
  auto ctx =
      std::make_shared<ssl::context>(server ? ssl::context::tls_server : ssl::context::tls_client);
  SSL_CTX* c = ctx->native_handle();
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
  // No session tickets or resumption: every connection runs the full handshake.
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  const bool certs = !files.cert.empty() || !files.key.empty() || !files.ca.empty();
  if (certs) {
    if (files.cert.empty() || files.key.empty() || files.ca.empty()) {
      return Status::InvalidArgument(
          "certificate TLS needs all of --tls-cert, --tls-key and --tls-ca");
    }
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(c, files.cert.c_str()) != 1) {
      return Status::InvalidArgument("cannot use TLS certificate '" + files.cert +
                                     "': " + OpenSslError());
    }
    if (SSL_CTX_use_PrivateKey_file(c, files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
      return Status::InvalidArgument("cannot use TLS key '" + files.key + "': " + OpenSslError());
    }
    if (SSL_CTX_check_private_key(c) != 1) {
      return Status::InvalidArgument("TLS key '" + files.key + "' does not match certificate '" +
                                     files.cert + "'");
    }
    // A certificate outside its validity period would fail every peer's verification: refuse
    // it here, once, naming the file and the date, rather than in every handshake.
    if (X509* own = SSL_CTX_get0_certificate(c)) {
      if (X509_cmp_current_time(X509_get0_notAfter(own)) < 0) {
        return Status::InvalidArgument("TLS certificate '" + files.cert + "' expired on " +
                                       AsnTimeText(X509_get0_notAfter(own)));
      }
      if (X509_cmp_current_time(X509_get0_notBefore(own)) > 0) {
        return Status::InvalidArgument("TLS certificate '" + files.cert + "' is not valid before " +
                                       AsnTimeText(X509_get0_notBefore(own)));
      }
    }
    if (SSL_CTX_load_verify_locations(c, files.ca.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("cannot load TLS CA '" + files.ca + "': " + OpenSslError());
    }
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    return ctx;
  }
  if (secret.empty()) return Status::InvalidArgument("TLS needs a secret or certificates");
  SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256");
  auto* key = new Digest256(HkdfSha256(secret, "wtx/1 tls psk", "tls13 external psk"));
  SSL_CTX_set_ex_data(c, PskIndex(), key);
  if (server) {
    SSL_CTX_set_psk_find_session_callback(c, FindPsk);
  } else {
    SSL_CTX_set_psk_use_session_callback(c, UsePsk);
  }
  // A PSK-only server has no certificate. A client verifies any certificate a server might
  // present instead of using the PSK against an empty trust store, so such a handshake fails:
  // in this mode only the PSK authenticates the server.
  SSL_CTX_set_verify(c, server ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);
  return ctx;
}

}  // namespace wtx::net
