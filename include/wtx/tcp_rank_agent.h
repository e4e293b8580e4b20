// TcpRankAgent: the participant's side of the TCP transport, embedded in an inference rank.
// It connects to the coordinator's TcpTransport over TLS 1.3 (PSK from the shared secret, or
// certificates: options.tls), authenticates with the shared secret inside it (HMAC-SHA-256
// challenge-response; the coordinator must prove the secret too), registers its
// rank id, and serves the coordinator's Describe / CheckBegin / Begin / Prepare / Decide
// requests against the local Participant. After every (re)connection it resolves an in-doubt
// transaction by asking the coordinator QueryDecision over the same connection, retrying
// while the coordinator cannot answer. A lost connection is re-established with exponential
// backoff (backoff_initial doubling up to backoff_max, with jitter), trying the coordinators
// in turn: coordinator_host:coordinator_port, then each of `more_coordinators` (the standbys
// of a shared decision log).
//
// Leader epochs: requests of a coordinator that leads a shared decision log carry its epoch;
// the agent refuses requests from an epoch older than the newest it has seen
// (E_STALE_COORDINATOR naming both).
//
// With standbys or a decision log, every connection attempt (connect and TLS handshake) and
// every call the agent makes is bounded by three heartbeats, so that a paused coordinator (whose
// kernel still accepts connections) holds the rank no longer than a missed ping.
//
// With `decision_log` set, a rank resolves without any coordinator: a watcher thread, beside
// the connection attempts, reads the log every half heartbeat while no coordinator serves the
// rank (none connected, or a call unanswered for a heartbeat): who leads (a coordinator whose
// holder name ends in one of the rank's addresses is dialed next), and the transaction it holds
// (prepared and in doubt, or active and unprepared) is looked up in the log; a logged decision is
// applied, and when there is none and no coordinator leads (its lease expired), the rank writes an
// abort by the log's exactly-once write (it can win only if no coordinator decided) and applies the
// decision that holds. While a coordinator leads, the rank waits for it. An unreachable log (no
// quorum) decides nothing: the rank stays in doubt and does not serve.
//
// The engine keeps writing bytes through the Participant directly; the agent only carries the
// protocol. Requests are served one at a time, in arrival order.
//
// Thread-safety: every method is safe from any thread. The agent runs one supervisor thread,
// one I/O thread and one handler thread, and with a decision log one log watcher thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <utility>
#include <vector>

#include "wtx/decision_log.h"
#include "wtx/participant.h"
#include "wtx/status.h"
#include "wtx/tls_files.h"

namespace wtx {

struct RankAgentOptions {
  std::string coordinator_host = "127.0.0.1";
  uint16_t coordinator_port = 0;
  int rank = 0;
  std::string secret;  // REQUIRED: non-empty
  TlsFiles tls;        // empty: TLS 1.3 with a PSK derived from `secret`
  std::chrono::milliseconds request_timeout{10000};  // its own QueryDecision calls
  std::chrono::milliseconds connect_timeout{3000};
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds backoff_initial{20};
  std::chrono::milliseconds backoff_max{1000};
  size_t max_frame_bytes = size_t{64} << 20;
  std::string log_tag;  // default "rank-N"
  // With standbys or a decision log: how often the coordinator is pinged (three missed
  // heartbeats move the agent to the next coordinator) and an in-doubt transaction re-asked.
  std::chrono::milliseconds heartbeat{1000};
  // Tried after coordinator_host:coordinator_port, in order (HOST, PORT).
  std::vector<std::pair<std::string, uint16_t>> more_coordinators;
  // The shared decision log of the coordinators (OpenDecisionLog); null: ask a coordinator only.
  std::shared_ptr<DecisionLog> decision_log;
};

struct RankAgentState {
  bool connected = false;
  // In-doubt resolution finished on the current connection; resolution is its result.
  bool resolved = false;
  Status resolution;
  int64_t connections = 0;  // successful handshakes so far
  Status last_error;        // of the last failed connection attempt
  std::string coordinator;  // HOST:PORT of the current (or last) connection
  int64_t epoch = 0;        // the newest leader epoch heard
  // Transactions resolved from the decision log without a coordinator, and the last outcome
  // of such an attempt (OK, or why it could not resolve yet).
  int64_t resolved_from_log = 0;
  Status log_resolution;
};

class TcpRankAgent {
 public:
  // Starts connecting in the background. REQUIRES: `participant` outlives the agent.
  static Result<std::unique_ptr<TcpRankAgent>> Start(const RankAgentOptions& options,
                                                     Participant* participant);
  ~TcpRankAgent();  // disconnects and joins its threads

  RankAgentState state() const;
  // Waits until connected with in-doubt resolution done; false on timeout.
  bool WaitResolved(std::chrono::milliseconds timeout, RankAgentState* state = nullptr) const;
  // The implementation, private to the library; use Start().
  class Impl;
  explicit TcpRankAgent(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace wtx
