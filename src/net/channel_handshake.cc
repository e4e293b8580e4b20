// The handshakes that make a Channel (channel.h, docs/protocol.md): TLS first, then the wtx
// challenge-response over the shared secret inside it. Server side: AcceptHandshake
// (ServerHandshake) authenticates an accepted socket and lets `authorize` decide; client side:
// Connect (ClientHandshake) connects, authenticates as (role, rank) and checks the server's proof.
// Also the handshake MAC and nonces.
//
// Thread-safety: each handshake object lives on the loop's I/O thread (its handlers run there
// and never block); Connect blocks its caller, never the I/O thread, and is safe from any thread
// but the I/O thread.
#include "src/net/channel.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cstdlib>

#include "src/net/channel_internal.h"
#include "src/net/crypto.h"
#include "src/util/json_number.h"
#include "wtx/limits.h"

namespace wtx::net {

using nlohmann::json;

namespace {

void TuneSocket(tcp::socket& s) {
  boost::system::error_code ec;
  s.set_option(tcp::no_delay(true), ec);
  s.set_option(asio::socket_base::keep_alive(true), ec);
  const int idle = 5, intvl = 2, cnt = 3;
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Handshakes

std::string HandshakeMac(std::string_view secret, std::string_view direction,
                         std::string_view server_nonce, std::string_view client_nonce,
                         std::string_view role, int rank) {
  std::string msg = std::string(kWireVersion) + "|" + std::string(direction) + "|" +
                    std::string(server_nonce) + "|" + std::string(client_nonce) + "|" +
                    std::string(role) + "|" + std::to_string(rank);
  return ToHex(HmacSha256(secret, msg));
}

std::string RandomNonce() {
  auto b = RandomBytes(32);
  if (!b.ok()) {
    // Without randomness no handshake is safe; this is not reachable from the network.
    LogLine("net", "fatal: " + b.status().message());
    std::abort();
  }
  return ToHex(b.value());
}

namespace {

// kIOError for a failed handshake read; a TLS alert (in TLS 1.3 a client learns only here that
// the server refused its certificate) says so with kTlsAlertPrefix.
constexpr std::string_view kTlsAlertPrefix = "TLS alert: ";
Status ReadError(const boost::system::error_code& ec) {
  if (ec.category() == asio::error::get_ssl_category()) {
    return Status::IOError(std::string(kTlsAlertPrefix) + ec.message());
  }
  return Status::IOError(ec.message());
}

// A failed read of the server's hello or verdict: a TLS alert means the server refused this
// end (its certificate untrusted, expired or missing): an authentication failure, not a crash.
Status ClientReadFailed(const std::string& address, const Status& s) {
  if (s.code() == ErrorCode::kIOError && s.message().rfind(kTlsAlertPrefix, 0) == 0) {
    return Status::InvalidArgument("TLS handshake with " + address +
                                   " failed: " + s.message().substr(kTlsAlertPrefix.size()) +
                                   " (the peer refused this end's certificate: untrusted, "
                                   "expired or missing)");
  }
  return Status(ErrorCode::kCrashed, "handshake with " + address + " failed: " + s.message());
}

// Reads one frame of at most `limit` bytes; fn(Status, json).
template <typename Fn>
void AsyncReadFrame(TlsStream& socket, size_t limit, const std::shared_ptr<std::string>& buf,
                    Fn fn) {
  buf->assign(4, '\0');
  asio::async_read(
      socket, asio::buffer(buf->data(), 4),
      [&socket, limit, buf, fn](const boost::system::error_code& ec, size_t) mutable {
        if (ec) return fn(ReadError(ec), json());
        const uint32_t size =
            channel_internal::ReadBe32(reinterpret_cast<const uint8_t*>(buf->data()));
        if (size == 0 || size > limit) {
          return fn(Status::InvalidArgument("handshake frame of " + std::to_string(size) +
                                            " bytes (limit " + std::to_string(limit) + ")"),
                    json());
        }
        buf->assign(size, '\0');
        asio::async_read(socket, asio::buffer(buf->data(), size),
                         [buf, fn](const boost::system::error_code& ec, size_t) mutable {
                           if (ec) return fn(ReadError(ec), json());
                           auto m = DecodePayload(reinterpret_cast<const uint8_t*>(buf->data()),
                                                  buf->size());
                           if (!m.ok()) return fn(m.status(), json());
                           fn(Status::OK(), std::move(m).value());
                         });
      });
}

class ServerHandshake : public std::enable_shared_from_this<ServerHandshake> {
 public:
  ServerHandshake(EventLoop& loop, tcp::socket socket, std::shared_ptr<ssl::context> tls,
                  std::string secret, const NetOptions& o, std::string tag, AuthorizeFn authorize,
                  InstallFn install, RequestHandler handler, std::function<void(Channel*)> on_close)
      : loop_(loop),
        tls_(std::move(tls)),
        socket_(std::make_unique<TlsStream>(std::move(socket), *tls_)),
        secret_(std::move(secret)),
        options_(o),
        tag_(std::move(tag)),
        authorize_(std::move(authorize)),
        install_(std::move(install)),
        handler_(std::move(handler)),
        on_close_(std::move(on_close)),
        timer_(loop.io()),
        buf_(std::make_shared<std::string>()) {}

  void Start() {
    TuneSocket(socket_->next_layer());
    address_ = channel_internal::Address(socket_->next_layer());
    auto self = shared_from_this();
    timer_.expires_after(options_.handshake_timeout);
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->done_) return;
      self->Refuse(
          "no authentication within " + channel_internal::Ms(self->options_.handshake_timeout), "");
    });
    socket_->async_handshake(ssl::stream_base::server, [self](const boost::system::error_code& ec) {
      if (self->done_) return;
      if (ec) {
        if (HandshakeConnectionLost(ec)) {
          return self->Refuse(
              "the client closed or reset the connection during the TLS "
              "handshake (" +
                  TlsErrorText(ec) + ")",
              "");
        }
        return self->Refuse(
            "TLS handshake failed: " + TlsErrorText(ec, self->socket_->native_handle()) +
                " (wrong secret, or an untrusted or "
                "missing certificate)",
            "");
      }
      self->Hello();
    });
  }

