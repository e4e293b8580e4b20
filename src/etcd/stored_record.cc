#include "src/etcd/stored_record.h"

#include <vector>

#include "src/util/json_fields.h"

namespace wtx::etcd {

using nlohmann::json;

Status RecordCorrupt(std::string_view format, const std::string& what) {
  return Status::Corruption("not a " + std::string(format) + " record: " + what);
}

Result<json> ParseRecord(std::string_view value, std::string_view format, int64_t v,
                         std::initializer_list<std::string_view> allowed) {
  std::vector<std::string> duplicate;
  json j = ParseJsonNoDuplicateKeys(value, &duplicate);
  if (!duplicate.empty()) return RecordCorrupt(format, "a key appears twice");
  if (!j.is_object()) return RecordCorrupt(format, "the value is not a JSON object");
  const auto f = j.find("format");
  if (f == j.end() || !f->is_string() || f->get<std::string>() != format) {
    return RecordCorrupt(format, "\"format\" is not \"" + std::string(format) + "\"");
  }
  const auto version = j.find("v");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != v) {
    return RecordCorrupt(format, "\"v\" is not " + std::to_string(v));
  }
  const Status fields = CheckFields(j, "", allowed);
  if (!fields.ok()) return RecordCorrupt(format, fields.message());
  return j;
}

namespace {

// "\"name\"" (built by appending: GCC 12 warns, wrongly, about a + chain here).
std::string RecordFieldName(const char* name) {
  std::string out(1, '"');
  out.append(name);
  out.push_back('"');
  return out;
}

}  // namespace

Status RecordString(const json& j, std::string_view format, const char* name, std::string* out) {
  const auto it = j.find(name);
  if (it == j.end() || !it->is_string()) {
    return RecordCorrupt(format, RecordFieldName(name) + " is missing or not a string");
  }
  *out = it->get<std::string>();
  return Status::OK();
}

Status RecordInt(const json& j, std::string_view format, const char* name, int64_t* out) {
  const auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) {
    return RecordCorrupt(format, RecordFieldName(name) + " is missing or not an integer");
  }
  *out = it->get<int64_t>();
  return Status::OK();
}

Status RecordBool(const json& j, std::string_view format, const char* name, bool* out) {
  const auto it = j.find(name);
  if (it == j.end() || !it->is_boolean()) {
    return RecordCorrupt(format, RecordFieldName(name) + " is missing or not a boolean");
  }
  *out = it->get<bool>();
  return Status::OK();
}

Result<std::string> DumpRecord(const json& j, const std::string& what) {
  try {
    return j.dump();
  } catch (const json::exception&) {
    return Status::InvalidArgument(what + ": a text field is not valid UTF-8");
  }
}

}  // namespace wtx::etcd
