#include "tests/etcd/etcd_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "src/etcd/etcd_client.h"

namespace wtx::testing {

namespace {

// A port the kernel reports free on 127.0.0.1 now (etcd may still lose a race for it: Start
// retries with fresh ports).
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::string Loopback(int port) { return "http://127.0.0.1:" + std::to_string(port); }

}  // namespace

std::string EtcdBinary() {
  if (const char* forced = std::getenv("WTX_ETCD_BINARY")) {
    return ::access(forced, X_OK) == 0 ? forced : "";
  }
  if (::access("/usr/bin/etcd", X_OK) == 0) return "/usr/bin/etcd";
  const char* path = std::getenv("PATH");
  std::string rest = path ? path : "";
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string dir = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    if (dir.empty()) continue;
    const std::string candidate = dir + "/etcd";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

Status EtcdCluster::MakeCertificates() {
  const std::string d = dir_ + "/tls";
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  // A CA; a certificate for the members (127.0.0.1) and one for the client, both from it; and
  // a second CA with a client certificate of its own, which the members do not trust.
  const std::string script =
      "set -e\n"
      "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1.key; }\n"
      "ca() { key $1; openssl req -x509 -new -key $1.key -out $1.pem -days 2 -subj /CN=$1; }\n"
      "leaf() { key $1; openssl req -new -key $1.key -out $1.csr -subj /CN=$1\n"
      "  printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' "
      ">$1.ext\n"
      "  openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial -out $1.pem "
      "-days 2 -extfile $1.ext; }\n"
      "ca ca; leaf server ca; leaf client ca; ca other; leaf stranger other\n";
  {
    std::ofstream out(d + "/make.sh");
    out << script;
    if (!out) return Status::IOError("cannot write " + d + "/make.sh");
  }
  const std::string command = "cd '" + d + "' && sh make.sh >openssl.log 2>&1";
  if (std::system(command.c_str()) != 0) {
    return Status::IOError("making test certificates with openssl failed (see " + d +
                           "/openssl.log)");
  }
  client_tls_ = {d + "/client.pem", d + "/client.key", d + "/ca.pem"};
  other_ca_tls_ = {d + "/stranger.pem", d + "/stranger.key", d + "/other.pem"};
  return Status::OK();
}

Result<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(int members, bool tls) {
  if (!EtcdAvailable()) return Status::InvalidArgument("no etcd binary (/usr/bin/etcd or PATH)");
  Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::unique_ptr<EtcdCluster> c(new EtcdCluster());
    char tmpl[] = "/tmp/wtx-etcd-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return Status::IOError("mkdtemp failed");
    c->dir_ = tmpl;
    c->tls_ = tls;
    if (tls) WTX_RETURN_IF_ERROR(c->MakeCertificates());
    c->token_ = "wtx-test-" + std::to_string(::getpid()) + "-" + c->dir_.substr(14);
    std::set<int> ports;
    while (ports.size() < static_cast<size_t>(2 * members)) {
      const int port = FreeLoopbackPort();
      if (port <= 0) return Status::IOError("no free loopback port");
      ports.insert(port);
    }
    auto it = ports.begin();
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = "m" + std::to_string(i);
      m.client_port = *it++;
      m.peer_port = *it++;
      c->members_.push_back(m);
    }
    Status st;
    for (int i = 0; i < members && st.ok(); ++i) st = c->Launch(i);
    std::vector<int> all;
    for (int i = 0; i < members; ++i) all.push_back(i);
    if (st.ok()) st = c->WaitReady(all, 30000);
    if (st.ok()) return c;
    last = st;  // most likely a port taken meanwhile: the next try picks others
  }
  return last;
}

EtcdCluster::~EtcdCluster() { Stop(); }

std::vector<std::string> EtcdCluster::Args(int i) const {
  std::string initial;
  for (const Member& m : members_) {
    if (!initial.empty()) initial += ',';
    initial += m.name + "=" + Loopback(m.peer_port);
  }
  const Member& m = members_[i];
  const std::string client_url =
      (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(m.client_port);
  // clang-format off
  std::vector<std::string> args = {
      EtcdBinary(),
      "--name", m.name,
      "--data-dir", dir_ + "/" + m.name,
      "--listen-client-urls", client_url,
      "--advertise-client-urls", client_url,
      "--listen-peer-urls", Loopback(m.peer_port),
      "--initial-advertise-peer-urls", Loopback(m.peer_port),
      "--initial-cluster", initial,
      "--initial-cluster-state", "new",
      "--initial-cluster-token", token_,
      "--heartbeat-interval", "50",
      "--election-timeout", "500",
      "--logger", "zap",
      "--log-outputs", dir_ + "/" + m.name + ".log"};
  if (tls_) {
    const std::string d = dir_ + "/tls/";
    args.insert(args.end(), {"--cert-file", d + "server.pem",
                             "--key-file", d + "server.key",
                             "--trusted-ca-file", d + "ca.pem",
                             "--client-cert-auth=true"});
  }
  // clang-format on
  return args;
}

Status EtcdCluster::Launch(int i) {
  const std::vector<std::string> args = Args(i);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IOError("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
    if (::getppid() != parent) ::_exit(1);
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  members_[i].pid = pid;
  return Status::OK();
}

Status EtcdCluster::WaitReady(const std::vector<int>& members, int timeout_ms) {
  etcd::ClientOptions options;
  for (int i : members) {
    options.endpoints.push_back({"127.0.0.1", static_cast<uint16_t>(members_[i].client_port)});
  }
  options.request_timeout = std::chrono::milliseconds(1000);
  options.rounds = 1;
  options.tls = client_tls_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int i : members) {  // a member that exited (a port taken) will not come up
      int status = 0;
      if (members_[i].pid > 0 && ::waitpid(members_[i].pid, &status, WNOHANG) == members_[i].pid) {
        members_[i].pid = -1;
        return Status::IOError("etcd member " + members_[i].name + " exited during start (see " +
                               dir_ + "/" + members_[i].name + ".log)");
      }
    }
    // A put is linearizable: it needs a leader and a quorum. Each member answers for itself.
    bool all = true;
    for (size_t k = 0; k < members.size(); ++k) {
      const int i = members[k];
      etcd::ClientOptions one = options;
      one.endpoints = {options.endpoints[k]};
      auto single = etcd::Client::Open(one);
      auto put = single.ok() ? (*single)->Put("wtx-test/ready", members_[i].name, 0, "ready")
                             : Result<int64_t>(single.status());
      if (!put.ok()) {
        last = put.status();
        all = false;
        break;
      }
    }
    if (all) return Status::OK();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status(ErrorCode::kTimeout, "etcd cluster in " + dir_ + " not ready: " + last.ToString());
}

std::string EtcdCluster::url(const std::string& prefix) const {
  std::string out = "etcd://";
  for (int i = 0; i < size(); ++i) {
    if (i > 0) out += ',';
    out += endpoint(i);
  }
  return out + "/" + prefix;
}

std::string EtcdCluster::endpoint(int i) const {
  return "127.0.0.1:" + std::to_string(members_[i].client_port);
}

void EtcdCluster::Kill(int i) {
  Member& m = members_[i];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);
  int status = 0;
  ::waitpid(m.pid, &status, 0);
  m.pid = -1;
}

Status EtcdCluster::Restart(int i) {
  Kill(i);
  WTX_RETURN_IF_ERROR(Launch(i));
  return WaitReady({i}, 30000);
}

void EtcdCluster::Stop() {
  for (int i = 0; i < size(); ++i) Kill(i);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }
}

}  // namespace wtx::testing
