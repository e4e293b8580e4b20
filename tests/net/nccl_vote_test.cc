// The NCCL vote: record packing (CPU), and a coordinator whose vote and decision travel as
// NCCL collectives over every visible GPU (one rank per GPU, in one process). Without a GPU the
// GPU case reports a warning and passes; tools/nccl-check.sh runs it on a GPU machine.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>
#include <nccl.h>

#include <thread>

#include "tests/test_util.h"
#include "wtx/nccl_vote.h"

namespace wtx {
namespace {

using testing::TempDir;

TEST_CASE("NcclVoteRecordsRoundTrip", "[nccl]") {
  Vote v;
  v.rank = 2;
  v.yes = true;
  v.wrote = true;
  v.digest = "0123456789abcdef0123456789abcdef";
  Vote back = UnpackVoteRecord("t1", 2, PackVoteRecord("t1", v));
  CHECK(back.yes);
  CHECK(back.wrote);
  CHECK(back.digest == v.digest);
  CHECK(back.served_digest == v.digest);  // one digest: the served bytes are the checkpoint's
  v.served_digest = "fedcba9876543210fedcba9876543210";
  back = UnpackVoteRecord("t1", 2, PackVoteRecord("t1", v));
  CHECK(back.digest == v.digest);
  CHECK(back.served_digest == v.served_digest);
  // A record for another transaction is a no.
  CHECK_FALSE(UnpackVoteRecord("t2", 2, PackVoteRecord("t1", v)).yes);
  Vote no;
  no.error = ErrorCode::kCoverageIncomplete;
  Vote nb = UnpackVoteRecord("t1", 1, PackVoteRecord("t1", no));
  CHECK_FALSE(nb.yes);
  CHECK(nb.error == ErrorCode::kCoverageIncomplete);
  auto d = UnpackDecisionRecord("t1", PackDecisionRecord("t1", Decision::kCommit, v.digest));
  REQUIRE(d.ok());
  CHECK(d->first == Decision::kCommit);
  CHECK(d->second.version == v.digest);
  CHECK(d->second.served() == v.digest);
  d = UnpackDecisionRecord(
      "t1", PackDecisionRecord("t1", Decision::kCommit, DecidedVersion{v.digest, v.served_digest}));
  REQUIRE(d.ok());
  CHECK(d->second.version == v.digest);
  CHECK(d->second.served() == v.served_digest);
  CHECK_FALSE(UnpackDecisionRecord("t9", PackDecisionRecord("t1", Decision::kCommit, "")).ok());
}

void WriteAll(Participant& p, uint32_t seed, bool skip_first = false) {
  const Manifest& m = p.manifest();
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<WritePiece> pieces;
  for (size_t i = skip_first ? 1 : 0; i < m.params().size(); ++i) {
    const auto& ps = m.params()[i];
    bufs.push_back(testing::Pattern(m, ps.name, WholeBox(ps.shape), seed));
    WritePiece w;
    w.param = ps.name;
    w.data = bufs.back().data();
    w.bytes = bufs.back().size();
    pieces.push_back(w);
  }
  REQUIRE(p.Write(pieces).ok());
  REQUIRE(p.Refresh("*").ok());
}

TEST_CASE("NcclVoteCommitsAcrossGpus", "[nccl][gpu]") {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    WARN("no CUDA device: the NCCL collective path was not exercised");
    return;
  }
  const int n = gpus;
  std::vector<ncclComm_t> comms(n);
  std::vector<int> devs(n);
  for (int i = 0; i < n; ++i) devs[i] = i;
  REQUIRE(ncclCommInitAll(comms.data(), n, devs.data()) == ncclSuccess);

  TempDir dir;
  auto manifest = testing::SmallManifest();
  std::vector<std::unique_ptr<Participant>> parts;
  InProcTransport control(n);
  for (int r = 0; r < n; ++r) {
    ParticipantOptions po;
    po.rank = r;
    po.journal_dir = dir.sub("rank-" + std::to_string(r));
    po.kernel_identity = "k1";
    parts.push_back(Participant::Open(po, manifest).value());
    control.SetParticipant(r, parts.back().get());
  }
  std::vector<std::unique_ptr<NcclVoteGroup>> groups(n);
  for (int r = 0; r < n; ++r) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    auto g = NcclVoteGroup::Create(comms[r], r, n);
    REQUIRE(g.ok());
    groups[r] = std::move(g).value();
  }
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  NcclVoteTransport nccl(&control, groups[0].get(), parts[0].get());
  CoordinatorOptions co;
  co.journal_dir = dir.sub("coordinator");
  auto coord = Coordinator::Open(co, &nccl).value();

  // The reference: the same bytes through the in-process transport.
  TempDir ref_dir;
  std::vector<std::unique_ptr<Participant>> ref_parts;
  InProcTransport ref(n);
  for (int r = 0; r < n; ++r) {
    ParticipantOptions po;
    po.rank = r;
    po.journal_dir = ref_dir.sub("rank-" + std::to_string(r));
    po.kernel_identity = "k1";
    ref_parts.push_back(Participant::Open(po, manifest).value());
    ref.SetParticipant(r, ref_parts.back().get());
  }
  CoordinatorOptions rco;
  rco.journal_dir = ref_dir.sub("coordinator");
  auto ref_coord = Coordinator::Open(rco, &ref).value();

  // SPMD commit: rank 0 runs the coordinator, the others follow on their own threads.
  auto commit = [&](const std::string& tx) {
    std::vector<std::thread> followers;
    std::vector<Status> follow(n);
    for (int r = 1; r < n; ++r) {
      followers.emplace_back([&, r] {
        cudaSetDevice(r);
        follow[r] = groups[r]->FollowCommit(*parts[r], tx);
      });
    }
    cudaSetDevice(0);
    CommitOutcome o = coord->Commit(tx);
    for (auto& t : followers) t.join();
    for (int r = 1; r < n; ++r) CHECK(follow[r].ok());
    return o;
  };

  BeginRequest b;
  b.tx = "t1";
  REQUIRE(coord->Begin(b).status.ok());
  REQUIRE(ref_coord->Begin(b).status.ok());
  for (int r = 0; r < n; ++r) {
    WriteAll(*parts[r], 7);
    WriteAll(*ref_parts[r], 7);
  }
  CommitOutcome o = commit("t1");
  REQUIRE(o.status.ok());
  REQUIRE(o.decision == Decision::kCommit);
  CommitOutcome ro = ref_coord->Commit("t1");
  CHECK(o.version == ro.version);
  for (int r = 0; r < n; ++r) {
    CHECK(parts[r]->status().serving);
    CHECK(parts[r]->status().version == std::optional<std::string>(o.version));
  }

  // A rank that misses a parameter votes no over NCCL; everyone aborts.
  b.tx = "t2";
  REQUIRE(coord->Begin(b).status.ok());
  for (int r = 0; r < n; ++r) WriteAll(*parts[r], 8, /*skip_first=*/r == n - 1);
  CommitOutcome o2 = commit("t2");
  CHECK(o2.status.code() == ErrorCode::kVoteNo);
  REQUIRE(o2.decision == Decision::kAbort);
  CHECK(o2.votes[n - 1].vote.error == ErrorCode::kCoverageIncomplete);
  for (int r = 0; r < n; ++r) CHECK_FALSE(parts[r]->status().active_tx.has_value());

  groups.clear();
  for (auto c : comms) ncclCommDestroy(c);
}

}  // namespace
}  // namespace wtx
