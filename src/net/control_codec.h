// The control protocol of `wtx coordinator` and `wtx rank` (docs/protocol.md, "Control"):
// JSON forms of the values a driver exchanges with those processes over a control
// connection. Decoders return kInvalidArgument for malformed input and never throw. The
// dispatch that answers these requests is control_service.h; statuses, boxes, votes and begin
// requests use the one codec of the transport (codec.h).
//
// Coordinator methods: begin {req}, commit {tx}, abort {tx}, committed_version {tx},
//   decisions, recover, connected, wait_ranks {ranks, timeout_ms}; test hooks (--test-hooks):
//   arm_crash {point}, disarm, crash {power_loss}.
// Rank methods (--control): step {step, scope} (the step's JSON is the scenario runner's:
//   src/conformance/step_codec.h), status, wait_resolved {timeout_ms}; test hooks:
//   arm_crash {point}, disarm, set_silent {silent}, crash {power_loss}.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/coordinator.h"

namespace wtx::net {

// The first stdout line of a serving process (`wtx coordinator`, `wtx rank`), flushed:
// {"ready": true, ...} once it serves.
void PrintReadyLine(const nlohmann::json& line);
// A process that cannot start: prints {"ready": false, "error": StatusJson(s)} on stdout and
// "wtx COMMAND: ..." on stderr; returns the exit code (ExitCodeFor(s), src/util/exit_codes.h:
// 2 for invalid input, 3 for a corrupt journal, 1 otherwise).
int FailToStart(std::string_view command, const Status& s);

// The params of a control request: a field the method does not take is kInvalidArgument
// "METHOD.FIELD: unknown field" (methods not listed above are refused by the handler by name).
Status CheckControlParams(const std::string& method, const nlohmann::json& params);
// The string parameter `field` of method `m` ("M.FIELD: expected a string" otherwise).
Result<std::string> StringParam(const nlohmann::json& params, const std::string& m,
                                const char* field);
// The parameter `field` (null when absent).
const nlohmann::json& Param(const nlohmann::json& params, const char* field);

nlohmann::json BeginOutcomeToJson(const BeginOutcome& o);
Result<BeginOutcome> BeginOutcomeFromJson(const nlohmann::json& j);

// {"expect_version": V|null, "expect_rank_digests": [...]}
nlohmann::json CommitOptionsToJson(const CommitOptions& o);
Result<CommitOptions> CommitOptionsFromJson(const nlohmann::json& j);
nlohmann::json CommitOutcomeToJson(const CommitOutcome& o);
Result<CommitOutcome> CommitOutcomeFromJson(const nlohmann::json& j);

nlohmann::json DecisionsToJson(const std::vector<DecisionEntry>& d);
Result<std::vector<DecisionEntry>> DecisionsFromJson(const nlohmann::json& j);

}  // namespace wtx::net
