// The etcd layer without an etcd: url parsing, base64, and members that answer garbage, 5xx,
// nothing at all, or refuse the connection (a tiny listener in the test) — each a clear error
// naming the member, never a crash.
#include <catch2/catch.hpp>

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/etcd/base64.h"
#include "src/etcd/etcd_client.h"
#include "src/etcd/etcd_url.h"
#include "wtx/decision_log.h"

namespace wtx {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using asio::ip::tcp;

// Answers every HTTP request (read up to the end of its body) with `reply`, verbatim; an empty
// `reply` accepts and never answers.
class JunkServer {
 public:
  explicit JunkServer(std::string reply)
      : reply_(std::move(reply)),
        acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Serve(); });
  }
  ~JunkServer() {
    stop_ = true;
    boost::system::error_code ec;
    tcp::socket wake(io_);
    wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
    thread_.join();
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void Serve() {
    while (!stop_) {
      auto socket = std::make_unique<tcp::socket>(io_);
      boost::system::error_code ec;
      acceptor_.accept(*socket, ec);
      if (ec || stop_) return;
      if (reply_.empty()) {
        held_.push_back(std::move(socket));  // never answers: the client times out
        continue;
      }
      std::string request;
      asio::read_until(*socket, asio::dynamic_buffer(request), "\r\n\r\n", ec);
      const size_t head = request.find("\r\n\r\n");
      const size_t cl = request.find("Content-Length: ");
      if (!ec && head != std::string::npos && cl != std::string::npos) {
        const size_t length = std::stoul(request.substr(cl + 16));
        if (request.size() < head + 4 + length) {
          asio::read(*socket, asio::dynamic_buffer(request),
                     asio::transfer_exactly(head + 4 + length - request.size()), ec);
        }
      }
      asio::write(*socket, asio::buffer(reply_), ec);
      socket->shutdown(tcp::socket::shutdown_both, ec);
    }
  }

  const std::string reply_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::unique_ptr<tcp::socket>> held_;
};

