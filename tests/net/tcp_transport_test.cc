// The TCP transport on loopback: a real coordinator and real participants in this process,
// connected through TcpTransport / TcpRankAgent, plus a raw socket client that misbehaves.
// Every server binds 127.0.0.1; every wait is bounded.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "src/net/channel.h"
#include "src/net/rank_agent_hooks.h"
#include "src/net/tls.h"
#include "tests/test_util.h"
#include "wtx/logger.h"
#include "wtx/tcp_rank_agent.h"
#include "wtx/tcp_transport.h"

namespace wtx {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::TempDir;

constexpr char kSecret[] = "correct horse battery staple";

// A blocking client that speaks (or garbles) the wire protocol by hand, inside TLS 1.3 with
// the PSK of `tls_secret` (OpenSSL on the raw socket), or in plain TCP when `tls_secret` is
// null (a peer that never starts TLS).
class RawClient {
 public:
  explicit RawClient(uint16_t port, const char* tls_secret = kSecret, const TlsFiles& files = {}) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    timeval tv{5, 0};  // no blocking call hangs the test
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (!tls_secret) return;
    auto ctx = net::MakeTlsContext(false, tls_secret, files);
    REQUIRE(ctx.ok());
    ctx_ = std::move(ctx).value();
    ssl_ = SSL_new(ctx_->native_handle());
    SSL_set_fd(ssl_, fd_);
    tls_ok_ = SSL_connect(ssl_) == 1;
  }
  ~RawClient() {
    if (ssl_) SSL_free(ssl_);
    ::close(fd_);
  }
  bool tls_ok() const { return tls_ok_; }
  int fd() const { return fd_; }

  void Write(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ssl_ ? SSL_write(ssl_, bytes.data() + off, static_cast<int>(bytes.size() - off))
                       : ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // One read of up to n bytes within the deadline: >0 bytes, 0 on close/error, -1 on timeout.
  ssize_t ReadSome(char* buf, size_t n, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (!ssl_ || SSL_pending(ssl_) == 0) {
        const auto left =
            std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return -1;
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      }
      if (!ssl_) {
        ssize_t r = ::recv(fd_, buf, n, 0);
        return r < 0 ? 0 : r;
      }
      const int r = SSL_read(ssl_, buf, static_cast<int>(n));
      if (r > 0) return r;
      if (SSL_get_error(ssl_, r) == SSL_ERROR_WANT_READ) continue;
      return 0;
    }
  }
  // Reads exactly n bytes within the timeout; false on close/timeout.
  bool ReadExactly(std::string* out, size_t n, milliseconds timeout = milliseconds(5000)) {
    out->clear();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out->size() < n) {
      char buf[4096];
      ssize_t r = ReadSome(buf, std::min(sizeof(buf), n - out->size()), deadline);
      if (r <= 0) return false;
      out->append(buf, static_cast<size_t>(r));
    }
    return true;
  }
  json ReadFrame() {
    std::string h, b;
    if (!ReadExactly(&h, 4)) return json();
    const uint32_t n = (uint32_t{uint8_t(h[0])} << 24) | (uint32_t{uint8_t(h[1])} << 16) |
                       (uint32_t{uint8_t(h[2])} << 8) | uint32_t{uint8_t(h[3])};
    if (!ReadExactly(&b, n)) return json();
    auto j = net::DecodePayload(reinterpret_cast<const uint8_t*>(b.data()), b.size());
    return j.ok() ? j.value() : json();
  }
  // Runs the client handshake; returns the server's verdict frame.
  json Handshake(const std::string& secret, const std::string& role, int rank) {
    json hello = ReadFrame();
    if (!hello.is_object()) return json();
    const std::string sn = hello["nonce"].get<std::string>();
    const std::string cn = net::RandomNonce();
    Write(net::EncodeFrame({{"role", role},
                            {"rank", rank},
                            {"nonce", cn},
                            {"mac", net::HandshakeMac(secret, "client", sn, cn, role, rank)}}));
    return ReadFrame();
  }
  // True when the server closes the connection within the timeout.
  bool ClosedByPeer(milliseconds timeout = milliseconds(5000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      char buf[4096];
      ssize_t r = ReadSome(buf, sizeof(buf), deadline);
      if (r < 0) return false;  // timed out: still open
      if (r == 0) return true;  // EOF, reset or a TLS error
    }
  }

 private:
  int fd_ = -1;
  std::shared_ptr<net::ssl::context> ctx_;
  SSL* ssl_ = nullptr;
  bool tls_ok_ = false;
};

