// Standard base64 (RFC 4648, with '=' padding, no line breaks) over OpenSSL's EVP_EncodeBlock
// and EVP_DecodeBlock: how etcd's JSON gateway carries keys and values.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace wtx::etcd {

std::string Base64Encode(std::string_view bytes);
// The bytes `text` encodes, or nullopt when it is not canonical padded base64 (a length that
// is not a multiple of 4, a character outside the alphabet, padding anywhere but the end).
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace wtx::etcd
