#include "src/testing/inproc_cluster.h"

#include <cassert>

#include "src/txn/test_hooks.h"

namespace wtx {

InProcCluster::InProcCluster(InProcClusterOptions options)
    : options_(std::move(options)), transport_(static_cast<int>(options_.manifests.size())) {
  assert(!options_.manifests.empty() && "a cluster needs at least one rank");
  for (size_t r = 0; r < options_.manifests.size(); ++r) {
    assert(options_.manifests[r] != nullptr && "every rank needs a manifest");
    ranks_.push_back(std::make_unique<RankProcess>());
  }
}

InProcCluster::~InProcCluster() {
  CloseCoordinator();
  for (int r = 0; r < ranks(); ++r) CloseRank(r);
}

std::string InProcCluster::rank_dir(int r) const {
  return options_.dir + "/rank-" + std::to_string(r);
}

std::string InProcCluster::coordinator_dir() const { return options_.dir + "/coordinator"; }

Status InProcCluster::Start() {
  for (int r = 0; r < ranks(); ++r) WTX_RETURN_IF_ERROR(OpenRank(r));
  return OpenCoordinator();
}

Status InProcCluster::OpenRank(int r, const RankStart& start) {
  assert(!RankAlive(r) && "OpenRank: the rank is running");
  RankProcess& rp = *ranks_[r];
  ParticipantOptions o;
  o.rank = r;
  o.journal_dir = rank_dir(r);
  o.env.fs = rp.fs;
  o.kernel_identity = options_.kernel_identity;
  o.rollback_budget_bytes = start.rollback_budget_bytes.value_or(options_.rollback_budget_bytes);
  if (options_.memory) {  // a new process: new live memory
    auto memory = options_.memory(r, *options_.manifests[r]);
    if (!memory.ok()) return memory.status();
    o.memory = std::move(memory).value();
  }
  if (options_.customize_rank) options_.customize_rank(r, o);
  ParticipantHooks hooks;
  hooks.crash_points = start.crash_points != nullptr ? start.crash_points : &rp.crash;
  auto p = OpenParticipantWithHooks(std::move(o), options_.manifests[r], hooks);
  if (!p.ok()) return p.status();
  rp.participant = std::move(p).value();
  transport_.SetParticipant(r, rp.participant.get());
  return Status::OK();
}

Status InProcCluster::OpenCoordinator(CrashPoints* crash_points) {
  assert(!CoordinatorAlive() && "OpenCoordinator: the coordinator is running");
  CoordinatorOptions o;
  o.journal_dir = coordinator_dir();
  o.env.fs = coordinator_fs_;
  if (options_.customize_coordinator) options_.customize_coordinator(o);
  CoordinatorHooks hooks;
  hooks.crash_points = crash_points != nullptr ? crash_points : &coordinator_crash_;
  auto c = OpenCoordinatorWithHooks(o, &transport_, hooks);
  if (!c.ok()) return c.status();
  coordinator_ = std::move(c).value();
  return Status::OK();
}

void InProcCluster::CloseRank(int r) {
  transport_.SetParticipant(r, nullptr);
  ranks_[r]->participant.reset();
}

void InProcCluster::CloseCoordinator() { coordinator_.reset(); }

void InProcCluster::Drop(FaultInjectionFileSystem& fs, const PowerLoss& loss) {
  if (loss.drop) fs.DropUnsyncedData(loss.mode, loss.seed);
}

void InProcCluster::KillRank(int r, const PowerLoss& loss) {
  RankProcess& rp = *ranks_[r];
  rp.fs->SetActive(false);
  transport_.SetParticipant(r, nullptr);
  rp.participant.reset();
  Drop(*rp.fs, loss);
  rp.fs->SetActive(true);
}

void InProcCluster::KillCoordinator(const PowerLoss& loss) {
  coordinator_fs_->SetActive(false);
  coordinator_.reset();
  Drop(*coordinator_fs_, loss);
  coordinator_fs_->SetActive(true);
}

Status InProcCluster::RestartRank(int r, const RankStart& start) {
  if (RankAlive(r)) KillRank(r);
  WTX_RETURN_IF_ERROR(OpenRank(r, start));
  if (coordinator_) return rank(r).ResolveInDoubt(*coordinator_);
  return Status::OK();
}

Status InProcCluster::RestartCoordinator(CrashPoints* crash_points,
                                         std::vector<std::pair<int, Status>>* resolve_errors) {
  if (coordinator_) KillCoordinator();
  WTX_RETURN_IF_ERROR(OpenCoordinator(crash_points));
  WTX_RETURN_IF_ERROR(coordinator_->Recover());
  for (int r = 0; r < ranks(); ++r) {
    if (!RankAlive(r)) continue;
    Status s = rank(r).ResolveInDoubt(*coordinator_);
    if (!s.ok() && resolve_errors != nullptr) resolve_errors->emplace_back(r, s);
  }
  return Status::OK();
}

}  // namespace wtx