std::string FrameHeader(uint32_t n) {
  std::string h(4, '\0');
  h[0] = static_cast<char>(n >> 24);
  h[1] = static_cast<char>(n >> 16);
  h[2] = static_cast<char>(n >> 8);
  h[3] = static_cast<char>(n);
  return h;
}

// A coordinator with N ranks on loopback; ranks [0, agents) run real agents.
struct Rig {
  TempDir dir;
  ManifestPtr manifest = testing::SmallManifest();
  std::unique_ptr<TcpTransport> transport;
  std::vector<std::unique_ptr<Participant>> parts;
  std::vector<std::unique_ptr<TcpRankAgent>> agents;
  std::vector<std::unique_ptr<RankAgentHooks>> agent_hooks;  // one per StartAgent
  std::unique_ptr<Coordinator> coord;

  explicit Rig(int ranks, int agents_n = -1, TcpTransportOptions to = {},
               milliseconds prepare_timeout = milliseconds(5000)) {
    if (agents_n < 0) agents_n = ranks;
    to.secret = kSecret;
    to.num_ranks = ranks;
    auto t = TcpTransport::Listen(to);
    REQUIRE(t.ok());
    transport = std::move(t).value();
    for (int r = 0; r < agents_n; ++r) {
      AddParticipant(r);
      agents.push_back(StartAgent(r, kSecret));
    }
    std::vector<int> all;
    for (int r = 0; r < agents_n; ++r) all.push_back(r);
    REQUIRE(transport->WaitForRanks(all, milliseconds(10000)));
    CoordinatorOptions co;
    co.journal_dir = dir.sub("coordinator");
    co.prepare_timeout = prepare_timeout;
    auto c = Coordinator::Open(co, transport.get());
    REQUIRE(c.ok());
    coord = std::move(c).value();
    transport->SetDecisionOracle(coord.get());
  }

  ~Rig() {
    // Agents first (they use the participants), then the transport (it uses the coordinator
    // as its oracle), then the rest.
    agents.clear();
    transport.reset();
    coord.reset();
  }

  // Opens rank r's participant (appended to `parts`).
  void AddParticipant(int r) {
    ParticipantOptions po;
    po.rank = r;
    po.journal_dir = dir.sub("rank-" + std::to_string(r));
    po.kernel_identity = "k1";
    auto p = Participant::Open(po, manifest);
    REQUIRE(p.ok());
    parts.push_back(std::move(p).value());
  }

  std::unique_ptr<TcpRankAgent> StartAgent(int r, const std::string& secret) {
    RankAgentOptions ao;
    ao.coordinator_port = transport->port();
    ao.rank = r;
    ao.secret = secret;
    ao.backoff_max = milliseconds(100);
    agent_hooks.push_back(std::make_unique<RankAgentHooks>());
    auto a = StartRankAgentWithHooks(ao, parts[r].get(), agent_hooks.back().get());
    REQUIRE(a.ok());
    return std::move(a).value();
  }

  void WriteAll(int r, uint32_t seed) {
    const Manifest& m = *manifest;
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<WritePiece> pieces;
    for (const auto& p : m.params()) {
      bufs.push_back(testing::Pattern(m, p.name, WholeBox(p.shape), seed));
      WritePiece w;
      w.param = p.name;
      w.data = bufs.back().data();
      w.bytes = bufs.back().size();
      pieces.push_back(w);
    }
    REQUIRE(parts[r]->Write(pieces).ok());
    REQUIRE(parts[r]->Refresh("*").ok());
  }
};

BeginRequest Full(const std::string& tx) {
  BeginRequest b;
  b.tx = tx;
  return b;
}

TEST_CASE("CoordinatorCommitsOverTcp", "[tcp]") {
  Rig rig(3);
  REQUIRE(rig.coord->Begin(Full("t1")).status.ok());
  for (int r = 0; r < 3; ++r) rig.WriteAll(r, 1);
  CommitOutcome o = rig.coord->Commit("t1");
  REQUIRE(o.status.ok());
  REQUIRE(o.decision == Decision::kCommit);
  CHECK(o.unacknowledged.empty());
  for (int r = 0; r < 3; ++r) {
    RankStatus s = rig.parts[r]->status();
    CHECK(s.serving);
    CHECK(s.version == o.version);
    CHECK(o.votes[r].kind == VoteReport::Kind::kYes);
  }
  // A refusal travels with its code and message.
  BeginRequest d;
  d.tx = "t2";
  d.kind = TxKind::kDelta;
  d.base = "not-a-version";
  d.sources = {"q_proj"};
  BeginOutcome b = rig.coord->Begin(d);
  CHECK(b.status.code() == ErrorCode::kBaseMismatch);
  CHECK(b.errors.size() == 3);
}