std::string Http(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// A port nothing listens on (bound, then released).
std::string ClosedEndpoint() {
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto port = a.local_endpoint().port();
  a.close();
  return "127.0.0.1:" + std::to_string(port);
}

Result<std::shared_ptr<DecisionLog>> OpenAt(const std::string& members,
                                            std::chrono::milliseconds timeout = 500ms) {
  DecisionLogOptions options;
  options.url = "etcd://" + members + "/wtx-test";
  options.request_timeout = timeout;
  return OpenDecisionLog(options);
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_CASE("MalformedUrlsNameThePart") {
  struct Case {
    const char* url;
    const char* names;
  };
  const Case cases[] = {
      {"http://127.0.0.1:2379/p", "missing scheme"},
      {"127.0.0.1:2379/p", "missing scheme"},
      {"etcd:///p", "empty host"},
      {"etcd://:2379/p", "empty host"},
      {"etcd://h:2379,:1/p", "empty host"},
      {"etcd://h/p", "missing port"},
      {"etcd://h:0/p", "bad port '0'"},
      {"etcd://h:65536/p", "bad port '65536'"},
      {"etcd://h:12ab/p", "bad port '12ab'"},
      {"etcd://h:2379", "missing /PREFIX"},
      {"etcd://h:2379/", "empty prefix"},
      {"etcd://h:2379/p/", "ends with '/'"},
      {"etcd://h:2379/a//b", "empty segment"},
      {"etcd://h:2379//a", "starts with '/'"},
      {"etcd://h$x:2379/p", "bad host"},
      {"etcd://[::1/p", "unclosed '['"},
  };
  for (const Case& c : cases) {
    INFO(c.url);
    auto url = etcd::ParseEtcdUrl(c.url);
    REQUIRE_FALSE(url.ok());
    CHECK(url.status().code() == ErrorCode::kInvalidArgument);
    CHECK(Contains(url.status().message(), c.names));
    DecisionLogOptions options;
    options.url = c.url;
    auto log = OpenDecisionLog(options);
    REQUIRE_FALSE(log.ok());
    CHECK(log.status().code() == ErrorCode::kInvalidArgument);
  }
  auto ok = etcd::ParseEtcdUrl("etcd://a.example:2379,10.0.0.2:2380,[::1]:2381/wtx/prod");
  REQUIRE(ok.ok());
  CHECK(ok->endpoints.size() == 3);
  CHECK(ok->endpoints[2].host == "::1");
  CHECK(ok->prefix == "wtx/prod");
  CHECK(ok->ToString() == "etcd://a.example:2379,10.0.0.2:2380,[::1]:2381/wtx/prod");
}

TEST_CASE("Base64RoundTripsAndRejectsBadPadding") {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    const auto back = etcd::Base64Decode(etcd::Base64Encode(s));
    REQUIRE(back.has_value());
    CHECK(*back == s);
  }
  CHECK(etcd::Base64Encode("a") == "YQ==");
  CHECK(*etcd::Base64Decode("YWI=") == "ab");
  CHECK_FALSE(etcd::Base64Decode("YQ=").has_value());   // length
  CHECK_FALSE(etcd::Base64Decode("Y=Q=").has_value());  // padding inside
  CHECK_FALSE(etcd::Base64Decode("YQ==YQ==").has_value());
  CHECK_FALSE(etcd::Base64Decode("Y Q=").has_value());  // a blank
  CHECK_FALSE(etcd::Base64Decode("YQ*=").has_value());  // outside the alphabet
  CHECK(etcd::PrefixRangeEnd("p/tx/") == "p/tx0");
  CHECK(etcd::PrefixRangeEnd("a\xff") == "b");
}

TEST_CASE("GarbageMembersAreAClearErrorNotACrash") {
  struct Case {
    const char* what;
    std::string reply;
    const char* names;
  };
  const std::vector<Case> cases = {
      {"not HTTP", "this is not HTTP at all\r\n\r\n", "reading the response"},
      {"HTTP 500", Http(500, "internal trouble"), "HTTP 500"},
      {"HTTP 404 without a gRPC body", Http(404, "no such page"), "HTTP 404"},
      {"not JSON", Http(200, "{\"header\": tru"), "not JSON"},
      {"JSON of another shape", Http(200, "{\"header\":{\"revision\":\"x\"}}"), "not etcd's"},
      {"wrong kvs",
       Http(200, "{\"responses\":[{\"response_range\":{\"kvs\":[{\"key\":\"!!\"}]}}]}"),
       "not etcd's"},
      {"gRPC no leader", Http(503, "{\"error\":\"etcdserver: no leader\",\"code\":14}"),
       "no leader"},
      {"a huge chunk size",
       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffff\r\n",
       "reading the response"},
      {"no answer", "", "timed out"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    JunkServer server(c.reply);
    const auto start = std::chrono::steady_clock::now();
    auto log = OpenAt(server.endpoint(), 300ms);
    REQUIRE_FALSE(log.ok());
    CHECK(std::chrono::steady_clock::now() - start < 3s);
    CHECK(log.status().code() == ErrorCode::kDecisionLogUnavailable);
    CHECK(Contains(log.status().message(), server.endpoint()));
    CHECK(Contains(log.status().message(), c.names));
    CHECK(Contains(log.status().message(), "wtx-test/meta"));
  }
}

TEST_CASE("EveryMemberDownNamesEachEndpoint") {
  JunkServer junk(Http(500, "oops"));
  const std::string closed = ClosedEndpoint();
  JunkServer silent("");
  auto log = OpenAt(closed + "," + junk.endpoint() + "," + silent.endpoint(), 300ms);
  REQUIRE_FALSE(log.ok());
  const std::string& m = log.status().message();
  INFO(m);
  CHECK(log.status().code() == ErrorCode::kDecisionLogUnavailable);
  CHECK(Contains(m, closed + " (connecting: Connection refused)"));
  CHECK(Contains(m, junk.endpoint() + " (HTTP 500"));
  CHECK((Contains(m, silent.endpoint() + " (connecting: timed out after 300 ms)") ||
         Contains(m, silent.endpoint() + " (reading the response: timed out after 300 ms)")));
}

TEST_CASE("DefinitiveGrpcErrorsAreNotRetried") {
  JunkServer server(Http(404, "{\"error\":\"etcdserver: requested lease not found\",\"code\":5}"));
  etcd::ClientOptions options;
  options.endpoints = {{"127.0.0.1", static_cast<uint16_t>(std::stoi(server.endpoint().substr(
                                         server.endpoint().find(':') + 1)))}};
  auto client = etcd::Client::Open(options);
  REQUIRE(client.ok());
  const Status st = (*client)->LeaseRevoke(42, "revoke lease 42");
  CHECK(st.code() == ErrorCode::kNotFound);
  CHECK(Contains(st.message(), "requested lease not found"));
  CHECK(Contains(st.message(), server.endpoint()));
}

TEST_CASE("TlsFilesAreChecked") {
  DecisionLogOptions options;
  options.url = "etcd://127.0.0.1:1/p";
  options.tls.cert = "/nonexistent/cert.pem";
  options.tls.key = "/nonexistent/key.pem";
  auto log = OpenDecisionLog(options);
  REQUIRE_FALSE(log.ok());
  CHECK(log.status().code() == ErrorCode::kInvalidArgument);
  options.tls.ca = "/nonexistent/ca.pem";
  log = OpenDecisionLog(options);
  REQUIRE_FALSE(log.ok());
  CHECK(log.status().code() == ErrorCode::kInvalidArgument);
  CHECK(Contains(log.status().message(), "/nonexistent/ca.pem"));
}

}  // namespace
}  // namespace wtx
