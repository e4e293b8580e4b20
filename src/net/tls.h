// TLS for every wtx connection (Boost.Asio ssl::stream over OpenSSL), TLS 1.3 only, mutually
// authenticated in one of two modes:
//
//  * pre-shared key (default): an external TLS 1.3 PSK derived from the shared secret,
//    HKDF-SHA-256(secret, salt "wtx/1 tls psk", info "tls13 external psk"), identity "wtx/1",
//    cipher TLS_AES_128_GCM_SHA256, (EC)DHE key exchange on top (psk_dhe_ke: forward secrecy).
//    No certificates. A peer without the secret fails the TLS handshake (bad binder).
//  * certificates (TlsFiles set): each end presents `cert` (with `key`) and requires the
//    peer's certificate to chain to `ca` (verify_peer | fail_if_no_peer_cert); no PSK.
//
// In both modes the wtx handshake (HMAC challenge over the secret, channel.h) then runs inside
// TLS and binds the connection's role and rank; TLS gives integrity and confidentiality to
// every frame after it (a modified, injected, replayed or reordered record fails its AEAD tag
// and the connection is closed).
//
// Thread-safety: a context is immutable after MakeTlsContext and may be shared by streams on
// any thread.
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include <memory>
#include <string>

#include "wtx/status.h"
#include "wtx/tcp_transport.h"

namespace wtx::net {

namespace ssl = boost::asio::ssl;
using TlsStream = ssl::stream<boost::asio::ip::tcp::socket>;

// REQUIRES: `secret` non-empty (PSK mode) unless files are set. kInvalidArgument naming the
// file for unreadable or mismatched certificate, key or CA files, or a half-set TlsFiles.
Result<std::shared_ptr<ssl::context>> MakeTlsContext(bool server, const std::string& secret,
                                                     const TlsFiles& files);

// The reason OpenSSL gave for the last failure on this thread, or `fallback`.
std::string TlsErrorText(const boost::system::error_code& ec);
// The same, plus why the peer's certificate failed verification on `ssl`, if it did
// ("... (peer certificate: certificate has expired)").
std::string TlsErrorText(const boost::system::error_code& ec, const SSL* ssl);

// Whether a failed TLS handshake failed because the connection went away (the peer closed,
// reset or cut it: it died, or was killed, mid-handshake) rather than because the peers'
// credentials disagree (wrong secret, untrusted or missing certificate). The first is a
// connection failure, the second a refusal.
bool HandshakeConnectionLost(const boost::system::error_code& ec);

}  // namespace wtx::net