TEST_CASE("WrongSecretIsRefused", "[tcp][auth]") {
  TcpTransportOptions to;
  to.handshake_timeout = milliseconds(300);
  Rig rig(2, 1, to);
  // An agent with the wrong secret never registers.
  rig.AddParticipant(1);
  auto bad = rig.StartAgent(1, "wrong secret");
  CHECK_FALSE(rig.transport->WaitForRanks({1}, milliseconds(500)));
  CHECK(bad->state().connections == 0);
  CHECK(bad->state().last_error.message().find("TLS handshake") != std::string::npos);
  CHECK(rig.transport->endpoint(1)->Describe().status().code() == ErrorCode::kCrashed);

  // A peer without the key cannot even complete TLS.
  {
    RawClient nokey(rig.transport->port(), "a different secret, same length");
    CHECK_FALSE(nokey.tls_ok());
    CHECK(nokey.ClosedByPeer());
  }
  // Inside TLS, a wrong MAC (the handshake binding role and rank) is told so and disconnected.
  RawClient wrong(rig.transport->port());
  json verdict = wrong.Handshake("guess", "rank", 1);
  CHECK(verdict.value("refused", "") == "authentication failed");
  CHECK(wrong.ClosedByPeer());
  // A client that never authenticates is dropped after the handshake timeout, and does not
  // hold anyone up meanwhile.
  RawClient silent(rig.transport->port(), nullptr);
  CHECK(rig.transport->endpoint(0)->Describe().ok());
  CHECK(silent.ClosedByPeer(milliseconds(3000)));
  // The right secret still works.
  bad.reset();
  auto good = rig.StartAgent(1, kSecret);
  CHECK(rig.transport->WaitForRanks({0, 1}, milliseconds(5000)));
  CHECK(rig.transport->endpoint(1)->Describe().ok());
}

