// Strict JSON objects: every object of the scenario format, the manifest format and the control
// protocol names its fields, and a field that is not one of them is an error naming its path
// ("steps[4].sahrd: unknown field (did you mean 'shard'?)") instead of being silently ignored.
//
// Thread-safety: pure functions.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx {

// OK when `obj` is not an object or every key of it is in `allowed`; otherwise
// kInvalidArgument "WHERE.KEY: unknown field" for the first unknown key in key order (WHERE
// empty: "KEY: unknown field"), suggesting an allowed name that is one or two edits away.
Status CheckFields(const nlohmann::json& obj, std::string_view where,
                   std::initializer_list<std::string_view> allowed);

// The path of a field: "where.key", or "key" when `where` is empty.
std::string FieldPath(std::string_view where, std::string_view key);

// Parses `text` as nlohmann::json::parse does without exceptions (a discarded value on a syntax
// error), but an object naming one key twice — which the parser would silently collapse into
// one, keeping either value — is refused too: the result is discarded and *duplicate is the
// path of the repeated key, outermost first (an array level as "[]"; {"a": {"k": 1, "k": 2}}
// gives {"a", "k"}). *duplicate is empty on a syntax error or success.
nlohmann::json ParseJsonNoDuplicateKeys(std::string_view text, std::vector<std::string>* duplicate);

}  // namespace wtx
