#include "src/manifest/box_json.h"

#include <cstdint>

#include "src/util/json_number.h"

namespace wtx {

using nlohmann::json;

json BoxToJson(const Box& box) {
  json a = json::array();
  for (const auto& r : box) a.push_back({r.begin, r.end});
  return a;
}

Result<Box> BoxFromJson(const json& j, const std::string& where) {
  if (!j.is_array()) {
    return Status::InvalidArgument(where + ": expected an array of [begin, end] pairs");
  }
  Box b;
  b.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const json& r = j[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer()) {
      return Status::InvalidArgument(at + ": expected [begin, end] integers");
    }
    WTX_ASSIGN_OR_RETURN(begin, JsonInt(r[0], at, INT64_MIN, INT64_MAX));
    WTX_ASSIGN_OR_RETURN(end, JsonInt(r[1], at, INT64_MIN, INT64_MAX));
    b.push_back({begin, end});
  }
  return b;
}

}  // namespace wtx
