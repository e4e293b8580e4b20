#include "src/util/json_fields.h"

#include <algorithm>
#include <unordered_set>
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

nlohmann::json ParseJsonNoDuplicateKeys(std::string_view text,
                                        std::vector<std::string>* duplicate) {
  using nlohmann::json;
  duplicate->clear();
  // One frame per open object or array: the keys seen so far and the key that opened it.
  struct Frame {
    std::unordered_set<std::string> keys;
    std::string last_key;
    bool is_array = false;
  };
  std::vector<Frame> stack;
  auto path_to = [&](const std::string& key) {
    std::vector<std::string> p;
    for (size_t i = 0; i + 1 < stack.size(); ++i) {
      p.push_back(stack[i].is_array ? "[]" : stack[i].last_key);
    }
    p.push_back(key);
    return p;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        stack.push_back(Frame{{}, {}, ev == json::parse_event_t::array_start});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key: {
        if (stack.empty() || !parsed.is_string()) break;
        Frame& f = stack.back();
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!f.keys.insert(k).second && duplicate->empty()) *duplicate = path_to(k);
        f.last_key = k;
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  json j = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  if (!duplicate->empty()) return json(json::value_t::discarded);
  return j;
}

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
