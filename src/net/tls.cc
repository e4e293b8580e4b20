#include "src/net/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cstring>
#include <memory>

#include "src/net/crypto.h"
#include "src/util/file_util.h"

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

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())), BIO_free);
}

// A PEM file named by a TLS option, through the one checked read of every option's file.
Result<std::string> ReadPem(std::string_view flag, const std::string& path) {
  ReadFileOptions o;
  o.what = flag;
  o.max_bytes = kMaxPemFileBytes;
  return ReadRegularFile(path, o);
}

// No passphrase prompt on the terminal: an encrypted key is refused.
int NoPassphrase(char*, int, int, void*) { return -1; }

// The PEM reader stopped at the end of the text (not at a damaged certificate).
bool AtEndOfPem() {
  const unsigned long e = ERR_peek_last_error();
  if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) {
    ERR_clear_error();
    return true;
  }
  return e == 0;
}

// As SSL_CTX_use_certificate_chain_file, from memory: the leaf, then its chain.
Status UseCertificateChain(SSL_CTX* c, const std::string& pem, const std::string& name) {
  BioPtr bio = MemoryBio(pem);
  X509* leaf = PEM_read_bio_X509_AUX(bio.get(), nullptr, NoPassphrase, nullptr);
  if (leaf == nullptr)
    return Status::InvalidArgument(name + ": no PEM certificate: " + OpenSslError());
  const int used = SSL_CTX_use_certificate(c, leaf);
  X509_free(leaf);
  if (used != 1) return Status::InvalidArgument(name + ": cannot use: " + OpenSslError());
  SSL_CTX_clear_chain_certs(c);
  while (X509* link = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    if (SSL_CTX_add0_chain_cert(c, link) != 1) {
      X509_free(link);
      return Status::InvalidArgument(name + ": cannot use its chain: " + OpenSslError());
    }
  }
  if (!AtEndOfPem()) return Status::InvalidArgument(name + ": " + OpenSslError());
  return Status::OK();
}

Status UsePrivateKey(SSL_CTX* c, const std::string& pem, const std::string& name) {
  BioPtr bio = MemoryBio(pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr);
  if (key == nullptr)
    return Status::InvalidArgument(name + ": no PEM private key: " + OpenSslError());
  const int used = SSL_CTX_use_PrivateKey(c, key);
  EVP_PKEY_free(key);
  if (used != 1) return Status::InvalidArgument(name + ": cannot use: " + OpenSslError());
  return Status::OK();
}

// As SSL_CTX_load_verify_locations, from memory: every certificate of the file is trusted.
Status AddTrustedCertificates(SSL_CTX* c, const std::string& pem, const std::string& name) {
  BioPtr bio = MemoryBio(pem);
  X509_STORE* store = SSL_CTX_get_cert_store(c);
  int n = 0;
  while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    const int added = X509_STORE_add_cert(store, ca);
    X509_free(ca);
    if (added != 1) return Status::InvalidArgument(name + ": cannot add: " + OpenSslError());
    ++n;
  }
  if (!AtEndOfPem()) return Status::InvalidArgument(name + ": " + OpenSslError());
  if (n == 0) return Status::InvalidArgument(name + ": no PEM certificate");
  return Status::OK();
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

bool HandshakeConnectionLost(const boost::system::error_code& ec) {
  namespace err = boost::asio::error;
  if (ec == err::eof || ec == err::connection_reset || ec == err::broken_pipe ||
      ec == err::connection_aborted || ec == err::not_connected ||
      ec == boost::asio::ssl::error::stream_truncated) {
    return true;
  }
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
  if (ec.category() == err::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) ==
          SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    return true;
  }
#endif
  return false;
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
    // Each file is read like every file an option names (no FIFO can block, a size limit),
    // then parsed from memory.
    const std::string cert_name = "--tls-cert '" + files.cert + "'";
    const std::string key_name = "--tls-key '" + files.key + "'";
    WTX_ASSIGN_OR_RETURN(cert_pem, ReadPem("--tls-cert", files.cert));
    WTX_ASSIGN_OR_RETURN(key_pem, ReadPem("--tls-key", files.key));
    WTX_ASSIGN_OR_RETURN(ca_pem, ReadPem("--tls-ca", files.ca));
    WTX_RETURN_IF_ERROR(UseCertificateChain(c, cert_pem, cert_name));
    WTX_RETURN_IF_ERROR(UsePrivateKey(c, key_pem, key_name));
    if (SSL_CTX_check_private_key(c) != 1) {
      return Status::InvalidArgument(key_name + ": does not match " + cert_name);
    }
    // A certificate outside its validity period would fail every peer's verification: refuse
    // it here, once, naming the file and the date, rather than in every handshake.
    if (X509* own = SSL_CTX_get0_certificate(c)) {
      if (X509_cmp_current_time(X509_get0_notAfter(own)) < 0) {
        return Status::InvalidArgument(cert_name + ": expired on " +
                                       AsnTimeText(X509_get0_notAfter(own)));
      }
      if (X509_cmp_current_time(X509_get0_notBefore(own)) > 0) {
        return Status::InvalidArgument(cert_name + ": not valid before " +
                                       AsnTimeText(X509_get0_notBefore(own)));
      }
    }
    WTX_RETURN_IF_ERROR(AddTrustedCertificates(c, ca_pem, "--tls-ca '" + files.ca + "'"));
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
