// Channel: one authenticated, bidirectional request/response connection of the wtx wire
// protocol (docs/protocol.md), on Boost.Asio.
//
//   frame     = u32 big-endian payload length, then the payload: one CBOR map
//               (nlohmann::json::to_cbor). A length of 0 or above the limit is refused and the
//               connection closed (a stream cannot resynchronize after a bad length).
//   request   = {"id": u64, "m": method, "p": params [, "from": rank]}
//   response  = {"re": id, "ok": result} | {"re": id, "err": {"code", "message"}}
//
// Everything travels inside TLS 1.3 (tls.h: a PSK derived from the shared secret, or
// certificates), which authenticates both ends and protects every frame. Inside it, the
// handshake (Accept/Connect below) runs an HMAC-SHA-256 challenge-response over the shared
// secret and fixes the client's identity (role and rank). Frames from a peer registered as rank R
// must carry "from": R; a frame that speaks for another rank is refused and the connection closed.
// Every refusal is logged to stderr.
//
// Thread-safety: Call/Close/closed are safe from any thread. Incoming requests run on the
// loop's worker pool, in arrival order per channel (a strand); the I/O runs on the loop's one
// I/O thread, which never blocks.
#pragma once

#include <utility>  // Boost.Asio's awaitable uses std::exchange without including it

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "src/net/tls.h"
#include "src/util/thread_annotations.h"
#include "wtx/status.h"
#include "wtx/tls_files.h"

namespace wtx::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

inline constexpr char kWireVersion[] = "wtx/1";
// Frames before authentication are small; a peer that has not proved the secret cannot make
// us allocate more than this.
inline constexpr size_t kMaxHandshakeFrameBytes = 4096;
inline constexpr size_t kDefaultMaxFrameBytes = size_t{64} << 20;

struct NetOptions {
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds connect_timeout{3000};
  // Servers: connections (handshaking or open) served at once; more are refused (AcceptLoop).
  int max_connections = 1024;
  // Empty: TLS 1.3 with a PSK derived from the secret; set: certificate mutual TLS (tls.h).
  TlsFiles tls;
};

// Who is at the other end, as fixed by the handshake.
struct PeerIdentity {
  std::string role;  // "rank", "control" (a driver/controller), "coordinator"
  int rank = -1;     // role "rank" only
  std::string address;
};

// Serializes one message as a frame (length prefix + CBOR).
std::string EncodeFrame(const nlohmann::json& message);
// Parses a frame payload; kInvalidArgument for anything but a CBOR map.
Result<nlohmann::json> DecodePayload(const uint8_t* data, size_t size);
// The handshake MACs (hex): HMAC-SHA-256(secret, "wtx/1|<direction>|" + server_nonce + "|" +
// client_nonce + "|" + role + "|" + rank); direction is "client" or "server".
std::string HandshakeMac(std::string_view secret, std::string_view direction,
                         std::string_view server_nonce, std::string_view client_nonce,
                         std::string_view role, int rank);
std::string RandomNonce();  // 32 bytes from the OS, hex
// Logs one line to stderr ("wtx[<tag>]: <message>"), serialized across threads.
void LogLine(const std::string& tag, const std::string& message);
// Like LogLine, rate-limited per (tag, kind): at most kLogBurst lines per second; the lines
// dropped are counted and reported with the next line of that kind that gets through. For
// what a peer can provoke at will (refused connections, accept failures).
inline constexpr int kLogBurst = 5;
void LogLineLimited(const std::string& tag, const std::string& kind, const std::string& message);
// Secret files: at most kMaxSecretFileBytes, a secret of at least kMinSecretBytes once
// surrounding whitespace is stripped.
inline constexpr size_t kMaxSecretFileBytes = 4096;
inline constexpr size_t kMinSecretBytes = 16;
// Reads a secret file; surrounding whitespace is stripped. Refused (kInvalidArgument, naming
// the file and the reason): anything but a regular file (/dev/zero, a FIFO), a file group or
// others may access (as ssh refuses such keys: chmod 600), a file above kMaxSecretFileBytes
// (never read past the bound), and a secret shorter than kMinSecretBytes; read with
// ReadRegularFile (src/util/file_util.h).
// `what` names the file in every error (the CLI passes its option, "--secret-file").
Result<std::string> ReadSecretFile(const std::string& path, std::string_view what = "secret file");
// "HOST:PORT" -> (host, port).
Result<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& s);

// One I/O thread plus a pool of worker threads for request handlers.
class EventLoop {
 public:
  explicit EventLoop(int workers = 4);
  ~EventLoop();  // Stop()
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  asio::io_context& io() { return io_; }
  asio::thread_pool& pool() { return pool_; }
  // Stops the I/O thread, then waits for running handlers. Close channels first: a closed
  // channel fails its pending calls at once, so no handler waits for a timeout.
  void Stop();

 private:
  // Declaration order is destruction order reversed: handlers still queued in io_ hold
  // channels whose strands live in pool_'s service, so pool_ must outlive io_.
  asio::thread_pool pool_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::once_flag stopped_;
};

// Closes `acceptor` on `loop`'s I/O thread (where its accept handlers run) and waits up to five
// seconds for that. The handler owns its completion signal, so a wait that times out (a
// stopped loop) leaves nothing dangling but the acceptor, which outlives the loop's thread.
void CloseAcceptorOnLoop(EventLoop& loop, asio::ip::tcp::acceptor& acceptor);

