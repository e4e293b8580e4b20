// TcpTransport: the coordinator's side of the TCP transport (Boost.Asio). It listens (on
// 127.0.0.1 unless told otherwise); every rank process connects to it over TLS 1.3 (a PSK
// derived from the shared secret, or certificates: options.tls), then proves the shared secret
// inside TLS (HMAC-SHA-256 challenge-response, both directions) and registers its rank id;
// the transport maps rank -> connection and the coordinator's calls on endpoint(r) become
// request frames on that connection. The wire protocol is in docs/protocol.md.
//
// Contract:
//  * A rank with no live connection answers E_CRASHED ("rank N is down"); a call without an
//    answer in time is E_TIMEOUT ("rank N did not answer"). Prepare waits for the timeout the
//    coordinator passes; every other call for options.request_timeout.
//  * Refused, and logged to stderr (rate-limited), without affecting other connections: a
//    failed TLS handshake (wrong PSK, untrusted or missing certificate), a wrong or missing
//    secret, a handshake that does not finish in time, connections beyond max_connections, a frame
//    above max_frame_bytes (4 KiB before authentication), a malformed frame, a rank id outside [0,
//    num_ranks), a second live connection for a registered rank, and any frame or answer in which a
//    rank's connection speaks for another rank id (the connection is closed).
//  * Ranks ask the coordinator QueryDecision(tx) when in doubt; the transport answers through
//    the oracle set by SetDecisionOracle (until then: E_CRASHED "the coordinator is
//    recovering", and ranks retry).
//  * Connections with role "control" (a driver such as `wtx sim --transport tcp` or a trainer)
//    are served by the control handler.
//
// Thread-safety: every method is safe from any thread; calls to distinct ranks run
// concurrently. Callbacks run on the transport's threads and must not block for long.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "wtx/participant.h"
#include "wtx/status.h"
#include "wtx/tls_files.h"
#include "wtx/transport.h"

namespace wtx {

struct TcpTransportOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t port = 0;   // 0: a free port, see port()
  std::string secret;  // REQUIRED: non-empty, shared with every rank
  TlsFiles tls;        // empty: TLS 1.3 with a PSK derived from `secret`
  int num_ranks = 1;
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds handshake_timeout{5000};
  size_t max_frame_bytes = size_t{64} << 20;
  int worker_threads = 4;
  // Connections (handshaking or registered) served at once; more are refused with a
  // rate-limited log line. Accept errors (out of descriptors) back off 10 ms .. 1 s.
  int max_connections = 1024;
  std::string log_tag = "coordinator";
};

// Serves a request from a control connection: a result, an error, or nullopt for no answer.
using ControlHandler = std::function<std::optional<Result<nlohmann::json>>(
    const std::string& method, const nlohmann::json& params)>;

class TcpTransport : public Transport {
 public:
  static Result<std::unique_ptr<TcpTransport>> Listen(const TcpTransportOptions& options);
  ~TcpTransport() override;

  uint16_t port() const;
  // Stops listening and closes every connection: pending and later calls fail at once
  // (E_CRASHED), WaitForRanks returns false at once. Idempotent; the destructor calls it.
  void Shutdown();
  // Not owned; null: queries are refused as "recovering".
  void SetDecisionOracle(DecisionOracle* oracle);
  void SetControlHandler(ControlHandler handler);
  // Called (on the I/O thread) each time a rank registers.
  void SetOnRankRegistered(std::function<void(int rank)> fn);
  std::vector<int> ConnectedRanks() const;
  // True when every rank in `ranks` is connected before `timeout`.
  bool WaitForRanks(const std::vector<int>& ranks, std::chrono::milliseconds timeout) const;

  int num_ranks() const override;
  ParticipantEndpoint* endpoint(int rank) override;
  // Stamped as "epoch" on every request to a rank from now on.
  void SetLeaderEpoch(int64_t epoch) override;

  class Impl;

 private:
  explicit TcpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace wtx
