#include "src/net/channel.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "src/net/codec.h"
#include "src/net/crypto.h"
#include "src/util/cbor.h"
#include "src/util/file_util.h"
#include "src/util/json_number.h"
#include "wtx/limits.h"
#include "wtx/logger.h"

namespace wtx::net {

using nlohmann::json;

namespace {

uint32_t ReadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void TuneSocket(tcp::socket& s) {
  boost::system::error_code ec;
  s.set_option(tcp::no_delay(true), ec);
  s.set_option(asio::socket_base::keep_alive(true), ec);
  const int idle = 5, intvl = 2, cnt = 3;
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

std::string Address(const tcp::socket& s) {
  boost::system::error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "(unknown peer)";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

struct Channel::Reply {
  Result<json> result;
  bool transport = false;
};

// ---------------------------------------------------------------------------------------------
// Helpers

std::string EncodeFrame(const json& message) {
  std::vector<uint8_t> cbor = json::to_cbor(message);
  std::string f(4 + cbor.size(), '\0');
  const uint32_t n = static_cast<uint32_t>(cbor.size());
  f[0] = static_cast<char>(n >> 24);
  f[1] = static_cast<char>(n >> 16);
  f[2] = static_cast<char>(n >> 8);
  f[3] = static_cast<char>(n);
  std::memcpy(f.data() + 4, cbor.data(), cbor.size());
  return f;
}

Result<json> DecodePayload(const uint8_t* data, size_t size) {
  std::optional<json> j = ParseCbor(data, size);
  if (!j) {
    return Status::InvalidArgument(
        "malformed frame: not one well-formed CBOR item (or nested "
        "deeper than " +
        std::to_string(kMaxCborDepth) + ")");
  }
  if (!j->is_object()) {
    return Status::InvalidArgument("malformed frame: the payload is not a CBOR map");
  }
  return std::move(*j);
}

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

void LogLine(const std::string& tag, const std::string& message) {
  Log(LogLevel::kInfo, tag, message);  // include/wtx/logger.h (default: stderr)
}

void LogLineLimited(const std::string& tag, const std::string& kind, const std::string& message) {
  struct Bucket {
    std::chrono::steady_clock::time_point window;
    int lines = 0;
    uint64_t dropped = 0;
  };
  static std::mutex mu;
  static std::map<std::string, Bucket> buckets;
  std::string line = message;
  {
    std::lock_guard<std::mutex> l(mu);
    if (buckets.size() > 1024) buckets.clear();  // bounded: kinds are few, tags per process
    Bucket& b = buckets[tag + "\n" + kind];
    const auto now = std::chrono::steady_clock::now();
    if (now - b.window >= std::chrono::seconds(1)) {
      b.window = now;
      b.lines = 0;
    }
    if (b.lines >= kLogBurst) {
      ++b.dropped;
      return;
    }
    ++b.lines;
    if (b.dropped > 0) {
      line += " (" + std::to_string(b.dropped) + " similar lines suppressed)";
      b.dropped = 0;
    }
  }
  LogLine(tag, line);
}

Result<std::string> ReadSecretFile(const std::string& path, std::string_view what) {
  ReadFileOptions o;
  o.what = what;
  o.max_bytes = kMaxSecretFileBytes;
  o.private_only = true;  // as ssh refuses such keys
  WTX_ASSIGN_OR_RETURN(s, ReadRegularFile(path, o));
  const std::string name = std::string(what) + " '" + path + "'";
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return Status::InvalidArgument(name + ": holds only white space");
  s = s.substr(b, s.find_last_not_of(ws) - b + 1);
  if (s.size() < kMinSecretBytes) {
    return Status::InvalidArgument(name + ": holds a " + std::to_string(s.size()) +
                                   "-byte secret; at least " + std::to_string(kMinSecretBytes) +
                                   " bytes are required (e.g. openssl rand -hex 32)");
  }
  return s;
}

Result<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& s) {
  const size_t c = s.rfind(':');
  if (c == std::string::npos || c == 0 || c + 1 == s.size()) {
    return Status::InvalidArgument("expected HOST:PORT, got '" + s + "'");
  }
  const std::string port = s.substr(c + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoul(port) > 65535) {
    return Status::InvalidArgument("bad port in '" + s + "'");
  }
  return std::make_pair(s.substr(0, c), static_cast<uint16_t>(std::stoul(port)));
}

// ---------------------------------------------------------------------------------------------
// EventLoop

EventLoop::EventLoop(int workers)
    : pool_(workers), guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Stop() {
  std::call_once(stopped_, [this] {
    // No more I/O handlers, hence no new requests for the pool; then drain the pool.
    guard_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
    pool_.join();
  });
}

void CloseAcceptorOnLoop(EventLoop& loop, asio::ip::tcp::acceptor& acceptor) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> closed = done->get_future();
  asio::post(loop.io(), [&acceptor, done] {
    boost::system::error_code ec;
    acceptor.close(ec);
    done->set_value();
  });
  closed.wait_for(std::chrono::seconds(5));
}

// ---------------------------------------------------------------------------------------------
// Channel

Channel::Channel(EventLoop& loop, std::unique_ptr<TlsStream> stream, PeerIdentity peer,
                 int self_rank, const NetOptions& options, std::string tag)
    : loop_(loop),
      stream_(std::move(stream)),
      peer_(std::move(peer)),
      self_rank_(self_rank),
      options_(options),
      tag_(std::move(tag)),
      strand_(asio::make_strand(loop.pool().get_executor())) {}

Channel::~Channel() {
  boost::system::error_code ec;
  stream_->lowest_layer().close(ec);
}

void Channel::StartOnIo(RequestHandler handler, std::function<void()> on_close) {
  handler_ = std::move(handler);
  on_close_ = std::move(on_close);
  ReadHeader();
  if (!writing_) WriteNext();
}

void Channel::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(*stream_, asio::buffer(header_, 4),
                   [self](const boost::system::error_code& ec, size_t) {
                     if (ec) return self->CloseOnIo(ec.message());
                     const uint32_t size = ReadBe32(self->header_);
                     if (size == 0 || size > self->options_.max_frame_bytes) {
                       return self->Refuse("frame of " + std::to_string(size) + " bytes (limit " +
                                           std::to_string(self->options_.max_frame_bytes) + ")");
                     }
                     self->ReadBody(size);
                   });
}

void Channel::ReadBody(uint32_t size) {
  auto self = shared_from_this();
  body_.resize(size);
  asio::async_read(*stream_, asio::buffer(body_.data(), size),
                   [self](const boost::system::error_code& ec, size_t) {
                     if (ec) return self->CloseOnIo(ec.message());
                     auto m = DecodePayload(reinterpret_cast<const uint8_t*>(self->body_.data()),
                                            self->body_.size());
                     std::string().swap(self->body_);
                     if (!m.ok()) return self->Refuse(m.status().message());
                     self->Dispatch(std::move(m).value());
                     if (!self->closed_) self->ReadHeader();
                   });
}

void Channel::Refuse(const std::string& why) {
  LogLine(tag_, "refused frame from " + peer_.address +
                    (peer_.role == "rank" ? " (rank " + std::to_string(peer_.rank) + ")" : "") +
                    ": " + why + "; connection closed");
  CloseOnIo(why);
}

void Channel::Dispatch(json m) {
  if (peer_.role == "rank") {
    auto f = m.find("from");
    if (f == m.end() || !f->is_number_integer() || f->get<int64_t>() != peer_.rank) {
      return Refuse("rank " + std::to_string(peer_.rank) + "'s connection spoke for rank " +
                    (f == m.end() ? std::string("(none)") : f->dump()));
    }
  }
  if (auto re = m.find("re"); re != m.end()) {
    if (!re->is_number_unsigned()) return Refuse("malformed response id");
    std::shared_ptr<std::promise<Reply>> p;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = pending_.find(re->get<uint64_t>());
      if (it == pending_.end()) return;  // answered after its caller gave up
      p = std::move(it->second);
      pending_.erase(it);
    }
    if (auto ok = m.find("ok"); ok != m.end()) {
      p->set_value(Reply{std::move(*ok), false});
    } else {
      p->set_value(Reply{StatusFromJson(m.value("err", json())), false});
    }
    return;
  }
  auto id = m.find("id");
  auto method = m.find("m");
  if (id == m.end() || !id->is_number_unsigned() || method == m.end() || !method->is_string()) {
    return Refuse("malformed message: neither a request nor a response");
  }
  json params = m.value("p", json::object());
  auto self = shared_from_this();
  asio::post(strand_, [self, id = id->get<uint64_t>(), method = method->get<std::string>(),
                       params = std::move(params)] {
    std::optional<Result<json>> r;
    try {
      if (self->handler_) {
        r = self->handler_(method, params);
      } else {
        r = Result<json>(Status::InvalidArgument("this end serves no requests"));
      }
    } catch (const std::exception& e) {
      r = Result<json>(Status::InvalidArgument("bad '" + method + "' request: " + e.what()));
    }
    if (!r) return;  // deliberately unanswered
    json resp = {{"re", id}};
    if (r->ok()) {
      resp["ok"] = std::move(r->value());
    } else {
      resp["err"] = StatusToJson(r->status());
    }
    self->Send(std::move(resp));
  });
}

