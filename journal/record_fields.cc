#include "journal/record_fields.h"

namespace wtx {

using nlohmann::json;

std::string RecordFields::What() const {
  if (named_) return type_;
  return "record " + std::to_string(seq_) + " (" + type_ + ")";
}

void RecordFields::Fail(std::string_view field, std::string_view message) {
  if (!status_.ok()) return;
  status_ =
      Status::Corruption(What() + ": field '" + std::string(field) + "' " + std::string(message));
}

RecordFields RecordFields::Nested(const json& v, std::string_view name) const {
  RecordFields f(v, seq_, type_ + (named_ ? ": " : " ") + std::string(name));
  f.named_ = named_;
  return f;
}

bool RecordFields::Has(std::string_view key) const {
  auto it = r_.find(key);
  return it != r_.end() && !it->is_null();
}

const json* RecordFields::Find(std::string_view key, bool required) {
  auto it = r_.find(key);
  if (it == r_.end() || it->is_null()) {
    if (required) Fail(key, "is missing");
    return nullptr;
  }
  return &*it;
}

std::string RecordFields::String(std::string_view key) {
  const json* v = Find(key, true);
  if (!v) return {};
  if (!v->is_string()) {
    Fail(key, "is not a string");
    return {};
  }
  return v->get<std::string>();
}

std::optional<std::string> RecordFields::OptString(std::string_view key) {
  const json* v = Find(key, false);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    Fail(key, "is not a string");
    return std::nullopt;
  }
  return v->get<std::string>();
}

int64_t RecordFields::Int(std::string_view key) {
  if (!Has(key)) {
    Fail(key, "is missing");
    return 0;
  }
  return OptInt(key).value_or(0);
}

std::optional<int64_t> RecordFields::OptInt(std::string_view key) {
  const json* v = Find(key, false);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX)) {
    Fail(key, "is not an integer");
    return std::nullopt;
  }
  return v->get<int64_t>();
}

uint64_t RecordFields::Uint(std::string_view key) {
  const json* v = Find(key, true);
  if (!v) return 0;
  if (!v->is_number_unsigned()) {
    Fail(key, "is not an unsigned integer");
    return 0;
  }
  return v->get<uint64_t>();
}

bool RecordFields::Bool(std::string_view key) {
  if (!Has(key)) {
    Fail(key, "is missing");
    return false;
  }
  return OptBool(key).value_or(false);
}

std::optional<bool> RecordFields::OptBool(std::string_view key) {
  const json* v = Find(key, false);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    Fail(key, "is not a boolean");
    return std::nullopt;
  }
  return v->get<bool>();
}

std::vector<std::string> RecordFields::Strings(std::string_view key, bool required) {
  std::vector<std::string> out;
  const json* v = Array(key, required);
  if (!v) return out;
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!e.is_string()) {
      Fail(key, "holds a value that is not a string");
      return {};
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::vector<int64_t> RecordFields::Ints(std::string_view key, bool required) {
  std::vector<int64_t> out;
  const json* v = Array(key, required);
  if (!v) return out;
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > INT64_MAX)) {
      Fail(key, "holds a value that is not an integer");
      return {};
    }
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::vector<uint8_t> RecordFields::Binary(std::string_view key) {
  const json* v = Find(key, true);
  if (!v) return {};
  if (!v->is_binary()) {
    Fail(key, "is not a byte string");
    return {};
  }
  return v->get_binary();
}

const json* RecordFields::Object(std::string_view key, bool required) {
  const json* v = Find(key, required);
  if (v && !v->is_object()) {
    Fail(key, "is not an object");
    return nullptr;
  }
  return v;
}

const json* RecordFields::Array(std::string_view key, bool required) {
  const json* v = Find(key, required);
  if (v && !v->is_array()) {
    Fail(key, "is not an array");
    return nullptr;
  }
  return v;
}

std::string RecordFields::StringAt(const json& v, std::string_view name) {
  if (!v.is_string()) {
    Fail(name, "is not a string");
    return {};
  }
  return v.get<std::string>();
}

int64_t RecordFields::IntAt(const json& v, std::string_view name) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) {
    Fail(name, "is not an integer");
    return 0;
  }
  return v.get<int64_t>();
}

uint64_t RecordSeqOf(const json& r) {
  if (!r.is_object()) return 0;
  auto it = r.find("seq");
  if (it == r.end() || !it->is_number_integer()) return 0;
  return it->is_number_unsigned() || it->get<int64_t>() >= 0 ? it->get<uint64_t>() : 0;
}

}  // namespace wtx
