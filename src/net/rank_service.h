// RankService: a rank's side of the transport protocol (docs/protocol.md, "Transport"), apart
// from how its messages travel. ServeRankRequest answers one coordinator request — describe,
// check_begin, begin, prepare, decide, ping — against the local Participant, with the JSON
// forms of codec.h. The TCP rank agent (rank_agent.cc) serves its connection with it, and the
// Python module serves requests carried by torch.distributed with it (python/, wtx.torch_dist),
// so every transport runs the same dispatch.
//
// Every request may carry the coordinator's leader epoch ("epoch"); with a `fence`, a request
// from an older epoch is refused (E_STALE_COORDINATOR, src/net/epoch_fence.h).
//
// Contract: malformed parameters are kInvalidArgument naming the method; the function never
// throws. Errors of the participant come back as they were returned.
//
// Thread-safety: as the Participant's methods (safe from any thread).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "src/net/epoch_fence.h"
#include "wtx/participant.h"
#include "wtx/status.h"

namespace wtx::net {

Result<nlohmann::json> ServeRankRequest(Participant& participant, const std::string& method,
                                        const nlohmann::json& params, EpochFence* fence = nullptr);

}  // namespace wtx::net
