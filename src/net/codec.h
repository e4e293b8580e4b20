// Codec: the protocol values of wtx/protocol.h as JSON maps, for the CBOR frames of the TCP
// transport (docs/protocol.md lists the fields). Encoding cannot fail; decoding checks every
// field's type and returns kInvalidArgument naming the field for anything malformed, so a
// hostile or corrupted frame never throws or yields a half-filled value.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "wtx/participant.h"

#include "wtx/protocol.h"
#include "wtx/status.h"

namespace wtx::net {

nlohmann::json BoxToJson(const Box& box);
Result<Box> BoxFromJson(const nlohmann::json& j);

nlohmann::json BeginRequestToJson(const BeginRequest& req);
Result<BeginRequest> BeginRequestFromJson(const nlohmann::json& j);

nlohmann::json VoteToJson(const Vote& vote);
Result<Vote> VoteFromJson(const nlohmann::json& j);

nlohmann::json RankDescriptionToJson(const RankDescription& d);
Result<RankDescription> RankDescriptionFromJson(const nlohmann::json& j);

nlohmann::json RankStatusToJson(const RankStatus& s);
// {ok, comparable, params, differences: [{param, chunks: [first, end), box}], chunks_checked,
//  chunks_differing, message}
nlohmann::json VerifyReportToJson(const VerifyReport& r);
Result<RankStatus> RankStatusFromJson(const nlohmann::json& j);

// {"code": "E_DIRTY", "message": "..."}; an unknown code decodes as kIOError.
nlohmann::json StatusToJson(const Status& s);
Status StatusFromJson(const nlohmann::json& j);

}  // namespace wtx::net
