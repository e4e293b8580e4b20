// Checked integer fields of untrusted JSON (scenario steps, the control protocol, journal
// reads): a value is taken only when it is a JSON integer inside the documented range, so that
// 1.5, "3", 2^40 where an int is meant, or a negative count are refused with an error naming
// the field, instead of being truncated (nlohmann's get<int>() of 2^32+1 is 1) or wrapped.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx {

// The integer `v`, when min <= v <= max; InvalidArgument "`where`: expected an integer in
// [min, max]" otherwise (naming what was given).
inline Result<int64_t> JsonInt(const nlohmann::json& v, const std::string& where, int64_t min,
                               int64_t max) {
  auto refuse = [&](const std::string& got) -> Status {
    return Status::InvalidArgument(where + ": expected an integer in [" + std::to_string(min) +
                                   ", " + std::to_string(max) + "], got " + got);
  };
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (max < 0 || u > static_cast<uint64_t>(max) || static_cast<int64_t>(u) < min) {
      return refuse(std::to_string(u));
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < min || i > max) return refuse(std::to_string(i));
    return i;
  }
  std::string shown = v.dump();
  if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
  return refuse(shown);
}

// The same for int-typed fields: [min, max] must lie within int.
inline Result<int> JsonInt32(const nlohmann::json& v, const std::string& where, int min, int max) {
  auto r = JsonInt(v, where, min, max);
  if (!r.ok()) return r.status();
  return static_cast<int>(r.value());
}

// A JSON unsigned integer in [0, max] (sizes, seeds, byte budgets).
inline Result<uint64_t> JsonUint(const nlohmann::json& v, const std::string& where,
                                 uint64_t max = std::numeric_limits<uint64_t>::max()) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= max) return v.get<uint64_t>();
  if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() >= 0 &&
      static_cast<uint64_t>(v.get<int64_t>()) <= max) {
    return static_cast<uint64_t>(v.get<int64_t>());
  }
  std::string shown = v.dump();
  if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
  return Status::InvalidArgument(where + ": expected an integer in [0, " + std::to_string(max) +
                                 "], got " + shown);
}

// JsonInt for decoders that run inside one try block over nlohmann's accessors: throws
// json::type_error (carrying the same message) instead of returning an error.
inline int64_t JsonIntOrThrow(const nlohmann::json& v, const std::string& where, int64_t min,
                              int64_t max) {
  auto r = JsonInt(v, where, min, max);
  if (!r.ok()) throw nlohmann::json::type_error::create(302, r.status().message(), &v);
  return r.value();
}

// An array of integers in [min, max]; `where` names the array ("wait_ranks.ranks").
inline Result<std::vector<int>> JsonIntList(const nlohmann::json& v, const std::string& where,
                                            int min, int max) {
  if (!v.is_array()) return Status::InvalidArgument(where + ": expected an array of integers");
  std::vector<int> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    auto e = JsonInt32(v[i], where + "[" + std::to_string(i) + "]", min, max);
    if (!e.ok()) return e.status();
    out.push_back(e.value());
  }
  return out;
}

}  // namespace wtx