// Collects the library's log lines (include/wtx/logger.h).
class CapturingLogger : public Logger {
 public:
  void Log(LogLevel level, std::string_view component, std::string_view message) override {
    std::lock_guard<std::mutex> l(mu_);
    lines_.emplace_back(std::string(component), std::string(message));
    cv_.notify_all();
  }
  // Waits until `component` logs a line containing `needle`; false on timeout.
  bool WaitFor(const std::string& component, const std::string& needle, milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] {
      for (const auto& [c, m] : lines_) {
        if (c == component && m.find(needle) != std::string::npos) return true;
      }
      return false;
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, std::string>> lines_;  // component, message
};

TEST_CASE("LibraryLogLinesGoToTheInjectedLogger", "[tcp]") {
  auto logger = std::make_shared<CapturingLogger>();
  SetLogger(logger);
  {
    Rig rig(2, 1);
    rig.AddParticipant(1);
    // A refused agent logs why it retries, through the injected logger, under its tag.
    auto bad = rig.StartAgent(1, "wrong secret");
    // Both sides log the refusal through the injected logger, each under its own tag.
    CHECK(logger->WaitFor("rank-1", "; retrying", milliseconds(5000)));
    CHECK(logger->WaitFor("coordinator", "refused connection", milliseconds(5000)));
  }
  SetLogger(nullptr);  // back to stderr
}

TEST_CASE("OversizedFrameIsRefused", "[tcp]") {
  TcpTransportOptions to;
  to.max_frame_bytes = 1 << 20;
  Rig rig(2, 1, to);
  // Before authentication the limit is 4 KiB.
  {
    RawClient c(rig.transport->port());
    CHECK(c.ReadFrame().contains("hello"));
    c.Write(FrameHeader(64 * 1024));
    CHECK(c.ClosedByPeer());
  }
  // After authentication, max_frame_bytes.
  RawClient c(rig.transport->port());
  REQUIRE(c.Handshake(kSecret, "rank", 1).value("ok", false));
  c.Write(FrameHeader((1 << 20) + 1));
  CHECK(c.ClosedByPeer());
  CHECK_FALSE(rig.transport->WaitForRanks({1}, milliseconds(100)));
  // Other ranks are unaffected.
  CHECK(rig.transport->endpoint(0)->Describe().ok());
}

TEST_CASE("MalformedFrameIsRefused", "[tcp]") {
  Rig rig(2, 1);
  RawClient c(rig.transport->port());
  REQUIRE(c.Handshake(kSecret, "rank", 1).value("ok", false));
  c.Write(FrameHeader(5) + std::string("\xff\x00\x13\x37\x42", 5));
  CHECK(c.ClosedByPeer());
  // A well-formed map that is neither a request nor a response.
  RawClient d(rig.transport->port());
  REQUIRE(d.Handshake(kSecret, "rank", 1).value("ok", false));
  d.Write(net::EncodeFrame({{"from", 1}, {"what", "ever"}}));
  CHECK(d.ClosedByPeer());
  // A malformed handshake.
  RawClient e(rig.transport->port());
  CHECK(e.ReadFrame().contains("hello"));
  e.Write(net::EncodeFrame({{"role", 7}}));
  CHECK(e.ClosedByPeer());
  CHECK(rig.transport->endpoint(0)->Describe().ok());
}

TEST_CASE("RankImpersonationIsRefused", "[tcp][auth]") {
  Rig rig(3, 1);
  // A second connection for a rank that is connected.
  {
    RawClient c(rig.transport->port());
    json v = c.Handshake(kSecret, "rank", 0);
    CHECK(v.value("refused", "").find("already connected") != std::string::npos);
    CHECK(c.ClosedByPeer());
  }
  // A rank id outside the job.
  {
    RawClient c(rig.transport->port());
    CHECK(c.Handshake(kSecret, "rank", 7).contains("refused"));
  }
  // Rank 1's connection sending a frame that claims rank 0.
  {
    RawClient c(rig.transport->port());
    REQUIRE(c.Handshake(kSecret, "rank", 1).value("ok", false));
    c.Write(
        net::EncodeFrame({{"id", 1}, {"m", "query_decision"}, {"p", {{"tx", "t"}}}, {"from", 0}}));
    CHECK(c.ClosedByPeer());
  }
  // Rank 2's connection answering as rank 0.
  RawClient c(rig.transport->port());
  REQUIRE(c.Handshake(kSecret, "rank", 2).value("ok", false));
  REQUIRE(rig.transport->WaitForRanks({2}, milliseconds(2000)));
  auto fut = std::async(std::launch::async, [&] { return rig.transport->endpoint(2)->Describe(); });
  json req = c.ReadFrame();
  REQUIRE(req.value("m", "") == "describe");
  c.Write(
      net::EncodeFrame({{"re", req["id"]},
                        {"from", 2},
                        {"ok", {{"rank", 0}, {"fingerprint", "f"}, {"kernel_identity", "k1"}}}}));
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(fut.get().status().code() == ErrorCode::kCrashed);
  CHECK(c.ClosedByPeer());
  CHECK(rig.transport->endpoint(0)->Describe().ok());
}

TEST_CASE("HandshakeRankIsNeverTruncated", "[tcp][auth]") {
  Rig rig(3, 1);
  // Rank 2^32 + 1, MAC'ed as the server used to read it (truncated to int: rank 1): it was
  // accepted as rank 1. A rank outside -1..kMaxRanks-1 is a malformed handshake.
  RawClient c(rig.transport->port());
  json hello = c.ReadFrame();
  REQUIRE(hello.is_object());
  const std::string sn = hello["nonce"].get<std::string>();
  const std::string cn = net::RandomNonce();
  c.Write(net::EncodeFrame({{"role", "rank"},
                            {"rank", (uint64_t{1} << 32) + 1},
                            {"nonce", cn},
                            {"mac", net::HandshakeMac(kSecret, "client", sn, cn, "rank", 1)}}));
  json verdict = c.ReadFrame();
  INFO(verdict.dump());
  CHECK_FALSE(verdict.value("ok", false));
  CHECK(c.ClosedByPeer());
  CHECK_FALSE(rig.transport->WaitForRanks({1}, milliseconds(200)));
}

TEST_CASE("SilentRankTimesOutAndTheTransactionAborts", "[tcp]") {
  Rig rig(2, 2, {}, milliseconds(300));
  REQUIRE(rig.coord->Begin(Full("t1")).status.ok());
  for (int r = 0; r < 2; ++r) rig.WriteAll(r, 3);
  rig.agent_hooks[1]->silent = true;
  const auto t0 = std::chrono::steady_clock::now();
  CommitOutcome o = rig.coord->Commit("t1");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(o.status.code() == ErrorCode::kTimeout);
  REQUIRE(o.decision == Decision::kAbort);
  CHECK(o.votes[1].kind == VoteReport::Kind::kTimeout);
  CHECK(o.votes[1].status.message() == "rank 1 did not answer");
  // Decisions still reach it.
  CHECK_FALSE(rig.parts[1]->status().active_tx.has_value());
}

// Fires once at a named point.
class CrashAt : public CrashPoints {
 public:
  explicit CrashAt(std::string p) : p_(std::move(p)) {}
  bool ShouldCrash(std::string_view point) override {
    return point == p_ && !std::exchange(done_, true);
  }

