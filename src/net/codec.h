// Codec: the protocol values of wtx/protocol.h as JSON maps, for the CBOR frames of the TCP
// transport (docs/protocol.md lists the fields); boxes in them use the one box codec
// (src/manifest/box_json.h). Encoding cannot fail; decoding checks every
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

nlohmann::json BeginRequestToJson(const BeginRequest& req);
Result<BeginRequest> BeginRequestFromJson(const nlohmann::json& j);

nlohmann::json VoteToJson(const Vote& vote);
Result<Vote> VoteFromJson(const nlohmann::json& j);
// The "decide" request's params: {tx, decision, version, served_digest (a commit whose served
// digest differs from its version)}.
nlohmann::json DecideParams(const std::string& tx, Decision d, const DecidedVersion& version);

nlohmann::json RankDescriptionToJson(const RankDescription& d);
Result<RankDescription> RankDescriptionFromJson(const nlohmann::json& j);

nlohmann::json RankStatusToJson(const RankStatus& s);
// {ok, comparable, params, differences: [{param, chunks: [first, end), box}], chunks_checked,
//  chunks_differing, message}
nlohmann::json VerifyReportToJson(const VerifyReport& r);
Result<RankStatus> RankStatusFromJson(const nlohmann::json& j);

// The one JSON form of a Status, everywhere (frames, control answers, outcomes):
// {"code": "E_DIRTY", "message": "..."}, OK as {"code": "OK", "message": ""}.
nlohmann::json StatusToJson(const Status& s);
// An error frame: an unknown code decodes as kIOError, and so does "OK" (an error frame
// never carries success) or anything that is not a map.
Status StatusFromJson(const nlohmann::json& j);
// A status that may be OK (outcomes, control answers): a field other than code/message is
// kInvalidArgument "status.FIELD: unknown field"; otherwise as StatusFromJson.
Status StatusOrOkFromJson(const nlohmann::json& j);

}  // namespace wtx::net
