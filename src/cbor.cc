#include "cbor.h"

#include <vector>

namespace wtx {

namespace {
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
        item_done();
        break;
      case 2:
      case 3:
        if (indefinite) {
          if (stack.size() >= kMaxCborDepth) return false;
          stack.push_back({UINT64_MAX});
        } else {
          if (n - i < v) return false;
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
