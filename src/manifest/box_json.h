// The one JSON form of a Box, [[begin, end], ...], for every JSON that carries boxes: manifests,
// the transport's frames (votes, verification reports), the control protocol's steps, scenario
// steps and the simulator's output.
//
// Contract: BoxFromJson never throws; anything else than an array of two-integer arrays is
// kInvalidArgument naming `where` (and the index of a bad range). Ranges are int64 and checked
// (2^64-1 is refused, never wrapped to -1); whether a box fits a shape is the caller's check.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "wtx/box.h"
#include "wtx/status.h"

namespace wtx {

nlohmann::json BoxToJson(const Box& box);
// "WHERE: expected an array of [begin, end] pairs", "WHERE[i]: expected [begin, end] integers".
Result<Box> BoxFromJson(const nlohmann::json& j, const std::string& where);

}  // namespace wtx
