// NCCL vote: the vote and decision of a transaction among GPU ranks as NCCL collectives, for
// deployments where the ranks already share a communicator (rank i of the communicator is wtx
// rank i). Built only when CUDA and NCCL are found (WTX_HAVE_NCCL).
//
//   vote:     every rank prepares locally (Participant::Prepare: checks, PREPARED synced before
//             a yes), then one ncclAllGather of a fixed 128-byte record per rank {tx hash, yes,
//             wrote, error, digest}: the votes and digests of every rank, in rank order.
//   decision: rank 0 hosts the Coordinator; it decides and syncs its DECISION record (the commit
//             point, unchanged), then one ncclBroadcast of {tx hash, decision, version} from
//             rank 0; every rank applies it (Participant::Decide).
//
// Begin, Describe and every re-delivery go through the control transport (TCP): NCCL is the
// fast path of the two collective steps only. A collective that does not finish within
// options.timeout aborts the communicator (ncclCommAbort) and fails with E_TIMEOUT; a rank left
// prepared then resolves through its TcpRankAgent (QueryDecision), as after any failure.
// A "no" vote carries only its first error code over NCCL; the details stay in that rank's
// journal.
//
// Thread-safety: a NcclVoteGroup is used by one thread at a time (collectives are ordered).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wtx/participant.h"
#include "wtx/transport.h"

typedef struct ncclComm* ncclComm_t;  // as in nccl.h

namespace wtx {

inline constexpr size_t kNcclRecordBytes = 128;
using NcclRecord = std::array<uint8_t, kNcclRecordBytes>;

// Fixed-size records (host side; exposed for tests).
NcclRecord PackVoteRecord(const std::string& tx, const Vote& vote);
// A record for another transaction, or malformed, reads as a "no" vote.
Vote UnpackVoteRecord(const std::string& tx, int rank, const NcclRecord& record);
// The checkpoint version and, where it differs, the served digest (DecidedVersion).
NcclRecord PackDecisionRecord(const std::string& tx, Decision d, const DecidedVersion& version);
Result<std::pair<Decision, DecidedVersion>> UnpackDecisionRecord(const std::string& tx,
                                                                 const NcclRecord& record);

struct NcclVoteOptions {
  std::chrono::milliseconds timeout{10000};
};

class NcclVoteGroup {
 public:
  // `comm` is initialized and not owned; the group allocates its buffers and stream on the
  // current CUDA device.
  static Result<std::unique_ptr<NcclVoteGroup>> Create(ncclComm_t comm, int rank, int nranks,
                                                       NcclVoteOptions options = {});
  ~NcclVoteGroup();
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  // Collective: every rank passes its vote on `tx`; returns every rank's, in rank order.
  Result<std::vector<Vote>> ExchangeVotes(const std::string& tx, const Vote& mine);
  // Collective: rank 0's (decision, version) reaches every rank; others pass anything.
  Result<std::pair<Decision, DecidedVersion>> BroadcastDecision(const std::string& tx, Decision d,
                                                                const DecidedVersion& version);
  // A rank other than 0 in an SPMD commit: prepare, exchange, receive the decision, apply it.
  Status FollowCommit(Participant& participant, const std::string& tx);

 private:
  NcclVoteGroup() = default;
  Status Run(const char* what);  // waits for the stream with the deadline

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, nranks_ = 1;
  NcclVoteOptions options_;
  void* stream_ = nullptr;  // cudaStream_t
  uint8_t* d_send_ = nullptr;
  uint8_t* d_recv_ = nullptr;
  uint8_t* d_decision_ = nullptr;
  bool broken_ = false;
};

// The coordinator's transport at rank 0 of the group: Prepare(0) prepares `local` and runs the
// vote exchange (the prepare phase's one collective), Prepare(r) waits (up to its timeout) for
// that exchange and returns rank r's vote from it, so the coordinator's concurrent fan-out may
// ask the ranks in any order; the first Decide of a transaction
// after its vote broadcasts the decision (Decide(0) applies it locally, Decide(r) succeeds once
// the broadcast is done); everything else, and later re-deliveries, go through `control`.
class NcclVoteTransport : public Transport {
 public:
  // Not owned; `local` is rank 0's participant.
  NcclVoteTransport(Transport* control, NcclVoteGroup* group, Participant* local);
  ~NcclVoteTransport() override;
  int num_ranks() const override;
  ParticipantEndpoint* endpoint(int rank) override;

 private:
  class Endpoint;
  struct Exchange;  // the last vote exchange, shared by the endpoints (mutex-protected)
  Transport* control_;
  NcclVoteGroup* group_;
  Participant* local_;
  std::unique_ptr<Exchange> exchange_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

}  // namespace wtx
