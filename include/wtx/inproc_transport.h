// InProcTransport: the coordinator reaches participants by direct calls (tests, simulator,
// single-process deployments). A rank slot may be empty (process dead: E_CRASHED) or marked
// silent (its prepare answers never arrive: E_TIMEOUT; decisions still reach it).
//
// Thread-safety: Set*/endpoint calls are serialized by an internal mutex; the participants
// themselves are thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "wtx/participant.h"
#include "wtx/transport.h"

namespace wtx {

class InProcTransport : public Transport {
 public:
  explicit InProcTransport(int num_ranks);
  ~InProcTransport() override;

  // `p` may be null (the rank's process is dead). Not owned.
  void SetParticipant(int rank, Participant* p);
  void SetSilent(const std::set<int>& ranks);

  int num_ranks() const override { return static_cast<int>(endpoints_.size()); }
  ParticipantEndpoint* endpoint(int rank) override;

 private:
  class Endpoint;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

}  // namespace wtx