 private:
  std::string p_;
  bool done_ = false;
};

TEST_CASE("RanksReconnectToARestartedCoordinatorAndResolveInDoubt", "[tcp]") {
  Rig rig(2);
  REQUIRE(rig.coord->Begin(Full("t1")).status.ok());
  for (int r = 0; r < 2; ++r) rig.WriteAll(r, 5);
  // The coordinator logs commit and dies before telling anyone: both ranks are in doubt.
  CrashAt crash("after_decision_logged");
  {
    CoordinatorOptions co;
    co.journal_dir = rig.dir.sub("coordinator");
    rig.transport->SetDecisionOracle(nullptr);
    rig.coord.reset();
    CoordinatorHooks hooks;
    hooks.crash_points = &crash;
    rig.coord = OpenCoordinatorWithHooks(co, rig.transport.get(), hooks).value();
  }
  CommitOutcome o = rig.coord->Commit("t1");
  CHECK(o.status.code() == ErrorCode::kCrashed);
  CHECK(rig.parts[0]->status().in_doubt == std::optional<std::string>("t1"));
  // Restart the coordinator process: a new transport on the same port, the same journal.
  const uint16_t port = rig.transport->port();
  rig.coord.reset();
  rig.transport.reset();
  TcpTransportOptions to;
  to.port = port;
  to.secret = kSecret;
  to.num_ranks = 2;
  rig.transport = TcpTransport::Listen(to).value();
  CoordinatorOptions co;
  co.journal_dir = rig.dir.sub("coordinator");
  rig.coord = Coordinator::Open(co, rig.transport.get()).value();
  rig.transport->SetDecisionOracle(rig.coord.get());
  // The agents reconnect with backoff and ask for the decision themselves.
  for (auto& a : rig.agents) CHECK(a->WaitResolved(milliseconds(10000)));
  for (int r = 0; r < 2; ++r) {
    RankStatus s = rig.parts[r]->status();
    CHECK_FALSE(s.in_doubt.has_value());
    CHECK(s.version == std::optional<std::string>(o.version));
    CHECK(s.serving);
  }
  CHECK(rig.agents[0]->state().connections == 2);
  CHECK(rig.coord->Recover().ok());
}

// An on-path attacker on loopback: forwards bytes between one client and the server, and on
// request modifies one byte of the client's next chunk, or injects bytes of its own into the
// client-to-server stream.
class Proxy {
 public:
  enum class Mode { kForward, kFlipNext, kInject };
  explicit Proxy(uint16_t server_port) : server_port_(server_port) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(listen_, 4) == 0);
    socklen_t n = sizeof(a);
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~Proxy() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    thread_.join();
    ::close(listen_);
  }
  uint16_t port() const { return port_; }
  void Flip() { mode_ = Mode::kFlipNext; }
  void Inject(std::string bytes) {
    std::lock_guard<std::mutex> l(mu_);
    inject_ = std::move(bytes);
    mode_ = Mode::kInject;
  }

 private:
  void Run() {
    pollfd lp{listen_, POLLIN, 0};
    while (!stop_ && ::poll(&lp, 1, 100) == 0) {
    }
    if (stop_) return;
    const int c = ::accept(listen_, nullptr, nullptr);
    if (c < 0) return;
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(c);
      ::close(s);
      return;
    }
    while (!stop_) {
      if (mode_ == Mode::kInject) {
        std::string b;
        {
          std::lock_guard<std::mutex> l(mu_);
          b.swap(inject_);
        }
        ::send(s, b.data(), b.size(), MSG_NOSIGNAL);
        mode_ = Mode::kForward;
      }
      pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      char buf[16384];
      bool closed = false;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(p[i].fd, buf, sizeof(buf), 0);
        if (n <= 0) {
          closed = true;
          break;
        }
        if (i == 0 && mode_ == Mode::kFlipNext) {
          buf[n / 2] ^= 0x20;  // one bit, inside the record
          mode_ = Mode::kForward;
        }
        ::send(i == 0 ? s : c, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
      }
      if (closed) break;
    }
    ::close(c);
    ::close(s);
  }

  uint16_t server_port_, port_ = 0;
  int listen_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<Mode> mode_{Mode::kForward};
  std::mutex mu_;
  std::string inject_;
  std::thread thread_;
};

