// Hardening of the network daemons (issue 12 items 9, 11, 12): secret files are bounded,
// long enough and private; the accept loop backs off when out of descriptors and caps the
// connections it serves; `wtx coordinator` and `wtx rank` notice SIGTERM within about a second
// in every blocking wait (startup wait, connect, reconnect backoff).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "src/conformance/tcp_simulator.h"
#include "src/net/channel.h"
#include "tests/test_util.h"
#include "wtx/tcp_transport.h"

namespace wtx {
namespace {

using std::chrono::milliseconds;
using testing::TempDir;

std::string WriteSecret(const TempDir& d, const std::string& name, const std::string& body,
                        mode_t mode) {
  const std::string path = d.sub(name);
  {
    std::ofstream o(path, std::ios::binary);
    o << body;
  }
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

TEST_CASE("PrivateSecretFileIsReadAndTrimmed", "[net][secret]") {
  TempDir d;
  auto s = net::ReadSecretFile(WriteSecret(d, "s", "  0123456789abcdef0123\n", 0600));
  REQUIRE(s.ok());
  CHECK(s.value() == "0123456789abcdef0123");
}

TEST_CASE("SecretFileThatIsADeviceIsRefusedWithoutReading", "[net][secret]") {
  auto s = net::ReadSecretFile("/dev/zero");
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("'/dev/zero': not a regular file (a device)") !=
        std::string::npos);
}

TEST_CASE("OversizedSecretFileIsRefused", "[net][secret]") {
  TempDir d;
  auto s = net::ReadSecretFile(
      WriteSecret(d, "big", std::string(net::kMaxSecretFileBytes + 1, 'k'), 0600));
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("more than the limit of 4096") != std::string::npos);
}

TEST_CASE("ShortSecretIsRefused", "[net][secret]") {
  TempDir d;
  for (const std::string body : {"x", "0123456789abcde", "   \n"}) {
    auto s = net::ReadSecretFile(WriteSecret(d, "short", body, 0600));
    INFO(body);
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == ErrorCode::kInvalidArgument);
  }
  auto s = net::ReadSecretFile(WriteSecret(d, "one", "x", 0600));
  CHECK(s.status().message().find("1-byte secret; at least 16 bytes") != std::string::npos);
}

TEST_CASE("SecretFileReadableByOthersIsRefused", "[net][secret]") {
  TempDir d;
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    auto s = net::ReadSecretFile(WriteSecret(d, "open", "0123456789abcdef0123", mode));
    INFO(mode);
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().message().find("accessible by group or others") != std::string::npos);
    CHECK(s.status().message().find("chmod 600") != std::string::npos);
  }
  CHECK_FALSE(net::ReadSecretFile(d.sub("missing")).ok());
}

int ConnectLoopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// True when the peer closes the connection within `timeout` (a server waiting for our TLS
// ClientHello keeps it open).
bool ClosedWithin(int fd, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char c[256];
    if (::recv(fd, c, sizeof(c), 0) <= 0) return true;
  }
}

TEST_CASE("ConnectionsBeyondTheCapAreRefused", "[net][tcp]") {
  TcpTransportOptions to;
  to.secret = "correct horse battery staple";
  to.num_ranks = 1;
  to.max_connections = 2;
  to.handshake_timeout = milliseconds(20000);
  auto t = TcpTransport::Listen(to).value();
  // Two connections are served: the server waits for their TLS handshakes.
  const int a = ConnectLoopback(t->port()), b = ConnectLoopback(t->port());
  CHECK_FALSE(ClosedWithin(a, milliseconds(500)));
  CHECK_FALSE(ClosedWithin(b, milliseconds(100)));
  // The third is over the cap: closed at once.
  const int c = ConnectLoopback(t->port());
  CHECK(ClosedWithin(c, milliseconds(5000)));
  ::close(c);
  // A slot frees when a connection ends; the next connection is served.
  ::close(a);
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    const int d = ConnectLoopback(t->port());
    served = !ClosedWithin(d, milliseconds(200));
    ::close(d);
  }
  CHECK(served);
  ::close(b);
}

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

