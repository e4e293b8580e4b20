// One HTTP/1.1 POST of a JSON body to one etcd member's JSON gateway, over TCP or TLS
// (Boost.Beast; a response with Transfer-Encoding: chunked is read whole), with a deadline for
// the whole exchange: connect, TLS handshake, write and read. One connection per request.
//
// Thread-safety: an HttpPoster is immutable after Make; Post may be called from any thread at
// once (each call has its own io_context and connection).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "src/etcd/etcd_url.h"
#include "wtx/status.h"
#include "wtx/tls_files.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace wtx::etcd {

struct HttpReply {
  int status = 0;    // the HTTP status code
  std::string body;  // the whole body, de-chunked
};

class HttpPoster {
 public:
  // All of `tls` empty: plain HTTP. `ca` set: HTTPS verifying the member's certificate against
  // it (and its name against the member's host); `cert` and `key` set as well: with a client
  // certificate. kInvalidArgument naming the file for an unreadable or mismatched one, or a
  // cert without a key (or the other way round), or a client certificate without `ca`.
  static Result<std::unique_ptr<HttpPoster>> Make(const TlsFiles& tls);
  ~HttpPoster();

  HttpPoster(const HttpPoster&) = delete;
  HttpPoster& operator=(const HttpPoster&) = delete;

  // POSTs `body` (application/json) to http(s)://ep`target`. A reply with any status is a
  // success; a failure to get one (refused, timed out after `timeout`, reset, TLS, a malformed
  // or oversized response) is kDecisionLogUnavailable whose message is the reason only ("timed
  // out after 2000 ms"): the caller names the member and the operation.
  Result<HttpReply> Post(const Endpoint& ep, std::string_view target, const std::string& body,
                         std::chrono::milliseconds timeout) const;

  bool tls() const { return ssl_ != nullptr; }

 private:
  explicit HttpPoster(std::shared_ptr<boost::asio::ssl::context> ssl);

  std::shared_ptr<boost::asio::ssl::context> ssl_;  // null: plain HTTP
};

}  // namespace wtx::etcd
