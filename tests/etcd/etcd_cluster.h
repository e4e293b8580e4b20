// EtcdCluster: a real etcd cluster (the etcd binary, 3 members by default) on free loopback
// ports in a fresh temporary folder, for the decision log's tests. Short election timeouts
// (heartbeat 50 ms, election 500 ms) keep leader changes fast. The members are child processes
// killed with SIGKILL by pid (Kill, Stop, the destructor, and the kernel when this process
// dies first: PR_SET_PDEATHSIG); the folder is removed by Stop and the destructor.
//
// Tests that need it check EtcdAvailable() first; etcd_test_main.cc makes a test executable
// exit 77 (reported by CTest as skipped) where no etcd binary is installed.
//
// Thread-safety: none; one thread drives a cluster (the decision log under test is what the
// tests use from several threads).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "wtx/status.h"
#include "wtx/tls_files.h"

namespace wtx::testing {

// The etcd binary: $WTX_ETCD_BINARY when set (empty or not executable: none), else
// /usr/bin/etcd, else `etcd` on PATH; empty when there is none.
std::string EtcdBinary();
inline bool EtcdAvailable() { return !EtcdBinary().empty(); }

class EtcdCluster {
 public:
  // Starts `members` members and waits (up to 30 s) until the cluster acknowledges a
  // linearizable write. Ports that turn out to be taken are picked again (3 tries).
  // REQUIRES: EtcdAvailable().
  // tls: the members serve HTTPS with a certificate for 127.0.0.1 from a CA made for the
  // cluster (with the openssl command) and require a client certificate from the same CA;
  // client_tls() gives the files.
  static Result<std::unique_ptr<EtcdCluster>> Start(int members = 3, bool tls = false);
  ~EtcdCluster();  // Stop()

  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "etcd://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/prefix".
  std::string url(const std::string& prefix) const;
  // Member i's client address, "127.0.0.1:p".
  std::string endpoint(int i) const;
  int size() const { return static_cast<int>(members_.size()); }
  // The client's CA, certificate and key (empty unless started with tls). Another CA and a
  // certificate from it, which the members do not trust: other_ca_tls().
  const TlsFiles& client_tls() const { return client_tls_; }
  const TlsFiles& other_ca_tls() const { return other_ca_tls_; }

  // SIGKILLs member i (and reaps it). No-op when it is not running.
  void Kill(int i);
  // Starts member i again on its data folder and ports, and waits (up to 30 s) until it
  // answers a linearizable read.
  Status Restart(int i);
  // Kills every member and removes the folder. Idempotent.
  void Stop();

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };

  EtcdCluster() = default;
  Status Launch(int i);                                               // forks and execs member i
  Status WaitReady(const std::vector<int>& members, int timeout_ms);  // a write through them
  std::vector<std::string> Args(int i) const;

  Status MakeCertificates();  // in dir_/tls, with the openssl command

  std::string dir_;
  bool tls_ = false;
  TlsFiles client_tls_;
  TlsFiles other_ca_tls_;
  std::string token_;
  std::vector<Member> members_;
};

}  // namespace wtx::testing
