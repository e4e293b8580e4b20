#include "src/util/json_fields.h"

#include <algorithm>
#include <vector>

namespace wtx {

namespace {

// Levenshtein distance, stopping early beyond `limit` (names are short).
size_t EditDistance(std::string_view a, std::string_view b, size_t limit) {
  if (a.size() > b.size() + limit || b.size() > a.size() + limit) return limit + 1;
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string FieldPath(std::string_view where, std::string_view key) {
  if (where.empty()) return std::string(key);
  return std::string(where) + "." + std::string(key);
}

Status CheckFields(const nlohmann::json& obj, std::string_view where,
                   std::initializer_list<std::string_view> allowed) {
  if (!obj.is_object()) return Status::OK();
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string msg = FieldPath(where, key) + ": unknown field";
    size_t best = 3;
    std::string_view suggestion;
    for (std::string_view a : allowed) {
      const size_t d = EditDistance(key, a, 2);
      if (d < best) {
        best = d;
        suggestion = a;
      }
    }
    if (!suggestion.empty()) msg += " (did you mean '" + std::string(suggestion) + "'?)";
    return Status::InvalidArgument(msg);
  }
  return Status::OK();
}

}  // namespace wtx
