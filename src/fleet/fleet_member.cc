// FleetMember (wtx/fleet.h): one rank's registration in its fleet, a report every period (and on
// ReportNow): its record under its lease, the fleet's newest and published steps raised, and
// its participant held or released by the fleet's staleness rule.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "src/fleet/fleet_registry.h"
#include "src/fleet/fleet_view.h"
#include "src/util/thread_annotations.h"
#include "wtx/env.h"
#include "wtx/fleet.h"

namespace wtx {

namespace {

using fleet::RankRecord;
using fleet::StepMark;
using std::chrono::milliseconds;

// What the rank's own status says of it, before any fleet hold: its state and why it does
// not serve.
void OwnState(const RankStatus& st, RankRecord* r) {
  r->state = ReplicaState::kHeld;
  if (st.in_doubt) {
    r->reason = "transaction '" + *st.in_doubt + "' is in doubt";
  } else if (st.active_tx && st.active_tx->starts_with(kCatchUpTxPrefix)) {
    r->state = ReplicaState::kCatchingUp;
    r->reason = "catching up ('" + *st.active_tx + "')";
  } else if (st.active_tx) {
    r->state = ReplicaState::kUpdating;
    r->reason = "update '" + *st.active_tx + "' in progress";
  } else if (st.dirty) {
    r->reason = "dirty: an update aborted; only a full update that commits serves again";
  } else if (!st.loaded) {
    r->reason = "not loaded";
  } else if (!st.version) {
    r->reason = "no version committed";
  } else if (!st.storage_moved.empty()) {
    r->reason = "storage moved: " + st.storage_moved.front();
  } else if (!st.stale_derived.empty()) {
    r->reason = "stale derived state: " + st.stale_derived.front();
  } else {
    r->state = ReplicaState::kServing;
    r->reason.clear();
  }
}

class FleetMemberImpl : public FleetMember {
 public:
  FleetMemberImpl(FleetMemberOptions options, Participant* participant,
                  std::unique_ptr<fleet::Registry> registry)
      : options_(std::move(options)),
        participant_(participant),
        registry_(std::move(registry)),
        ttl_seconds_(etcd::LeaseSeconds(options_.ttl)),
        period_(options_.period.count() > 0
                    ? options_.period
                    : std::max(milliseconds(100), milliseconds(ttl_seconds_ * 1000 / 3))) {
    // Held from the start: never routable before a report found its step admissible.
    SetHoldAndStatus("joining " + registry_->name() + ": the registry has not been read yet",
                     std::nullopt);
    last_success_us_ = Clock::Real()->NowMicros();
    thread_ = std::thread([this] { Run(); });
  }

  ~FleetMemberImpl() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::lock_guard<std::mutex> report(report_mu_);
    if (lease_ != 0) (void)registry_->client().LeaseRevoke(lease_, "leave " + registry_->name());
    participant_->SetHold(std::nullopt);
  }

  Status ReportNow() override {
    std::lock_guard<std::mutex> report(report_mu_);
    return ReportLocked();
  }

  std::optional<std::string> hold() const override {
    std::lock_guard<std::mutex> l(mu_);
    return hold_;
  }

  std::optional<FleetStatus> last_status() const override {
    std::lock_guard<std::mutex> l(mu_);
    return last_status_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      l.unlock();
      {
        std::lock_guard<std::mutex> report(report_mu_);
        (void)ReportLocked();  // an unreachable registry holds the rank once a TTL has passed
      }
      l.lock();
      cv_.wait_for(l, period_, [&] { return stop_; });
    }
  }

  void SetHoldAndStatus(std::optional<std::string> hold, std::optional<FleetStatus> status) {
    {
      std::lock_guard<std::mutex> l(mu_);
      hold_ = hold;
      if (status) last_status_ = std::move(status);
    }
    participant_->SetHold(std::move(hold));
  }

  // The lease this rank's record lives under: renewed, or a new one when it ended.
  Result<int64_t> Lease() REQUIRES(report_mu_) {
    if (lease_ != 0) {
      WTX_ASSIGN_OR_RETURN(
          ttl, registry_->client().LeaseKeepAlive(lease_, "renew the lease of " + Who()));
      if (ttl > 0) return lease_;
    }
    WTX_ASSIGN_OR_RETURN(lease, registry_->client().LeaseGrant(ttl_seconds_, "lease for " + Who()));
    lease_ = lease;
    last_put_.reset();  // the record went with the old lease
    return lease_;
  }

  std::string Who() const {
    return "replica '" + options_.replica + "' rank " + std::to_string(options_.rank) + " in " +
           registry_->name();
  }

  Status ReportLocked() REQUIRES(report_mu_) {
    Status s = TryReport();
    const int64_t now = Clock::Real()->NowMicros();
    if (s.ok()) {
      last_success_us_ = now;
    } else if (now - last_success_us_ > ttl_seconds_ * 1'000'000) {
      // Its record is gone (the lease ended), so no router sees it: it must not serve either.
      SetHoldAndStatus(Who() + ": the registry has not answered for " +
                           std::to_string((now - last_success_us_) / 1000) + " ms (" +
                           s.ToString() + ")",
                       std::nullopt);
    }
    return s;
  }

