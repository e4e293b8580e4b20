#include "src/util/cbor.h"

#include <vector>

namespace wtx {

bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

namespace {

// Whether the IEEE 754 half (ai 25), single (26) or double (27) with these bits is finite:
// its exponent is not all ones.
bool FiniteFloatBits(int ai, uint64_t bits) {
  switch (ai) {
    case 25:
      return (bits & 0x7c00) != 0x7c00;
    case 26:
      return (bits & 0x7f800000) != 0x7f800000;
    default:
      return (bits & 0x7ff0000000000000ULL) != 0x7ff0000000000000ULL;
  }
}

// Walks a CBOR item without recursion and checks that it is well formed, fills the buffer
// exactly and nests at most kMaxCborDepth deep (the decoder recurses; a hostile frame must not
// exhaust the stack).
bool CborShapeOk(const uint8_t* p, size_t n) {
  struct Level {
    uint64_t remaining;  // items left; UINT64_MAX: indefinite (until break)
  };
  std::vector<Level> stack;
  size_t i = 0;
  auto item_done = [&]() {
    while (!stack.empty() && stack.back().remaining != UINT64_MAX) {
      if (--stack.back().remaining > 0) return;
      stack.pop_back();
    }
  };
  bool first = true;
  while (first || !stack.empty()) {
    first = false;
    if (i >= n) return false;
    const uint8_t b = p[i++];
    const int major = b >> 5, ai = b & 0x1f;
    uint64_t v = 0;
    bool indefinite = false;
    if (ai < 24) {
      v = static_cast<uint64_t>(ai);
    } else if (ai <= 27) {
      const size_t len = size_t{1} << (ai - 24);
      if (n - i < len) return false;
      for (size_t k = 0; k < len; ++k) v = (v << 8) | p[i++];
    } else if (ai == 31) {
      indefinite = true;
    } else {
      return false;
    }
    if (major == 7 && indefinite) {  // break
      if (stack.empty() || stack.back().remaining != UINT64_MAX) return false;
      stack.pop_back();
      item_done();
      continue;
    }
    switch (major) {
      case 0:
      case 1:
      case 7:
        if (indefinite) return false;
        // Floats must be finite: NaN compares unequal to itself and prints as JSON null.
        if (major == 7 && ai >= 25 && ai <= 27 && !FiniteFloatBits(ai, v)) return false;
        item_done();
        break;
      case 2:
      case 3:
        if (indefinite) {
          if (stack.size() >= kMaxCborDepth) return false;
          stack.push_back({UINT64_MAX});
        } else {
          if (n - i < v) return false;
          // Text strings must be UTF-8: readers print decoded values as JSON.
          if (major == 3 && !IsUtf8(std::string_view(reinterpret_cast<const char*>(p + i),
                                                     static_cast<size_t>(v)))) {
            return false;
          }
          i += static_cast<size_t>(v);
          item_done();
        }
        break;
      case 4:
      case 5:
      case 6: {
        if (stack.size() >= kMaxCborDepth) return false;
        uint64_t items = indefinite ? UINT64_MAX : v;
        if (major == 5 && !indefinite) {
          if (v > n) return false;
          items = 2 * v;
        }
        if (major == 6) {
          if (indefinite) return false;
          items = 1;
        }
        if (!indefinite && items > n - i) return false;  // each item takes at least a byte
        if (items == 0) {
          item_done();
        } else {
          stack.push_back({items});
        }
        break;
      }
    }
  }
  return i == n;
}

}  // namespace

std::optional<nlohmann::json> ParseCbor(const uint8_t* data, size_t size) {
  if (!CborShapeOk(data, size)) return std::nullopt;
  try {
    nlohmann::json j = nlohmann::json::from_cbor(data, data + size, /*strict=*/true,
                                                 /*allow_exceptions=*/false);
    if (j.is_discarded()) return std::nullopt;
    return j;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // thrown despite allow_exceptions=false (see the header)
  }
}

}  // namespace wtx