void Channel::QueueOnIo(const json& message) {
  json m = message;
  if (self_rank_ >= 0) m["from"] = self_rank_;
  out_.push_back(EncodeFrame(m));
}

void Channel::Send(json message) {
  if (self_rank_ >= 0) message["from"] = self_rank_;
  std::string frame = EncodeFrame(message);
  if (frame.size() - 4 > options_.max_frame_bytes && message.contains("re")) {
    json err = {{"re", message["re"]},
                {"err", StatusToJson(Status::InvalidArgument("answer of " +
                                                             std::to_string(frame.size() - 4) +
                                                             " bytes exceeds the frame limit"))}};
    if (self_rank_ >= 0) err["from"] = self_rank_;
    frame = EncodeFrame(err);
  }
  auto self = shared_from_this();
  asio::post(loop_.io(), [self, frame = std::move(frame)]() mutable {
    if (self->closed_) return;
    self->out_.push_back(std::move(frame));
    if (!self->writing_) self->WriteNext();
  });
}

void Channel::WriteNext() {
  if (out_.empty() || closed_) {
    writing_ = false;
    return;
  }
  writing_ = true;
  auto self = shared_from_this();
  asio::async_write(*stream_, asio::buffer(out_.front()),
                    [self](const boost::system::error_code& ec, size_t) {
                      if (ec) return self->CloseOnIo(ec.message());
                      self->out_.pop_front();
                      self->WriteNext();
                    });
}

