// The strict JSON value of one etcd key that wtx writes (the decision log's records,
// src/txn/decision_log_records.h; the fleet registry's, src/fleet/fleet_records.h): a JSON
// object with its own "format" and "v", read back field by field. A value that is not JSON,
// names another format or version, names a key twice, lacks a field, has a field of the wrong
// type or one it does not know is kJournalCorrupt saying what ("not a wtx-decision record:
// \"epoch\" is missing or not an integer"); the caller names the key and the member.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx::etcd {

// kJournalCorrupt "not a FORMAT record: WHAT".
Status RecordCorrupt(std::string_view format, const std::string& what);

// Parses `value` as one JSON object of `format` version `v` whose fields are all in `allowed`.
Result<nlohmann::json> ParseRecord(std::string_view value, std::string_view format, int64_t v,
                                   std::initializer_list<std::string_view> allowed);

// One field of a parsed record: a string, an integer (a JSON number), a bool.
Status RecordString(const nlohmann::json& j, std::string_view format, const char* name,
                    std::string* out);
Status RecordInt(const nlohmann::json& j, std::string_view format, const char* name, int64_t* out);
Status RecordBool(const nlohmann::json& j, std::string_view format, const char* name, bool* out);

// j.dump(), or kInvalidArgument naming `what` when a string in it is not valid UTF-8.
Result<std::string> DumpRecord(const nlohmann::json& j, const std::string& what);

}  // namespace wtx::etcd
