// Transport: how the coordinator reaches participants. The 2PC protocol code talks only to
// these interfaces; the in-process transport (tests, simulator) and network transports
// implement them.
//
// A call to an unreachable rank returns E_CRASHED (known dead) or E_TIMEOUT (no answer in
// time). Thread-safety: implementations must allow calls to distinct ranks concurrently, and
// calls to one rank from several threads (the coordinator fans each phase out to every rank at
// once on its own threads, and a Recover or an in-doubt query may deliver a decision to a rank
// while another call to it runs).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "wtx/protocol.h"
#include "wtx/status.h"

namespace wtx {

class ParticipantEndpoint {
 public:
  virtual ~ParticipantEndpoint() = default;
  virtual Result<RankDescription> Describe() = 0;
  // Which of `req.sources` this rank holds is returned in `holds` (delta); checks only.
  virtual Status CheckBegin(const BeginRequest& req, std::vector<bool>* holds) = 0;
  virtual Status Begin(const BeginRequest& req) = 0;
  virtual Result<Vote> Prepare(const std::string& tx, std::chrono::milliseconds timeout) = 0;
  virtual Status Decide(const std::string& tx, Decision decision,
                        const DecidedVersion& version) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int num_ranks() const = 0;
  // REQUIRES: 0 <= rank < num_ranks(). Never null; an unreachable rank answers with errors.
  virtual ParticipantEndpoint* endpoint(int rank) = 0;
  // The leader epoch of the coordinator using this transport (include/wtx/decision_log.h):
  // a transport that crosses process boundaries stamps it on every request, and ranks refuse
  // requests from an epoch older than one they have seen (E_STALE_COORDINATOR). 0: unfenced
  // (the embedded decision log). The default ignores it (one process: nobody to fence).
  virtual void SetLeaderEpoch(int64_t epoch) { (void)epoch; }
};

}  // namespace wtx
