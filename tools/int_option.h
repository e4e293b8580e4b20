// AddIntOption: the one way a wtx tool declares an integer flag (or positional argument). The
// value is parsed as a decimal integer with an overflow check and must lie in [min, max]; else
// the command line is refused (exit 2, src/util/exit_codes.h) with a message naming the flag,
// the value and the range: `--ranks: 4097 is out of range [1, 4096]`. CLI11's own conversion
// saturates (9223372036854775808 read as INT64_MAX) and reads 0x10 and 010 as 16 and 8; here
// only decimal digits with an optional '-' are integers, and the value CLI11 then converts is
// the canonical decimal text of the checked number.
//
// Thread-safety: call while building the CLI::App (single-threaded).
#pragma once

#include <cassert>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

namespace wtx::tools {

// "[1, 4096]".
inline std::string IntRangeText(int64_t min, int64_t max) {
  return "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

// The validator of AddIntOption; rewrites an accepted value to its canonical decimal text.
inline CLI::Validator IntRange(int64_t min, int64_t max) {
  assert(min <= max && "an empty range accepts nothing");
  const std::string range = IntRangeText(min, max);
  return CLI::Validator(
      [min, max, range](std::string& s) -> std::string {
        const size_t first = !s.empty() && s[0] == '-' ? 1 : 0;
        if (s.size() == first || s.find_first_not_of("0123456789", first) != std::string::npos) {
          return "'" + s + "' is not an integer in " + range;
        }
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc::result_out_of_range || v < min || v > max) {
          return s + " is out of range " + range;
        }
        assert(ec == std::errc() && end == s.data() + s.size() && "only digits were passed");
        s = std::to_string(v);
        return std::string();
      },
      "INT in " + range);
}

// An inclusive range of an integer flag.
struct IntBounds {
  int64_t min;
  int64_t max;
};

// Adds `name` (a flag "--x" or a positional "x") storing into `*target`, checked against
// [min, max]. REQUIRES: [min, max] is representable in T.
template <typename T>
CLI::Option* AddIntOption(CLI::App* app, const std::string& name, T* target, int64_t min,
                          int64_t max, const std::string& help) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "an integer flag");
  if constexpr (std::is_signed_v<T>) {
    assert(min >= static_cast<int64_t>(std::numeric_limits<T>::min()) && "range fits the type");
  } else {
    assert(min >= 0 && "an unsigned flag has no negative values");
  }
  assert(static_cast<uint64_t>(max) <= static_cast<uint64_t>(std::numeric_limits<T>::max()) &&
         "range fits the type");
  return app->add_option(name, *target, help)->transform(IntRange(min, max))->type_name("INT");
}

template <typename T>
CLI::Option* AddIntOption(CLI::App* app, const std::string& name, T* target, IntBounds bounds,
                          const std::string& help) {
  return AddIntOption(app, name, target, bounds.min, bounds.max, help);
}

}  // namespace wtx::tools