// A control connection through the proxy, authenticated; the server counts the requests its
// handler runs.
struct ProxiedControl {
  Rig rig{1};
  std::atomic<int> served{0};
  Proxy proxy{rig.transport->port()};
  RawClient client{proxy.port()};
  ProxiedControl() {
    rig.transport->SetControlHandler([this](const std::string& m, const json&) {
      ++served;
      return std::optional<Result<json>>(Result<json>(json{{"method", m}}));
    });
    REQUIRE(client.tls_ok());
    REQUIRE(client.Handshake(kSecret, "control", -1).value("ok", false));
  }
  static std::string BeginFrame(uint64_t id) {
    return net::EncodeFrame({{"id", id}, {"m", "begin"}, {"p", {{"req", {{"tx", "evil"}}}}}});
  }
};

TEST_CASE("FramesPassUnmodifiedThroughAnHonestProxy", "[tcp][tls]") {
  ProxiedControl pc;
  pc.client.Write(ProxiedControl::BeginFrame(1));
  json r = pc.client.ReadFrame();
  CHECK(r.value("ok", json()).value("method", "") == "begin");
  CHECK(pc.served == 1);
}

TEST_CASE("FrameModifiedOnPathAfterTheHandshakeIsRejected", "[tcp][tls]") {
  ProxiedControl pc;
  pc.proxy.Flip();
  pc.client.Write(ProxiedControl::BeginFrame(1));
  CHECK(pc.client.ClosedByPeer());
  CHECK(pc.served == 0);
  // Nothing changed: the ranks were never asked.
  CHECK_FALSE(pc.rig.parts[0]->status().active_tx.has_value());
  CHECK(pc.rig.transport->endpoint(0)->Describe().ok());
}

TEST_CASE("FrameInjectedOnPathAfterTheHandshakeIsRejected", "[tcp][tls]") {
  ProxiedControl pc;
  // The attacker injects a well-formed plaintext frame (what was executed before TLS).
  pc.proxy.Inject(ProxiedControl::BeginFrame(7));
  CHECK(pc.client.ClosedByPeer());
  CHECK(pc.served == 0);
  CHECK_FALSE(pc.rig.parts[0]->status().active_tx.has_value());
}

bool HaveOpensslCli() { return std::system("openssl version > /dev/null 2>&1") == 0; }

// Test-only PKI, generated at test time with the openssl CLI: a CA, certificates it signs for
// the coordinator and the ranks, and a self-signed certificate no one trusts.
struct TestPki {
  TempDir dir;
  TlsFiles coordinator, rank, untrusted;
  bool ok = false;
  TestPki() {
    const std::string d = dir.path();
    auto run = [](const std::string& cmd) {
      return std::system((cmd + " > /dev/null 2>&1").c_str()) == 0;
    };
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
    ok = run("openssl req -x509" + ec + "-keyout " + d + "/ca.key -out " + d +
             "/ca.pem -days 1 -subj /CN=wtx-test-ca");
    for (const std::string n : {"coordinator", "rank"}) {
      ok = ok &&
           run("openssl req" + ec + "-keyout " + d + "/" + n + ".key -out " + d + "/" + n +
               ".csr -subj /CN=wtx-" + n) &&
           run("openssl x509 -req -in " + d + "/" + n + ".csr -CA " + d + "/ca.pem -CAkey " + d +
               "/ca.key -CAcreateserial -days 1 -out " + d + "/" + n + ".pem");
    }
    ok = ok && run("openssl req -x509" + ec + "-keyout " + d + "/rogue.key -out " + d +
                   "/rogue.pem -days 1 -subj /CN=wtx-rank");
    coordinator = {d + "/coordinator.pem", d + "/coordinator.key", d + "/ca.pem"};
    rank = {d + "/rank.pem", d + "/rank.key", d + "/ca.pem"};
    untrusted = {d + "/rogue.pem", d + "/rogue.key", d + "/rogue.pem"};
  }
};