 private:
  void Hello() {
    auto self = shared_from_this();
    nonce_ = RandomNonce();
    auto hello =
        std::make_shared<std::string>(EncodeFrame({{"hello", kWireVersion}, {"nonce", nonce_}}));
    asio::async_write(
        *socket_, asio::buffer(*hello), [self, hello](const boost::system::error_code& ec, size_t) {
          if (ec) return self->Quit();
          AsyncReadFrame(*self->socket_, kMaxHandshakeFrameBytes, self->buf_,
                         [self](const Status& s, json m) { self->OnAuth(s, std::move(m)); });
        });
  }

  void OnAuth(const Status& s, json m) {
    if (done_) return;
    if (!s.ok()) {
      if (s.code() == ErrorCode::kIOError) {
        return Refuse("connection closed before authenticating (" + s.message() + ")", "");
      }
      return Refuse(s.message(), "malformed handshake");
    }
    auto str = [&](const char* k) {
      auto it = m.find(k);
      return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    const std::string role = str("role"), client_nonce = str("nonce"), mac = str("mac");
    auto rit = m.find("rank");
    if (role.empty() || client_nonce.size() != 64 || mac.empty() || rit == m.end() ||
        !rit->is_number_integer()) {
      return Refuse("malformed handshake (missing role, rank, nonce or mac)",
                    "malformed handshake");
    }
    // -1 (control) or a rank id; anything else is refused, never truncated (2^32+1 is not 1).
    auto checked_rank = JsonInt(*rit, "rank", -1, kMaxRanks - 1);
    if (!checked_rank.ok()) {
      return Refuse("malformed handshake: " + checked_rank.status().message(),
                    "malformed handshake");
    }
    const int rank = static_cast<int>(checked_rank.value());
    const std::string want = HandshakeMac(secret_, "client", nonce_, client_nonce, role, rank);
    if (!ConstantTimeEqual(mac, want)) {
      return Refuse("authentication failed (wrong or missing secret)", "authentication failed");
    }
    if (role != "rank" && role != "control") {
      return Refuse("unknown role '" + role + "'", "unknown role");
    }
    PeerIdentity peer{role, role == "rank" ? rank : -1, address_};
    if (Status a = authorize_ ? authorize_(peer) : Status::OK(); !a.ok()) {
      return Refuse(role + (role == "rank" ? " " + std::to_string(rank) : "") + ": " + a.message(),
                    a.message());
    }
    done_ = true;
    timer_.cancel();
    auto ch = std::make_shared<Channel>(loop_, std::move(socket_), peer, -1, options_, tag_);
    ch->QueueOnIo(
        {{"ok", true}, {"mac", HandshakeMac(secret_, "server", nonce_, client_nonce, role, rank)}});
    if (install_) install_(ch);
    Channel* raw = ch.get();
    auto on_close = on_close_;
    ch->StartOnIo(handler_, [on_close, raw] {
      if (on_close) on_close(raw);
    });
  }

  void Refuse(const std::string& log, const std::string& reason) {
    if (done_) return;
    done_ = true;
    timer_.cancel();
    LogLineLimited(tag_, "refused", "refused connection from " + address_ + ": " + log);
    auto self = shared_from_this();
    if (reason.empty() || !socket_->lowest_layer().is_open()) return Quit();
    auto frame = std::make_shared<std::string>(EncodeFrame({{"refused", reason}}));
    asio::async_write(*socket_, asio::buffer(*frame),
                      [self, frame](const boost::system::error_code&, size_t) { self->Quit(); });
  }

  void Quit() {
    done_ = true;
    timer_.cancel();
    boost::system::error_code ec;
    socket_->lowest_layer().close(ec);
  }

  EventLoop& loop_;
  std::shared_ptr<ssl::context> tls_;
  std::unique_ptr<TlsStream> socket_;
  std::string secret_;
  NetOptions options_;
  std::string tag_;
  AuthorizeFn authorize_;
  InstallFn install_;
  RequestHandler handler_;
  std::function<void(Channel*)> on_close_;
  asio::steady_timer timer_;
  std::shared_ptr<std::string> buf_;
  std::string address_, nonce_;
  bool done_ = false;
};

}  // namespace

namespace {

class ClientHandshake : public std::enable_shared_from_this<ClientHandshake> {
 public:
  ClientHandshake(EventLoop& loop, std::shared_ptr<ssl::context> tls, std::string secret,
                  std::string role, int rank, const NetOptions& o, std::string tag,
                  RequestHandler handler, std::function<void()> on_close)
      : loop_(loop),
        tls_(std::move(tls)),
        socket_(std::make_unique<TlsStream>(tcp::socket(loop.io()), *tls_)),
        secret_(std::move(secret)),
        role_(std::move(role)),
        rank_(rank),
        options_(o),
        tag_(std::move(tag)),
        handler_(std::move(handler)),
        on_close_(std::move(on_close)),
        timer_(loop.io()),
        buf_(std::make_shared<std::string>()) {}