TEST_CASE("AcceptBacksOffWhenOutOfDescriptors", "[net][tcp]") {
  TcpTransportOptions to;
  to.secret = "correct horse battery staple";
  to.num_ranks = 1;
  auto t = TcpTransport::Listen(to).value();
  // A low descriptor limit for this test, then every descriptor but one taken: the one left
  // makes a client socket, and the server cannot accept its connection (EMFILE).
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(old.rlim_cur, 512);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> hog;
  for (;;) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    hog.push_back(fd);
  }
  REQUIRE(!hog.empty());
  ::close(hog.back());
  hog.pop_back();
  const int pending = ConnectLoopback(t->port());
  // Accepting now fails at once; without a backoff the I/O thread would spin on it.
  const double cpu0 = CpuSeconds();
  std::this_thread::sleep_for(milliseconds(1000));
  const double cpu = CpuSeconds() - cpu0;
  for (int fd : hog) ::close(fd);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &old) == 0);
  CHECK(cpu < 0.3);
  // With descriptors back, the waiting connection is accepted (after at most one backoff): it
  // is not TLS, so the server then refuses and closes it.
  const char junk[] = "not a TLS ClientHello\n";
  REQUIRE(::send(pending, junk, sizeof(junk), MSG_NOSIGNAL) > 0);
  CHECK(ClosedWithin(pending, milliseconds(5000)));
  ::close(pending);
}

// `wtx coordinator` / `wtx rank` children, stopped with SIGTERM; returns the seconds they took
// to exit (or a large number when they did not within 10 s).
double SecondsToExitOnSigterm(sim::ChildProcess& child) {
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(child.pid(), SIGTERM);
  while (child.Alive()) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) return 99;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_CASE("CoordinatorStopsPromptlyOnSigtermDuringStartupWait", "[net][signals]") {
  TempDir d;
  const std::string secret = WriteSecret(d, "secret", "0123456789abcdef0123456789", 0600);
  sim::ChildProcess coord;
  nlohmann::json ready;
  REQUIRE(coord
              .Spawn({WTX_BINARY, "coordinator", "--listen", "127.0.0.1:0", "--journal",
                      d.sub("coordinator"), "--secret-file", secret, "--ranks", "3",
                      "--startup-wait-ms", "60000"},
                     milliseconds(20000), &ready)
              .ok());
  std::this_thread::sleep_for(milliseconds(200));  // well inside the startup wait
  CHECK(SecondsToExitOnSigterm(coord) < 1.5);
}

// A listener that accepts (through its backlog) but never speaks: a connect hangs in the
// handshake.
struct MuteListener {
  int fd = -1;
  uint16_t port = 0;
  MuteListener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    socklen_t n = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    port = ntohs(a.sin_port);
  }
  ~MuteListener() { ::close(fd); }
};

void SpawnRank(sim::ChildProcess& rank, const TempDir& d, uint16_t port,
               const std::string& backoff_ms) {
  const std::string secret = WriteSecret(d, "secret", "0123456789abcdef0123456789", 0600);
  {
    std::ofstream m(d.sub("manifest.json"));
    m << testing::SmallManifestJson().dump();
  }
  nlohmann::json ready;
  REQUIRE(rank.Spawn({WTX_BINARY, "rank", "--connect", "127.0.0.1:" + std::to_string(port),
                      "--rank", "0", "--journal", d.sub("rank-0"), "--secret-file", secret,
                      "--manifest", d.sub("manifest.json"), "--backoff-max-ms", backoff_ms},
                     milliseconds(20000), &ready)
              .ok());
}

TEST_CASE("RankStopsPromptlyOnSigtermWhileConnecting", "[net][signals]") {
  TempDir d;
  MuteListener mute;
  sim::ChildProcess rank;
  SpawnRank(rank, d, mute.port, "1000");
  std::this_thread::sleep_for(milliseconds(300));  // inside its 8 s connect + handshake wait
  CHECK(SecondsToExitOnSigterm(rank) < 1.5);
}

TEST_CASE("RankStopsPromptlyOnSigtermDuringReconnectBackoff", "[net][signals]") {
  TempDir d;
  uint16_t dead_port;
  {
    MuteListener gone;  // a port nobody listens on once this closes
    dead_port = gone.port;
  }
  sim::ChildProcess rank;
  SpawnRank(rank, d, dead_port, "60000");
  std::this_thread::sleep_for(milliseconds(1500));  // several refusals: long backoffs now
  CHECK(SecondsToExitOnSigterm(rank) < 1.5);
}

}  // namespace
}  // namespace wtx
