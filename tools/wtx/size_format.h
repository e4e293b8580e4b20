// How the CLI prints sizes: digit groups ("1,026,408,232,448") and GiB ("1.91 GiB").
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace wtx::cli {

inline std::string Grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

inline std::string GiB(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace wtx::cli
