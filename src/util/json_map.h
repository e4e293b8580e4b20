// JsonMap: the nlohmann::json twin of CborMap (src/util/cbor_writer.h), with the same field
// writers. A record or state encoder written once as a template over the map type gives both
// the JSON object (for readers, tools and tests) and the CBOR bytes the journal stores, which
// are those of json::to_cbor of that object.
//
// Thread-safety: a plain value (one owner).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace wtx {

class JsonMap {
 public:
  JsonMap& Int(std::string_view key, int64_t v) { return Set(key, v); }
  JsonMap& Uint(std::string_view key, uint64_t v) { return Set(key, v); }
  JsonMap& Bool(std::string_view key, bool v) { return Set(key, v); }
  JsonMap& Null(std::string_view key) { return Set(key, nullptr); }
  JsonMap& Text(std::string_view key, std::string_view v) { return Set(key, std::string(v)); }
  JsonMap& OptText(std::string_view key, const std::optional<std::string>& v) {
    return v ? Text(key, *v) : Null(key);
  }
  JsonMap& Texts(std::string_view key, const std::vector<std::string>& v) { return Set(key, v); }
  JsonMap& Ints(std::string_view key, const std::vector<int64_t>& v) { return Set(key, v); }
  JsonMap& Binary(std::string_view key, const std::vector<uint8_t>& v) {
    return Set(key, nlohmann::json::binary(v));
  }
  JsonMap& Map(std::string_view key, const JsonMap& m) { return Set(key, m.j_); }
  JsonMap& Maps(std::string_view key, const std::vector<JsonMap>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& m : v) a.push_back(m.j_);
    return Set(key, std::move(a));
  }
  nlohmann::json Take() && { return std::move(j_); }

 private:
  template <typename T>
  JsonMap& Set(std::string_view key, T&& v) {
    j_[std::string(key)] = std::forward<T>(v);
    return *this;
  }
  nlohmann::json j_ = nlohmann::json::object();
};

}  // namespace wtx
