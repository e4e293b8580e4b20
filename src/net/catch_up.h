// Catch-up from a peer replica (docs/fleet.md, "Catch-up"): a rank of a lagging replica copies
// the live bytes of the version its peer rank (the same rank of a healthy replica with the same
// layout) serves, over the control protocol, inside a full transaction the catch-up's driver
// began; the driver commits it only as the peer's version (CommitOptions::expect_version), so
// the bytes are proven equal before anything serves.
//
//  * Peer side, rank control `read_live {param, offset, length, version}`: `length` bytes of
//    `param` from `offset`, with the rank's fingerprint, version, served digest, lineage and
//    step, and for a processed parameter (manifest `served`) its checkpoint digest. Refused
//    (E_VERSION_MISMATCH) unless the rank serves exactly `version` with nothing open, both
//    before and after the read: a peer that changes its version mid-copy is named, never
//    copied from.
//  * Lagging side, rank control `catch_up {peer, version}`: every parameter read from the peer
//    `peer` (HOST:PORT of its rank control) in pieces and written (Participant::Write; a
//    processed parameter's served form adopted with the peer's checkpoint digest,
//    Participant::AdoptServed), then every derived tensor refreshed; the answer carries the
//    peer's served digest, which the driver's commit must reproduce. A peer of another layout is E_MANIFEST_MISMATCH, a peer
//    that cannot be reached or dies is kCrashed/kTimeout naming it; nothing is committed here.
//
// Thread-safety: pure functions over a thread-safe Participant; each catch-up has its own
// connection.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "src/net/channel.h"
#include "wtx/participant.h"
#include "wtx/status.h"

namespace wtx::net {

// How a lagging rank reaches its peer: the fleet's shared secret and the net options of its
// own control connections.
struct CatchUpOptions {
  std::string secret;
  NetOptions net;
  std::chrono::milliseconds request_timeout{30000};
};

// read_live's answer (see above). `params` as the control request carries them.
Result<nlohmann::json> ReadLive(Participant& participant, const nlohmann::json& params);

// catch_up's work (see above): the bytes copied and the peer's served digest.
struct CatchUpCopy {
  int64_t bytes = 0;
  std::string served_digest;
};
Result<CatchUpCopy> CatchUpFromPeer(Participant& participant, const nlohmann::json& params,
                                    const CatchUpOptions& options);

}  // namespace wtx::net
