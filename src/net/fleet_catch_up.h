// `wtx fleet catch-up` (docs/fleet.md, "Catch-up"): brings a lagging replica of a fleet to the
// version a healthy peer replica serves, without the trainer. The replica's coordinator begins
// a full transaction "catch-up.<peer>.<step>" at the peer's lineage and step; each of its ranks
// copies its peer rank's live bytes (rank control catch_up, src/net/catch_up.h); the commit
// requires the peer's version (CommitOptions::expect_version), so the bytes are proven equal
// before the replica serves, and its fleet member releases it. Any failure (a peer that dies,
// changes its version mid-copy, or whose bytes do not hash to its version) aborts the
// transaction by name: the replica stays held, serving nothing new.
//
// Thread-safety: one call runs one catch-up; the ranks copy in parallel, one thread each.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "src/net/channel.h"
#include "wtx/fleet.h"
#include "wtx/status.h"

namespace wtx::net {

struct FleetCatchUpRequest {
  FleetOptions fleet;
  std::string replica;      // the lagging replica
  std::string from;         // the peer; "": the serving replica of the newest step
  std::string coordinator;  // HOST:PORT of the lagging replica's coordinator (control)
  std::string secret;       // the fleet's shared secret
  NetOptions net;
  std::chrono::milliseconds timeout{120000};  // each rank's copy, and the commit
};

struct FleetCatchUpReport {
  std::string replica;
  std::string from;
  std::string tx;
  std::string lineage;
  int64_t step = 0;
  std::string version;
  int64_t bytes = 0;     // copied, every rank together
  bool already = false;  // the replica served the peer's step or a newer one: nothing done
};

// See above. kNotFound when the replica is not registered or no peer qualifies (naming why);
// kInvalidArgument for a peer or replica whose ranks registered no control port; the error of
// the step that failed otherwise (the transaction aborted).
Result<FleetCatchUpReport> CatchUpReplica(const FleetCatchUpRequest& request);

}  // namespace wtx::net