void Channel::CloseOnIo(const std::string& why) {
  closed_ = true;
  boost::system::error_code ec;
  stream_->lowest_layer().close(ec);
  // out_ stays: a write in flight still owns its front buffer, and its completion pops it.
  FailPending();
  if (!on_close_ran_) {
    on_close_ran_ = true;
    if (on_close_) on_close_();
  }
}

void Channel::FailPending() {
  std::map<uint64_t, std::shared_ptr<std::promise<Reply>>> pending;
  {
    std::lock_guard<std::mutex> l(mu_);
    pending.swap(pending_);
  }
  for (auto& [id, p] : pending) {
    p->set_value(
        Reply{Status(ErrorCode::kCrashed, "connection to " + peer_.address + " closed"), true});
  }
}

void Channel::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  FailPending();  // at once: the I/O thread may already be stopped
  auto self = shared_from_this();
  asio::post(loop_.io(), [self] { self->CloseOnIo("closed by this end"); });
}

Result<json> Channel::Call(const std::string& method, json params,
                           std::chrono::milliseconds timeout, bool* transport_error) {
  if (transport_error) *transport_error = false;
  auto fail = [&](Status s) -> Result<json> {
    if (transport_error) *transport_error = true;
    return s;
  };
  auto p = std::make_shared<std::promise<Reply>>();
  auto fut = p->get_future();
  uint64_t id;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) {
      return fail(Status(ErrorCode::kCrashed, "connection to " + peer_.address + " is closed"));
    }
    id = next_id_++;
    pending_[id] = p;
  }
  json m = {{"id", id}, {"m", method}, {"p", std::move(params)}};
  if (self_rank_ >= 0) m["from"] = self_rank_;
  std::string frame = EncodeFrame(m);
  if (frame.size() - 4 > options_.max_frame_bytes) {
    std::lock_guard<std::mutex> l(mu_);
    pending_.erase(id);
    return Status::InvalidArgument("'" + method + "' request of " +
                                   std::to_string(frame.size() - 4) +
                                   " bytes exceeds the frame limit");
  }
  auto self = shared_from_this();
  asio::post(loop_.io(), [self, frame = std::move(frame)]() mutable {
    if (self->closed_) return;
    self->out_.push_back(std::move(frame));
    if (!self->writing_) self->WriteNext();
  });
  if (fut.wait_for(timeout) != std::future_status::ready) {
    std::lock_guard<std::mutex> l(mu_);
    if (pending_.erase(id)) {
      return fail(
          Status(ErrorCode::kTimeout, "no answer to '" + method + "' within " + Ms(timeout)));
    }
  }
  Reply r = fut.get();
  if (transport_error) *transport_error = r.transport;
  return std::move(r.result);
}