  std::future<Result<std::shared_ptr<Channel>>> future() { return promise_.get_future(); }

  void Start(const tcp::resolver::results_type& endpoints, std::string address) {
    address_ = std::move(address);
    auto self = shared_from_this();
    timer_.expires_after(options_.connect_timeout + options_.handshake_timeout);
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec) return;
      self->Finish(Status(ErrorCode::kTimeout, "connecting to " + self->address_ + " timed out"));
    });
    asio::async_connect(
        socket_->next_layer(), endpoints,
        [self](const boost::system::error_code& ec, const tcp::endpoint&) {
          if (self->done_) return;
          if (ec) {
            return self->Finish(Status(
                ErrorCode::kCrashed, "cannot connect to " + self->address_ + ": " + ec.message()));
          }
          TuneSocket(self->socket_->next_layer());
          self->socket_->async_handshake(
              ssl::stream_base::client, [self](const boost::system::error_code& hec) {
                if (self->done_) return;
                if (hec && HandshakeConnectionLost(hec)) {
                  // The peer went away mid-handshake (it died or was killed): a connection
                  // failure, like a refused connect, not a credentials problem.
                  return self->Finish(Status(ErrorCode::kCrashed,
                                             "the connection to " + self->address_ +
                                                 " was closed or reset during the TLS handshake "
                                                 "(the peer went away): " +
                                                 TlsErrorText(hec)));
                }
                if (hec) {
                  // Refused by the peer's TLS (wrong secret, untrusted certificate) or it
                  // failed ours: worth a line, like any refusal.
                  return self->Finish(Status::InvalidArgument(
                      "TLS handshake with " + self->address_ +
                      " failed: " + TlsErrorText(hec, self->socket_->native_handle()) +
                      " (wrong secret, or an untrusted or missing certificate)"));
                }
                AsyncReadFrame(*self->socket_, kMaxHandshakeFrameBytes, self->buf_,
                               [self](const Status& s, const json& m) { self->OnHello(s, m); });
              });
        });
  }

 private:
  void OnHello(const Status& s, const json& m) {
    if (done_) return;
    if (!s.ok()) return Finish(ClientReadFailed(address_, s));
    auto h = m.find("hello");
    auto n = m.find("nonce");
    if (h == m.end() || *h != kWireVersion || n == m.end() || !n->is_string() ||
        n->get_ref<const std::string&>().size() != 64) {
      return Finish(Status::InvalidArgument(address_ + " does not speak " + kWireVersion));
    }
    server_nonce_ = n->get<std::string>();
    client_nonce_ = RandomNonce();
    auto frame = std::make_shared<std::string>(EncodeFrame(
        {{"role", role_},
         {"rank", rank_},
         {"nonce", client_nonce_},
         {"mac", HandshakeMac(secret_, "client", server_nonce_, client_nonce_, role_, rank_)}}));
    auto self = shared_from_this();
    asio::async_write(
        *socket_, asio::buffer(*frame), [self, frame](const boost::system::error_code& ec, size_t) {
          if (ec) {
            return self->Finish(Status(ErrorCode::kCrashed, "handshake with " + self->address_ +
                                                                " failed: " + ec.message()));
          }
          AsyncReadFrame(*self->socket_, kMaxHandshakeFrameBytes, self->buf_,
                         [self](const Status& s, const json& m) { self->OnVerdict(s, m); });
        });
  }

  void OnVerdict(const Status& s, const json& m) {
    if (done_) return;
    if (!s.ok()) return Finish(ClientReadFailed(address_, s));
    if (auto r = m.find("refused"); r != m.end()) {
      return Finish(Status::InvalidArgument(address_ + " refused " + role_ +
                                            (role_ == "rank" ? " " + std::to_string(rank_) : "") +
                                            ": " + (r->is_string() ? r->get<std::string>() : "")));
    }
    auto mac = m.find("mac");
    const std::string want =
        HandshakeMac(secret_, "server", server_nonce_, client_nonce_, role_, rank_);
    if (m.value("ok", false) != true || mac == m.end() || !mac->is_string() ||
        !ConstantTimeEqual(mac->get<std::string>(), want)) {
      LogLine(tag_, address_ + " failed to prove the shared secret; disconnecting");
      return Finish(Status::InvalidArgument(address_ + " failed to prove the shared secret"));
    }
    auto ch = std::make_shared<Channel>(loop_, std::move(socket_),
                                        PeerIdentity{"coordinator", -1, address_},
                                        role_ == "rank" ? rank_ : -1, options_, tag_);
    ch->StartOnIo(handler_, on_close_);
    Finish(ch);
  }

  void Finish(Result<std::shared_ptr<Channel>> r) {
    if (done_) return;
    done_ = true;
    timer_.cancel();
    if (!r.ok()) {
      boost::system::error_code ec;
      socket_->lowest_layer().close(ec);
    }
    promise_.set_value(std::move(r));
  }

  EventLoop& loop_;
  std::shared_ptr<ssl::context> tls_;
  std::unique_ptr<TlsStream> socket_;
  std::string secret_, role_;
  int rank_;
  NetOptions options_;
  std::string tag_;
  RequestHandler handler_;
  std::function<void()> on_close_;
  asio::steady_timer timer_;
  std::shared_ptr<std::string> buf_;
  std::string address_, server_nonce_, client_nonce_;
  bool done_ = false;
  std::promise<Result<std::shared_ptr<Channel>>> promise_;
};

}  // namespace

