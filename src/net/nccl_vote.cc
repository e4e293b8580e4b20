// NCCL collectives for the vote and the decision (see wtx/nccl_vote.h).
#include "wtx/nccl_vote.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "src/net/crypto.h"
#include "src/util/thread_annotations.h"

namespace wtx {

namespace {

// Record layout (little-endian, 128 bytes):
//   [0]  magic 'W'   [1] kind (1 vote, 2 decision)   [2] yes / decision   [3] wrote
//   [4..8)  error code (vote)   [8..24) SHA-256(tx) prefix
//   [24] length, [25..25+len) the checkpoint digest or version, ASCII (at most 48 bytes)
//   [73] length, [74..74+len) the served digest, ASCII (at most 48 bytes; 0: the first's)
constexpr uint8_t kMagic = 'W';
constexpr size_t kTextMax = 48;
constexpr size_t kText[2] = {24, 73};

void PutTx(NcclRecord& r, const std::string& tx) {
  const auto h = net::Sha256Of(tx);
  std::memcpy(r.data() + 8, h.data(), 16);
}
bool SameTx(const NcclRecord& r, const std::string& tx) {
  const auto h = net::Sha256Of(tx);
  return std::memcmp(r.data() + 8, h.data(), 16) == 0;
}
void PutText(NcclRecord& r, int slot, const std::string& s) {
  const size_t n = std::min(s.size(), kTextMax);
  r[kText[slot]] = static_cast<uint8_t>(n);
  std::memcpy(r.data() + kText[slot] + 1, s.data(), n);
}
std::string GetText(const NcclRecord& r, int slot) {
  const size_t n = std::min<size_t>(r[kText[slot]], kTextMax);
  return std::string(reinterpret_cast<const char*>(r.data() + kText[slot] + 1), n);
}

Status CudaErr(const char* what, cudaError_t e) {
  return Status::IOError(std::string(what) + ": " + cudaGetErrorString(e));
}
Status NcclErr(const char* what, ncclResult_t e) {
  return Status::IOError(std::string(what) + ": " + ncclGetErrorString(e));
}

}  // namespace

NcclRecord PackVoteRecord(const std::string& tx, const Vote& v) {
  NcclRecord r{};
  r[0] = kMagic;
  r[1] = 1;
  r[2] = v.yes ? 1 : 0;
  r[3] = v.wrote ? 1 : 0;
  const int32_t e = static_cast<int32_t>(v.error);
  std::memcpy(r.data() + 4, &e, 4);
  PutTx(r, tx);
  PutText(r, 0, v.digest);
  if (v.served() != v.digest) PutText(r, 1, v.served());
  return r;
}

Vote UnpackVoteRecord(const std::string& tx, int rank, const NcclRecord& r) {
  Vote v;
  v.rank = rank;
  v.tx = tx;
  if (r[0] != kMagic || r[1] != 1 || !SameTx(r, tx)) {
    v.yes = false;
    v.error = ErrorCode::kNoTx;
    v.errors = {v.error};
    v.message = "rank " + std::to_string(rank) + " voted on another transaction";
    return v;
  }
  v.yes = r[2] != 0;
  v.wrote = r[3] != 0;
  int32_t e;
  std::memcpy(&e, r.data() + 4, 4);
  v.error = static_cast<ErrorCode>(e);
  if (!v.yes) {
    v.errors = {v.error};
    v.message = "rank " + std::to_string(rank) + " voted no (" +
                std::string(ErrorCodeName(v.error)) + "); details in its journal";
  }
  v.digest = GetText(r, 0);
  v.served_digest = GetText(r, 1);
  if (v.served_digest.empty()) v.served_digest = v.digest;
  return v;
}

NcclRecord PackDecisionRecord(const std::string& tx, Decision d, const DecidedVersion& version) {
  NcclRecord r{};
  r[0] = kMagic;
  r[1] = 2;
  r[2] = static_cast<uint8_t>(d);
  PutTx(r, tx);
  PutText(r, 0, version.version);
  if (version.served() != version.version) PutText(r, 1, version.served());
  return r;
}

Result<std::pair<Decision, DecidedVersion>> UnpackDecisionRecord(const std::string& tx,
                                                                 const NcclRecord& r) {
  if (r[0] != kMagic || r[1] != 2 || !SameTx(r, tx) || r[2] > 2) {
    return Status(ErrorCode::kNoTx, "the broadcast decision is not for '" + tx + "'");
  }
  return std::make_pair(static_cast<Decision>(r[2]), DecidedVersion{GetText(r, 0), GetText(r, 1)});
}

Result<std::unique_ptr<NcclVoteGroup>> NcclVoteGroup::Create(ncclComm_t comm, int rank, int nranks,
                                                             NcclVoteOptions options) {
  if (!comm || rank < 0 || rank >= nranks) return Status::InvalidArgument("bad NCCL group");
  std::unique_ptr<NcclVoteGroup> g(new NcclVoteGroup());
  g->comm_ = comm;
  g->rank_ = rank;
  g->nranks_ = nranks;
  g->options_ = options;
  cudaStream_t s;
  if (auto e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) {
    return CudaErr("cudaStreamCreate", e);
  }
  g->stream_ = s;
  if (auto e = cudaMalloc(&g->d_send_, kNcclRecordBytes); e != cudaSuccess) {
    return CudaErr("cudaMalloc", e);
  }
  if (auto e = cudaMalloc(&g->d_recv_, kNcclRecordBytes * nranks); e != cudaSuccess) {
    return CudaErr("cudaMalloc", e);
  }
  if (auto e = cudaMalloc(&g->d_decision_, kNcclRecordBytes); e != cudaSuccess) {
    return CudaErr("cudaMalloc", e);
  }
  return g;
}

NcclVoteGroup::~NcclVoteGroup() {
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaFree(d_send_);
  cudaFree(d_recv_);
  cudaFree(d_decision_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status NcclVoteGroup::Run(const char* what) {
  auto s = static_cast<cudaStream_t>(stream_);
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return Status::OK();
    if (e != cudaErrorNotReady) return CudaErr(what, e);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(comm_);
      broken_ = true;
      return NcclErr(what, async);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      // A peer is gone or stuck: abort so nothing waits forever; the caller falls back on TCP.
      ncclCommAbort(comm_);
      broken_ = true;
      return Status(ErrorCode::kTimeout, std::string(what) + ": no completion within " +
                                             std::to_string(options_.timeout.count()) +
                                             " ms; NCCL communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Result<std::vector<Vote>> NcclVoteGroup::ExchangeVotes(const std::string& tx, const Vote& mine) {
  if (broken_) return Status(ErrorCode::kCrashed, "the NCCL communicator was aborted");
  auto s = static_cast<cudaStream_t>(stream_);
  const NcclRecord rec = PackVoteRecord(tx, mine);
  std::vector<NcclRecord> all(nranks_);
  if (auto e = cudaMemcpyAsync(d_send_, rec.data(), kNcclRecordBytes, cudaMemcpyHostToDevice, s);
      e != cudaSuccess) {
    return CudaErr("vote upload", e);
  }
  if (auto e = ncclAllGather(d_send_, d_recv_, kNcclRecordBytes, ncclUint8, comm_, s);
      e != ncclSuccess) {
    return NcclErr("ncclAllGather", e);
  }
  if (auto e = cudaMemcpyAsync(all.data(), d_recv_, kNcclRecordBytes * nranks_,
                               cudaMemcpyDeviceToHost, s);
      e != cudaSuccess) {
    return CudaErr("vote download", e);
  }
  WTX_RETURN_IF_ERROR(Run("vote allgather"));
  std::vector<Vote> votes;
  votes.reserve(nranks_);
  for (int r = 0; r < nranks_; ++r) votes.push_back(UnpackVoteRecord(tx, r, all[r]));
  return votes;
}

Result<std::pair<Decision, DecidedVersion>> NcclVoteGroup::BroadcastDecision(
    const std::string& tx, Decision d, const DecidedVersion& version) {
  if (broken_) return Status(ErrorCode::kCrashed, "the NCCL communicator was aborted");
  auto s = static_cast<cudaStream_t>(stream_);
  NcclRecord rec = PackDecisionRecord(tx, d, version);
  if (rank_ == 0) {
    if (auto e =
            cudaMemcpyAsync(d_decision_, rec.data(), kNcclRecordBytes, cudaMemcpyHostToDevice, s);
        e != cudaSuccess) {
      return CudaErr("decision upload", e);
    }
  }
  if (auto e = ncclBroadcast(d_decision_, d_decision_, kNcclRecordBytes, ncclUint8, 0, comm_, s);
      e != ncclSuccess) {
    return NcclErr("ncclBroadcast", e);
  }
  if (auto e =
          cudaMemcpyAsync(rec.data(), d_decision_, kNcclRecordBytes, cudaMemcpyDeviceToHost, s);
      e != cudaSuccess) {
    return CudaErr("decision download", e);
  }
  WTX_RETURN_IF_ERROR(Run("decision broadcast"));
  return UnpackDecisionRecord(tx, rec);
}

Status NcclVoteGroup::FollowCommit(Participant& p, const std::string& tx) {
  auto v = p.Prepare(tx);
  Vote mine;
  if (v.ok()) {
    mine = v.value();
  } else {
    mine.rank = rank_;
    mine.tx = tx;
    mine.error = v.status().code();
  }
  WTX_ASSIGN_OR_RETURN(votes, ExchangeVotes(tx, mine));
  (void)votes;
  WTX_ASSIGN_OR_RETURN(d, BroadcastDecision(tx, Decision::kAbort, ""));
  return p.Decide(tx, d.first, d.second);
}

// ---------------------------------------------------------------------------------------------

struct NcclVoteTransport::Exchange {
  std::mutex mu;
  std::condition_variable done;          // an exchange finished (voted_tx or failed_tx set)
  std::string failed_tx GUARDED_BY(mu);  // the last exchange failed, for this transaction
  std::string voted_tx GUARDED_BY(mu);   // the transaction of the last exchange
  std::vector<Vote> votes GUARDED_BY(mu);
  std::string broadcast_tx GUARDED_BY(mu);  // decision broadcast done for this transaction
};

class NcclVoteTransport::Endpoint : public ParticipantEndpoint {
 public:
  Endpoint(NcclVoteTransport* t, int rank) : t_(t), rank_(rank) {}
  Result<RankDescription> Describe() override { return control()->Describe(); }
  Status CheckBegin(const BeginRequest& req, std::vector<bool>* holds) override {
    return control()->CheckBegin(req, holds);
  }
  Status Begin(const BeginRequest& req) override { return control()->Begin(req); }

  Result<Vote> Prepare(const std::string& tx, std::chrono::milliseconds timeout) override {
    Exchange& x = *t_->exchange_;
    std::unique_lock<std::mutex> l(x.mu);
    if (rank_ == 0) {
      auto v = t_->local_->Prepare(tx);
      Vote mine;
      if (v.ok()) {
        mine = v.value();
      } else {
        mine.rank = 0;
        mine.tx = tx;
        mine.error = v.status().code();
      }
      auto all = t_->group_->ExchangeVotes(tx, mine);
      if (!all.ok()) {
        x.failed_tx = tx;
        x.done.notify_all();
        return all.status();
      }
      x.voted_tx = tx;
      x.failed_tx.clear();
      x.votes = std::move(all).value();
      x.done.notify_all();
      if (!v.ok()) return v.status();
      return x.votes[0];
    }
    // Rank 0's Prepare runs the exchange, possibly after this call began (the coordinator asks
    // every rank at once).
    x.done.wait_for(l, timeout, [&] { return x.voted_tx == tx || x.failed_tx == tx; });
    if (x.voted_tx != tx || rank_ >= static_cast<int>(x.votes.size())) {
      return Status(ErrorCode::kTimeout, "rank " + std::to_string(rank_) + " did not answer");
    }
    return x.votes[rank_];
  }

  Status Decide(const std::string& tx, Decision d, const DecidedVersion& version) override {
    Exchange& x = *t_->exchange_;
    std::unique_lock<std::mutex> l(x.mu);
    if (x.voted_tx == tx && x.broadcast_tx != tx) {
      // The first delivery after the vote: one broadcast tells every rank.
      auto b = t_->group_->BroadcastDecision(tx, d, version);
      if (!b.ok()) {
        x.voted_tx.clear();
        l.unlock();
        return rank_ == 0 ? t_->local_->Decide(tx, d, version) : control()->Decide(tx, d, version);
      }
      x.broadcast_tx = tx;
    }
    if (x.broadcast_tx == tx) {
      l.unlock();
      if (rank_ == 0) return t_->local_->Decide(tx, d, version);
      return Status::OK();  // the follower applied the broadcast decision
    }
    l.unlock();
    return control()->Decide(tx, d, version);
  }

 private:
  ParticipantEndpoint* control() { return t_->control_->endpoint(rank_); }
  NcclVoteTransport* t_;
  int rank_;
};

NcclVoteTransport::NcclVoteTransport(Transport* control, NcclVoteGroup* group, Participant* local)
    : control_(control), group_(group), local_(local), exchange_(std::make_unique<Exchange>()) {
  for (int r = 0; r < control->num_ranks(); ++r) {
    endpoints_.push_back(std::make_unique<Endpoint>(this, r));
  }
}

NcclVoteTransport::~NcclVoteTransport() = default;
int NcclVoteTransport::num_ranks() const { return control_->num_ranks(); }
ParticipantEndpoint* NcclVoteTransport::endpoint(int rank) { return endpoints_.at(rank).get(); }

}  // namespace wtx