TEST_CASE("CertificateMutualTlsCommitsAndRefusesUntrustedPeers", "[tcp][tls]") {
  if (!HaveOpensslCli()) {
    WARN("openssl CLI not installed: certificate test skipped");
    return;
  }
  TestPki pki;
  REQUIRE(pki.ok);
  TcpTransportOptions to;
  to.tls = pki.coordinator;
  Rig rig(2, 0, to);
  for (int r = 0; r < 2; ++r) {
    ParticipantOptions po;
    po.rank = r;
    po.journal_dir = rig.dir.sub("rank-" + std::to_string(r));
    po.kernel_identity = "k1";
    rig.parts.push_back(Participant::Open(po, rig.manifest).value());
  }
  auto start = [&](int r, const TlsFiles& tls) {
    RankAgentOptions ao;
    ao.coordinator_port = rig.transport->port();
    ao.rank = r;
    ao.secret = kSecret;
    ao.tls = tls;
    ao.backoff_max = milliseconds(100);
    return TcpRankAgent::Start(ao, rig.parts[r].get()).value();
  };
  rig.agents.push_back(start(0, pki.rank));
  // A rank whose certificate the CA did not sign, and one with no certificate at all (PSK),
  // never register.
  auto rogue = start(1, pki.untrusted);
  CHECK_FALSE(rig.transport->WaitForRanks({1}, milliseconds(1000)));
  CHECK(rogue->state().connections == 0);
  rogue.reset();
  auto psk = start(1, {});
  CHECK_FALSE(rig.transport->WaitForRanks({1}, milliseconds(1000)));
  CHECK(psk->state().connections == 0);
  CHECK(psk->state().last_error.message().find("TLS handshake") != std::string::npos);
  psk.reset();
  // The right certificate: a full transaction.
  rig.agents.push_back(start(1, pki.rank));
  REQUIRE(rig.transport->WaitForRanks({0, 1}, milliseconds(10000)));
  REQUIRE(rig.coord->Begin(Full("t1")).status.ok());
  for (int r = 0; r < 2; ++r) rig.WriteAll(r, 9);
  CommitOutcome o = rig.coord->Commit("t1");
  CHECK(o.decision == Decision::kCommit);
  // A raw client with an untrusted certificate gets no hello.
  RawClient raw(rig.transport->port(), kSecret, pki.untrusted);
  CHECK(raw.ReadFrame().is_null());
  // Half-set certificate options are refused with the flags named.
  TcpTransportOptions half;
  half.secret = kSecret;
  half.tls.cert = pki.coordinator.cert;
  auto bad = TcpTransport::Listen(half);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("--tls-key") != std::string::npos);
}

TEST_CASE("ExpiredOwnCertificateIsRefusedAtStartAndARefusedClientCertificateIsNamed",
          "[tcp][tls]") {
  if (!HaveOpensslCli()) {
    WARN("openssl CLI not installed: certificate test skipped");
    return;
  }
  TestPki pki;
  REQUIRE(pki.ok);
  const std::string d = pki.dir.path();
  // -days -1: notAfter one day before now.
  REQUIRE(
      std::system(("openssl x509 -req -in " + d + "/coordinator.csr -CA " + d + "/ca.pem -CAkey " +
                   d + "/ca.key -days -1 -out " + d + "/expired.pem > /dev/null 2>&1")
                      .c_str()) == 0);
  TcpTransportOptions expired;
  expired.secret = kSecret;
  expired.tls = {d + "/expired.pem", d + "/coordinator.key", d + "/ca.pem"};
  auto bad = TcpTransport::Listen(expired);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == ErrorCode::kInvalidArgument);
  CHECK(bad.status().message().find("expired.pem': expired on") != std::string::npos);
  // A rank that trusts the coordinator but whose own certificate the CA did not sign learns
  // it from the server's alert after its side of the TLS 1.3 handshake: an authentication
  // error saying so, not a crash.
  TcpTransportOptions to;
  to.tls = pki.coordinator;
  Rig rig(1, 0, to);
  ParticipantOptions po;
  po.rank = 0;
  po.journal_dir = rig.dir.sub("rank-0");
  po.kernel_identity = "k1";
  rig.parts.push_back(Participant::Open(po, rig.manifest).value());
  RankAgentOptions ao;
  ao.coordinator_port = rig.transport->port();
  ao.rank = 0;
  ao.secret = kSecret;
  ao.tls = {d + "/rogue.pem", d + "/rogue.key", d + "/ca.pem"};
  ao.backoff_max = milliseconds(100);
  auto rogue = TcpRankAgent::Start(ao, rig.parts[0].get()).value();
  CHECK_FALSE(rig.transport->WaitForRanks({0}, milliseconds(500)));
  const Status last = rogue->state().last_error;
  CHECK(last.code() == ErrorCode::kInvalidArgument);
  CHECK(last.message().find("refused this end's certificate") != std::string::npos);
}