void AcceptHandshake(EventLoop& loop, tcp::socket socket, std::shared_ptr<ssl::context> tls,
                     std::string secret, const NetOptions& options, std::string tag,
                     AuthorizeFn authorize, InstallFn install, RequestHandler handler,
                     std::function<void(Channel*)> on_close, std::shared_ptr<void> slot) {
  // The slot lives as long as the handshake, then as long as the channel is open.
  std::function<void(Channel*)> closing = [on_close = std::move(on_close),
                                           slot = std::move(slot)](Channel* c) mutable {
    if (on_close) on_close(c);
    slot.reset();
  };
  auto hs = std::make_shared<ServerHandshake>(
      loop, std::move(socket), std::move(tls), std::move(secret), options, std::move(tag),
      std::move(authorize), std::move(install), std::move(handler), std::move(closing));
  hs->Start();
}

Result<std::shared_ptr<Channel>> Connect(EventLoop& loop, const std::string& host, uint16_t port,
                                         const std::string& secret, const std::string& role,
                                         int rank, const NetOptions& options, std::string tag,
                                         RequestHandler handler, std::function<void()> on_close,
                                         const std::function<bool()>& cancelled) {
  const std::string address = host + ":" + std::to_string(port);
  tcp::resolver resolver(loop.io());
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return Status(ErrorCode::kCrashed, "cannot resolve " + address + ": " + ec.message());
  WTX_ASSIGN_OR_RETURN(tls, MakeTlsContext(false, secret, options.tls));
  auto hs =
      std::make_shared<ClientHandshake>(loop, std::move(tls), secret, role, rank, options,
                                        std::move(tag), std::move(handler), std::move(on_close));
  auto fut = hs->future();
  asio::post(loop.io(), [hs, endpoints, address] { hs->Start(endpoints, address); });
  const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout +
                        options.handshake_timeout + std::chrono::seconds(1);
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return Status(ErrorCode::kTimeout, "connecting to " + address + " timed out");
    }
    const auto slice = std::min<std::chrono::steady_clock::duration>(
        deadline - now, std::chrono::milliseconds(cancelled ? 50 : 1000));
    if (fut.wait_for(slice) == std::future_status::ready) return fut.get();
    if (cancelled && cancelled()) {
      // The handshake finishes (or times out) on its own; a channel it still makes is
      // dropped with the result.
      return Status(ErrorCode::kCrashed, "connecting to " + address + " cancelled");
    }
  }
}

}  // namespace wtx::net
