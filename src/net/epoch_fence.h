// EpochFence: a rank's memory of the newest coordinator leader epoch it has heard
// (include/wtx/decision_log.h). Every request of a coordinator that leads a shared decision
// log carries its epoch; a request from an older epoch, or one without an epoch once an epoch
// was seen, is refused with E_STALE_COORDINATOR naming both epochs, so a deposed coordinator
// that wakes after a pause cannot begin, prepare or decide on ranks that already follow its
// successor. The fence lives in memory: a rank that restarts forgets it, and the decision
// log's own fence (a deposed leader's decision is refused inside etcd) still holds.
//
// Thread-safety: every method is safe from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "wtx/status.h"

namespace wtx::net {

class EpochFence {
 public:
  // Admits a request from `epoch` (0: the request carried none) to `method`, remembering the
  // newest epoch seen.
  Status Admit(int64_t epoch, const std::string& method) {
    if (epoch < 0) {
      return Status::InvalidArgument(method + ": field 'epoch' must be >= 0, got " +
                                     std::to_string(epoch));
    }
    int64_t seen = seen_.load();
    while (epoch > seen && !seen_.compare_exchange_weak(seen, epoch)) {
    }
    if (epoch >= seen) return Status::OK();
    return Status(
        ErrorCode::kStaleCoordinator,
        method + " refused: it comes from coordinator epoch " + std::to_string(epoch) +
            (epoch == 0 ? " (no epoch: a coordinator without the shared decision log)" : "") +
            ", and this rank follows epoch " + std::to_string(seen));
  }
  int64_t seen() const { return seen_.load(); }

 private:
  std::atomic<int64_t> seen_{0};
};

}  // namespace wtx::net