  Status TryReport() REQUIRES(report_mu_) {
    const RankStatus st = participant_->status();
    RankRecord record;
    record.replica = options_.replica;
    record.rank = options_.rank;
    record.world = options_.world;
    record.lineage = st.lineage;
    record.step = st.step;
    record.version = st.version;
    record.control = options_.control;
    OwnState(st, &record);
    WTX_ASSIGN_OR_RETURN(lease, Lease());
    // One put per change of state (its time: when the state began), not per period: the lease
    // alone says the rank is alive. A fleet of many ranks then writes to etcd as often as it
    // changes.
    record.time_micros = Clock::Real()->NowMicros();
    if (RankRecord same = record; last_put_) {
      same.time_micros = last_put_->time_micros;
      if (same == *last_put_) record = same;
    }
    if (!last_put_ || record != *last_put_) {
      WTX_RETURN_IF_ERROR(registry_->PutRank(record, lease));
      last_put_ = record;
    }
    // What judging this rank needs: the policy and the newest and published steps.
    WTX_ASSIGN_OR_RETURN(marks, registry_->ReadMarks());
    FleetStatus fleet = fleet::ComputeFleetStatus(registry_->fleet(), marks);
    const std::string lineage = fleet.lineage.empty() ? record.lineage : fleet.lineage;
    // This rank's committed step is the fleet's newest when it is the largest: kept in etcd, so
    // that the newest step outlives the replicas that committed it.
    if (record.step && record.version && record.lineage == lineage &&
        (!marks.newest || marks.newest->lineage != lineage || marks.newest->step < *record.step)) {
      StepMark mark{record.lineage, *record.step, *record.version, record.replica,
                    record.time_micros};
      WTX_ASSIGN_OR_RETURN(raised, registry_->RaiseMark(registry_->keys().newest(), mark, lineage));
      if (raised) {
        marks.newest = mark;
        fleet = fleet::ComputeFleetStatus(registry_->fleet(), marks);
      }
    }
    // A step newer than the published one may be published once a quorum serves it: only then
    // is every replica read.
    const bool may_publish = record.state == ReplicaState::kServing && record.step &&
                             record.lineage == lineage &&
                             (!marks.published || marks.published->lineage != lineage ||
                              marks.published->step < *record.step);
    if (may_publish) {
      WTX_ASSIGN_OR_RETURN(contents, registry_->Read());
      fleet = fleet::ComputeFleetStatus(registry_->fleet(), contents);
      if (auto earned = fleet::EarnedPublishedStep(fleet);
          earned && (!contents.published || contents.published->lineage != fleet.lineage ||
                     contents.published->step < *earned)) {
        StepMark mark{fleet.lineage, *earned, "", record.replica, record.time_micros};
        for (const FleetReplica& r : fleet.replicas) {
          if (r.step == earned && r.version) mark.version = *r.version;
        }
        WTX_RETURN_IF_ERROR(
            registry_->RaiseMark(registry_->keys().published(), mark, fleet.lineage).status());
      }
    }
    std::optional<std::string> hold = fleet::StalenessHold(fleet, st.lineage, st.step);
    SetHoldAndStatus(std::move(hold), std::move(fleet));
    return Status::OK();
  }

  const FleetMemberOptions options_;
  Participant* const participant_;
  const std::unique_ptr<fleet::Registry> registry_;
  const int64_t ttl_seconds_;
  const milliseconds period_;

  std::mutex report_mu_;  // one report at a time (the thread's and ReportNow's)
  int64_t lease_ GUARDED_BY(report_mu_) = 0;
  // What etcd holds of this rank under lease_ (reset when a new lease is granted).
  std::optional<RankRecord> last_put_ GUARDED_BY(report_mu_);
  int64_t last_success_us_ GUARDED_BY(report_mu_) = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::optional<std::string> hold_ GUARDED_BY(mu_);
  std::optional<FleetStatus> last_status_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<FleetMember>> FleetMember::Start(FleetMemberOptions options,
                                                        Participant* participant) {
  if (participant == nullptr) return Status::InvalidArgument("fleet member: no participant");
  WTX_RETURN_IF_ERROR(fleet::CheckFleetName("replica", options.replica));
  if (options.world < 0 || options.rank < 0 ||
      (options.world > 0 && options.rank >= options.world)) {
    return Status::InvalidArgument("fleet member: rank " + std::to_string(options.rank) +
                                   " does not fit world " + std::to_string(options.world) +
                                   " (0 <= rank < world, world 0: unknown)");
  }
  if (options.ttl < milliseconds(1000)) {
    return Status::InvalidArgument("fleet member: ttl " + std::to_string(options.ttl.count()) +
                                   " ms is under the 1 s etcd leases have at least");
  }
  WTX_ASSIGN_OR_RETURN(registry, fleet::Registry::Open(options.fleet));
  return std::unique_ptr<FleetMember>(
      new FleetMemberImpl(std::move(options), participant, std::move(registry)));
}

}  // namespace wtx
