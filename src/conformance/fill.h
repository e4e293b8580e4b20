// Deterministic fills for scenarios: the value of an element depends only on the seed, the
// source tensor's name and the element's flat index in the source tensor, so the same fill
// yields the same bytes on every rank, for every chunking and order.
//
// Thread-safety: pure functions / immutable values.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "wtx/dtype.h"
#include "wtx/status.h"

namespace wtx::sim {

struct FillSpec {
  bool zeros = false;
  uint64_t seed = 0;
  bool has_override = false;
  uint64_t override_seed = 0;
  std::unordered_set<int64_t> override_indices;
};

// `where` names the field in errors ("steps[3].fill").
Result<FillSpec> ParseFill(const nlohmann::json& j, const std::string& where);

// Writes the element of `source` at flat index `index` in `dtype` to out (DTypeSize bytes).
void FillElement(const FillSpec& fill, uint64_t source_hash, int64_t index, DType dtype, void* out);
uint64_t SourceNameHash(const std::string& source);

}  // namespace wtx::sim
