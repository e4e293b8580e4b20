// Checks a `wtx sim` output document against an expectations file (the *.expect.json format of
// shared/scenarios): a list of assertions
//   ["step", i, {fields}]            steps[i] has these fields (objects compared as subsets)
//   ["error_somewhere", i, "E_X"]    the code appears anywhere inside steps[i]
//   ["missing", i, param, shard]     a reported missing piece of steps[i] names param/shard
//   ["rank", "*"|n, {fields}]        every rank (or rank n) has these fields
//   ["decision", tx, "commit"|...]   the coordinator logged that decision for tx
// Thread-safety: pure function.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace wtx::sim {

// One message per failed assertion (empty when all hold).
std::vector<std::string> CheckExpectations(const nlohmann::json& output,
                                           const nlohmann::json& expectations);

}  // namespace wtx::sim