// ---------------------------------------------------------------------------------------------
// Handshakes

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
        const uint32_t size = ReadBe32(reinterpret_cast<const uint8_t*>(buf->data()));
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
    address_ = Address(socket_->next_layer());
    auto self = shared_from_this();
    timer_.expires_after(options_.handshake_timeout);
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->done_) return;
      self->Refuse("no authentication within " + Ms(self->options_.handshake_timeout), "");
    });
    socket_->async_handshake(ssl::stream_base::server, [self](const boost::system::error_code& ec) {
      if (self->done_) return;
      if (ec) {
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

AcceptLoop::AcceptLoop(EventLoop& loop, tcp::acceptor& acceptor, int max_connections,
                       std::string tag, OnSocket on_socket)
    : loop_(loop),
      acceptor_(acceptor),
      max_connections_(max_connections < 1 ? 1 : max_connections),
      tag_(std::move(tag)),
      on_socket_(std::move(on_socket)),
      timer_(loop.io()) {}

void AcceptLoop::Start() {
  asio::post(loop_.io(), [self = shared_from_this()] { self->Accept(); });
}

void AcceptLoop::Accept() {
  if (!acceptor_.is_open()) return;
  acceptor_.async_accept(
      [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
        if (ec) {
          // Out of descriptors (or another transient failure): wait before trying again, instead
          // of spinning on an accept that fails at once.
          LogLineLimited(self->tag_, "accept",
                         "accept failed: " + ec.message() + "; retrying in " +
                             std::to_string(self->backoff_.count()) + " ms");
          self->timer_.expires_after(self->backoff_);
          self->backoff_ = std::min(self->backoff_ * 2, std::chrono::milliseconds(1000));
          self->timer_.async_wait([self](const boost::system::error_code& tec) {
            if (!tec) self->Accept();
          });
          return;
        }
        self->backoff_ = std::chrono::milliseconds(10);
        if (self->live_->load() >= self->max_connections_) {
          LogLineLimited(self->tag_, "limit",
                         "refused connection from " + Address(socket) + ": " +
                             std::to_string(self->max_connections_) +
                             " connections open (the limit, --max-connections)");
          boost::system::error_code cec;
          socket.close(cec);
        } else {
          auto live = self->live_;
          ++*live;
          std::shared_ptr<void> slot(nullptr, [live](void*) { --*live; });
          self->on_socket_(std::move(socket), std::move(slot));
        }
        self->Accept();
      });
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