TEST_CASE("ConcurrentPrepareOverTcpCostsOneTimeoutForThreeSilentRanks", "[tcp]") {
  // The bound is the sum of the three timeouts (a serial collection costs at least that), which
  // one timeout does not reach on a loaded machine.
  Rig rig(5, 5, {}, milliseconds(1000));
  REQUIRE(rig.coord->Begin(Full("t1")).status.ok());
  for (int r = 0; r < 5; ++r) rig.WriteAll(r, 4);
  for (int r : {1, 2, 4}) rig.agent_hooks[r]->silent = true;
  const auto t0 = std::chrono::steady_clock::now();
  CommitOutcome o = rig.coord->Commit("t1");
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= milliseconds(1000));
  CHECK(took < milliseconds(3000));
  REQUIRE(o.decision == Decision::kAbort);
  for (int r : {1, 2, 4}) CHECK(o.votes[r].kind == VoteReport::Kind::kTimeout);
  for (int r = 0; r < 5; ++r) CHECK_FALSE(rig.parts[r]->status().active_tx.has_value());
}

TEST_CASE("RankDisconnectingMidPrepareOverTcpFailsFastAndOthersAbort", "[tcp]") {
  Rig rig(3, 3, {}, milliseconds(5000));
  REQUIRE(rig.coord->Begin(Full("t1")).status.ok());
  for (int r = 0; r < 3; ++r) rig.WriteAll(r, 6);
  rig.agent_hooks[1]->silent = true;
  auto commit = std::async(std::launch::async, [&] { return rig.coord->Commit("t1"); });
  std::this_thread::sleep_for(milliseconds(200));  // the prepare is out to every rank
  const auto t0 = std::chrono::steady_clock::now();
  rig.agents[1].reset();  // rank 1's process dies: its connection closes
  CommitOutcome o = commit.get();
  CHECK(std::chrono::steady_clock::now() - t0 < milliseconds(2000));
  REQUIRE(o.decision == Decision::kAbort);
  CHECK(o.votes[1].kind == VoteReport::Kind::kCrashed);
  CHECK(o.unacknowledged == std::vector<int>{1});
  CHECK_FALSE(rig.parts[0]->status().active_tx.has_value());
  CHECK_FALSE(rig.parts[2]->status().active_tx.has_value());
}

TEST_CASE("InDoubtQueryOverTcpIsAnsweredWhileACommitWaits", "[tcp]") {
  Rig rig(2, 2, {}, milliseconds(1500));
  REQUIRE(rig.coord->Begin(Full("t1")).status.ok());
  for (int r = 0; r < 2; ++r) rig.WriteAll(r, 8);
  rig.agent_hooks[1]->silent = true;
  auto commit = std::async(std::launch::async, [&] { return rig.coord->Commit("t1"); });
  std::this_thread::sleep_for(milliseconds(200));
  // A control connection asks about another transaction while the commit waits for rank 1.
  RawClient c(rig.transport->port());
  REQUIRE(c.Handshake(kSecret, "control", -1).value("ok", false));
  const auto t0 = std::chrono::steady_clock::now();
  c.Write(net::EncodeFrame({{"id", 1}, {"m", "query_decision"}, {"p", {{"tx", "other"}}}}));
  json r = c.ReadFrame();
  CHECK(std::chrono::steady_clock::now() - t0 < milliseconds(700));
  CHECK(r.value("ok", json()).value("decision", "") == "abort");
  CommitOutcome o = commit.get();
  CHECK(o.decision == Decision::kAbort);
}

}  // namespace
}  // namespace wtx