// Serves a listening acceptor: accepts connections, each handed to `on_socket` together with a
// slot token that must be kept for the connection's lifetime (handshake and channel). Refused
// with a rate-limited log line and closed at once: connections beyond `max_connections` live
// slots. An accept error (EMFILE, ENFILE, ENOBUFS, ...) is logged (rate-limited) and retried
// after a backoff that doubles from 10 ms to 1 s, so a process out of descriptors does not
// spin. Stops when the acceptor is closed (CloseAcceptorOnLoop).
// Thread-safety: handlers run on the loop's I/O thread; live() is safe from any thread.
class AcceptLoop : public std::enable_shared_from_this<AcceptLoop> {
 public:
  using OnSocket = std::function<void(tcp::socket socket, std::shared_ptr<void> slot)>;
  AcceptLoop(EventLoop& loop, tcp::acceptor& acceptor, int max_connections, std::string tag,
             OnSocket on_socket);
  // Posts the first accept. REQUIRES: the acceptor is listening; called once.
  void Start();
  int live() const { return live_->load(); }

 private:
  void Accept();
  EventLoop& loop_;
  tcp::acceptor& acceptor_;
  const int max_connections_;
  const std::string tag_;
  OnSocket on_socket_;
  asio::steady_timer timer_;
  std::chrono::milliseconds backoff_{10};
  std::shared_ptr<std::atomic<int>> live_ = std::make_shared<std::atomic<int>>(0);
};

// Returns a result, an error, or nullopt to send no answer at all (test hook: a silent rank).
using RequestHandler = std::function<std::optional<Result<nlohmann::json>>(
    const std::string& method, const nlohmann::json& params)>;

class Channel : public std::enable_shared_from_this<Channel> {
 public:
  // Use Accept/Connect. `self_rank` >= 0 stamps "from" on every frame this end sends.
  Channel(EventLoop& loop, std::unique_ptr<TlsStream> stream, PeerIdentity peer, int self_rank,
          const NetOptions& options, std::string tag);
  ~Channel();

  // Starts reading. `on_close` runs once, on the I/O thread, when the connection ends.
  // REQUIRES: called on the I/O thread, once.
  void StartOnIo(RequestHandler handler, std::function<void()> on_close);

  // Sends a request and waits up to `timeout` for its answer. Transport failures are
  // kCrashed (closed) and kTimeout (no answer in time) with *transport_error set; an error
  // answered by the peer is returned as it came, with *transport_error false.
  Result<nlohmann::json> Call(const std::string& method, nlohmann::json params,
                              std::chrono::milliseconds timeout, bool* transport_error = nullptr);
  void Close();
  bool closed() const { return closed_.load(); }
  const PeerIdentity& peer() const { return peer_; }

  // Queues a raw message. REQUIRES: on the I/O thread (handshake use).
  void QueueOnIo(const nlohmann::json& message);

 private:
  void ReadHeader();
  void ReadBody(uint32_t size);
  void Dispatch(nlohmann::json message);
  void Send(nlohmann::json message);
  void WriteNext();
  void CloseOnIo(const std::string& why);
  void FailPending();
  void Refuse(const std::string& why);
  struct Reply;

  EventLoop& loop_;
  std::unique_ptr<TlsStream> stream_;  // TLS established
  const PeerIdentity peer_;
  const int self_rank_;
  const NetOptions options_;
  const std::string tag_;
  asio::strand<asio::thread_pool::executor_type> strand_;
  RequestHandler handler_;
  std::function<void()> on_close_;
  std::atomic<bool> closed_{false};
  // I/O thread only.
  uint8_t header_[4];
  std::string body_;
  std::deque<std::string> out_;
  bool writing_ = false;
  bool on_close_ran_ = false;
  // Pending calls.
  std::mutex mu_;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::shared_ptr<std::promise<Reply>>> pending_ GUARDED_BY(mu_);
};

// Server side: authenticates an accepted socket (asynchronously; never blocks the I/O
// thread). `authorize` decides whether the authenticated identity may register (a refusal is
// sent to the peer and logged); `install` then receives the started channel. Both run on the
// I/O thread, back to back, so a check in one still holds in the other.
using AuthorizeFn = std::function<Status(const PeerIdentity& peer)>;
using InstallFn = std::function<void(const std::shared_ptr<Channel>& channel)>;
// `slot` (from AcceptLoop) is held until the handshake fails or the channel closes.
// `tls` is the server context (MakeTlsContext(true, ...)); the TLS handshake runs first, then
// the wtx handshake inside it, both within options.handshake_timeout.
void AcceptHandshake(EventLoop& loop, tcp::socket socket, std::shared_ptr<ssl::context> tls,
                     std::string secret, const NetOptions& options, std::string tag,
                     AuthorizeFn authorize, InstallFn install, RequestHandler handler,
                     std::function<void(Channel*)> on_close, std::shared_ptr<void> slot = nullptr);

// Client side: connects, authenticates as (role, rank) and checks the server's proof of the
// secret. Blocks up to connect_timeout + handshake_timeout, or until `cancelled` (polled every
// 50 ms, may be null) returns true: then kCrashed "connecting to ... cancelled".
Result<std::shared_ptr<Channel>> Connect(EventLoop& loop, const std::string& host, uint16_t port,
                                         const std::string& secret, const std::string& role,
                                         int rank, const NetOptions& options, std::string tag,
                                         RequestHandler handler, std::function<void()> on_close,
                                         const std::function<bool()>& cancelled = nullptr);

}  // namespace wtx::net
