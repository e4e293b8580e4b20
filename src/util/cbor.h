// CBOR decoding that never throws. nlohmann::json::from_cbor with allow_exceptions=false still
// throws for some inputs (a definite-length array or map whose declared size exceeds max_size,
// json.exception.out_of_range.408), and it accepts text strings that are not UTF-8, which then
// throw when the value is printed, and non-finite floats (NaN compares unequal to itself, and
// prints as null); every decoder of untrusted bytes (journal values, network
// frames) goes through ParseCbor instead.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace wtx {

// The deepest nesting ParseCbor accepts: the decoder recurses, and hostile bytes must not
// exhaust the stack.
inline constexpr size_t kMaxCborDepth = 64;

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
bool IsUtf8(std::string_view s);

// The value encoded by [data, data + size) (strict: nothing may follow it); nullopt when the
// bytes are not exactly one well-formed CBOR item nested at most kMaxCborDepth deep, with
// UTF-8 text and finite floats.
std::optional<nlohmann::json> ParseCbor(const uint8_t* data, size_t size);

}  // namespace wtx
