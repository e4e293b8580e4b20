// The scenario runner's data-plane steps on the control protocol: the JSON of a rank step (op,
// param, shard, source, box, fill, indices, part, derived, value) that the TCP simulator sends
// in a rank's `step` request, and the handler a rank process gives its control service
// (net::RankControlService) to apply such steps to its participant (ApplyRankStep). The
// control protocol itself (src/net/control_codec.h) carries the step as opaque JSON: it knows
// nothing of scenarios.
//
// Thread-safety: pure functions; the handler is safe to call concurrently for different
// participants, and as safe as the participant for one.
#pragma once

#include <nlohmann/json.hpp>

#include "src/conformance/scenario.h"
#include "src/conformance/simulator.h"
#include "src/net/control_service.h"

namespace wtx::sim {

nlohmann::json RankStepToJson(const Step& step);
// kInvalidArgument naming the field ("step.part: ...") for malformed input; never throws.
Result<Step> RankStepFromJson(const nlohmann::json& j);

// The `step` handler of a rank's control service: decodes the step, applies it.
net::RankStepHandler ControlStepHandler();

}  // namespace wtx::sim
