#include "src/etcd/http_post.h"

#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <exception>
#include <optional>

namespace wtx::etcd {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using boost::system::error_code;

// A member's answer is at most this large (a List of every decision fits many times over).
constexpr uint64_t kMaxReplyBytes = uint64_t{256} << 20;

Status Unavailable(std::string reason) {
  return Status(ErrorCode::kDecisionLogUnavailable, std::move(reason));
}

// Runs the asynchronous operation that `start` begins (given its completion handler) until it
// completes: each operation of one request in turn on the request's own io_context, so that
// beast::tcp_stream's deadline bounds every one of them.
template <typename Start>
error_code RunToCompletion(asio::io_context& io, Start&& start) {
  bool done = false;
  error_code result;
  start([&done, &result](error_code ec, auto&&...) {
    result = ec;
    done = true;
  });
  io.restart();
  while (!done && io.run_one() > 0) {
  }
  return done ? result : error_code(asio::error::operation_aborted);
}

std::string Reason(const error_code& ec, std::string_view step, std::chrono::milliseconds timeout) {
  if (ec == beast::error::timeout) {
    return std::string(step) + ": timed out after " + std::to_string(timeout.count()) + " ms";
  }
  return std::string(step) + ": " + ec.message();
}

// The member's addresses: an IP literal as it is, a name through the resolver.
Result<tcp::resolver::results_type> Resolve(asio::io_context& io, const Endpoint& ep) {
  tcp::resolver resolver(io);
  error_code ec;
  auto results =
      resolver.resolve(ep.host, std::to_string(ep.port), tcp::resolver::numeric_service, ec);
  if (ec) return Unavailable("resolving '" + ep.host + "': " + ec.message());
  return results;
}

// Writes the request and reads the whole response over an open (and handshaken) stream.
template <typename Stream>
Result<HttpReply> Exchange(asio::io_context& io, Stream& stream, const Endpoint& ep,
                           std::string_view target, const std::string& body,
                           std::chrono::milliseconds timeout) {
  http::request<http::string_body> req{http::verb::post,
                                       beast::string_view(target.data(), target.size()), 11};
  req.set(http::field::host, ep.ToString());
  req.set(http::field::user_agent, "wtx");
  req.set(http::field::content_type, "application/json");
  req.set(http::field::connection, "close");
  req.body() = body;
  req.prepare_payload();
  error_code ec = RunToCompletion(
      io, [&](auto handler) { http::async_write(stream, req, std::move(handler)); });
  if (ec) return Unavailable(Reason(ec, "sending the request", timeout));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxReplyBytes);
  ec = RunToCompletion(
      io, [&](auto handler) { http::async_read(stream, buffer, parser, std::move(handler)); });
  if (ec) return Unavailable(Reason(ec, "reading the response", timeout));
  HttpReply reply;
  reply.status = static_cast<int>(parser.get().result_int());
  reply.body = std::move(parser.get().body());
  return reply;
}

Result<HttpReply> PostPlain(const Endpoint& ep, std::string_view target, const std::string& body,
                            std::chrono::milliseconds timeout) {
  asio::io_context io;
  WTX_ASSIGN_OR_RETURN(addresses, Resolve(io, ep));
  beast::tcp_stream stream(io);
  stream.expires_after(timeout);  // the deadline of every operation below
  error_code ec = RunToCompletion(
      io, [&](auto handler) { stream.async_connect(addresses, std::move(handler)); });
  if (ec) return Unavailable(Reason(ec, "connecting", timeout));
  auto reply = Exchange(io, stream, ep, target, body, timeout);
  stream.socket().close(ec);
  return reply;
}

Result<HttpReply> PostTls(asio::ssl::context& ctx, const Endpoint& ep, std::string_view target,
                          const std::string& body, std::chrono::milliseconds timeout) {
  asio::io_context io;
  WTX_ASSIGN_OR_RETURN(addresses, Resolve(io, ep));
  beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
  error_code ec;
  asio::ip::make_address(ep.host, ec);
  if (ec) {  // a name, not an address: send it (SNI)
    if (SSL_set_tlsext_host_name(stream.native_handle(), ep.host.c_str()) != 1) {
      return Unavailable("TLS: cannot set the server name '" + ep.host + "'");
    }
  }
  stream.set_verify_callback(asio::ssl::host_name_verification(ep.host));
  beast::get_lowest_layer(stream).expires_after(timeout);
  ec = RunToCompletion(io, [&](auto handler) {
    beast::get_lowest_layer(stream).async_connect(addresses, std::move(handler));
  });
  if (ec) return Unavailable(Reason(ec, "connecting", timeout));
  ec = RunToCompletion(io, [&](auto handler) {
    stream.async_handshake(asio::ssl::stream_base::client, std::move(handler));
  });
  if (ec) return Unavailable(Reason(ec, "TLS handshake", timeout));
  auto reply = Exchange(io, stream, ep, target, body, timeout);
  beast::get_lowest_layer(stream).socket().close(ec);  // no close_notify: the reply is whole
  return reply;
}

}  // namespace

HttpPoster::HttpPoster(std::shared_ptr<asio::ssl::context> ssl) : ssl_(std::move(ssl)) {}
HttpPoster::~HttpPoster() = default;

Result<std::unique_ptr<HttpPoster>> HttpPoster::Make(const TlsFiles& tls) {
  if (tls.ca.empty() && tls.cert.empty() && tls.key.empty()) {
    return std::unique_ptr<HttpPoster>(new HttpPoster(nullptr));
  }
  if (tls.ca.empty()) {
    return Status::InvalidArgument(
        "etcd TLS: a client certificate and key need the CA file (--tls-ca) that verifies the "
        "members");
  }
  if (tls.cert.empty() != tls.key.empty()) {
    return Status::InvalidArgument(
        "etcd TLS: the client certificate and its key go together (got only the " +
        std::string(tls.cert.empty() ? "key" : "certificate") + ")");
  }
  try {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1);
    error_code ec;
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
    if (!ec) ctx->load_verify_file(tls.ca, ec);
    if (ec) return Status::InvalidArgument("etcd TLS: CA file '" + tls.ca + "': " + ec.message());
    if (!tls.cert.empty()) {
      ctx->use_certificate_chain_file(tls.cert, ec);
      if (ec) {
        return Status::InvalidArgument("etcd TLS: certificate file '" + tls.cert +
                                       "': " + ec.message());
      }
      ctx->use_private_key_file(tls.key, asio::ssl::context::pem, ec);
      if (ec || SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
        return Status::InvalidArgument("etcd TLS: key file '" + tls.key + "': " +
                                       (ec ? ec.message() : "does not match the certificate"));
      }
    }
    return std::unique_ptr<HttpPoster>(new HttpPoster(std::move(ctx)));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("etcd TLS: ") + e.what());
  }
}

Result<HttpReply> HttpPoster::Post(const Endpoint& ep, std::string_view target,
                                   const std::string& body,
                                   std::chrono::milliseconds timeout) const {
  try {
    return ssl_ ? PostTls(*ssl_, ep, target, body, timeout) : PostPlain(ep, target, body, timeout);
  } catch (const std::exception& e) {  // Asio and Beast report by error_code; this is a last net
    return Unavailable(std::string("request failed: ") + e.what());
  }
}

}  // namespace wtx::etcd
