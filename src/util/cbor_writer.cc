#include "src/util/cbor_writer.h"

#include <algorithm>
#include <cassert>

namespace wtx {

void CborHead(std::string* out, uint8_t major, uint64_t n) {
  const char m = static_cast<char>(major << 5);
  auto put = [out](uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  if (n <= 0x17) {
    out->push_back(static_cast<char>(m | static_cast<char>(n)));
  } else if (n <= 0xff) {
    out->push_back(static_cast<char>(m | 0x18));
    put(n, 1);
  } else if (n <= 0xffff) {
    out->push_back(static_cast<char>(m | 0x19));
    put(n, 2);
  } else if (n <= 0xffffffffu) {
    out->push_back(static_cast<char>(m | 0x1a));
    put(n, 4);
  } else {
    out->push_back(static_cast<char>(m | 0x1b));
    put(n, 8);
  }
}

namespace {

void PutInt(std::string* out, int64_t v) {
  if (v >= 0) {
    CborHead(out, 0, static_cast<uint64_t>(v));
  } else {
    CborHead(out, 1, static_cast<uint64_t>(-1 - v));
  }
}

void PutText(std::string* out, std::string_view s) {
  CborHead(out, 3, s.size());
  out->append(s);
}

}  // namespace

std::string* CborMap::Add(std::string_view key) {
  assert(std::none_of(entries_.begin(), entries_.end(),
                      [&](const Entry& e) { return e.key == key; }) &&
         "a CBOR map key given twice");
  entries_.push_back({key, static_cast<uint32_t>(values_.size()), 0});
  return &values_;
}

void CborMap::Close() { entries_.back().end = static_cast<uint32_t>(values_.size()); }

CborMap& CborMap::Int(std::string_view key, int64_t v) {
  PutInt(Add(key), v);
  Close();
  return *this;
}

CborMap& CborMap::Uint(std::string_view key, uint64_t v) {
  CborHead(Add(key), 0, v);
  Close();
  return *this;
}

CborMap& CborMap::Bool(std::string_view key, bool v) {
  Add(key)->push_back(static_cast<char>(v ? 0xf5 : 0xf4));
  Close();
  return *this;
}

CborMap& CborMap::Null(std::string_view key) {
  Add(key)->push_back(static_cast<char>(0xf6));
  Close();
  return *this;
}

CborMap& CborMap::Text(std::string_view key, std::string_view v) {
  PutText(Add(key), v);
  Close();
  return *this;
}

CborMap& CborMap::OptText(std::string_view key, const std::optional<std::string>& v) {
  return v ? Text(key, *v) : Null(key);
}

CborMap& CborMap::Texts(std::string_view key, const std::vector<std::string>& v) {
  std::string* out = Add(key);
  CborHead(out, 4, v.size());
  for (const auto& s : v) PutText(out, s);
  Close();
  return *this;
}

CborMap& CborMap::Ints(std::string_view key, const std::vector<int64_t>& v) {
  std::string* out = Add(key);
  CborHead(out, 4, v.size());
  for (int64_t x : v) PutInt(out, x);
  Close();
  return *this;
}

CborMap& CborMap::Binary(std::string_view key, const std::vector<uint8_t>& v) {
  std::string* out = Add(key);
  CborHead(out, 2, v.size());
  out->append(reinterpret_cast<const char*>(v.data()), v.size());
  Close();
  return *this;
}

CborMap& CborMap::Map(std::string_view key, const CborMap& m) {
  m.EncodeTo(Add(key));
  Close();
  return *this;
}

CborMap& CborMap::Maps(std::string_view key, const std::vector<CborMap>& v) {
  std::string* out = Add(key);
  CborHead(out, 4, v.size());
  for (const auto& m : v) m.EncodeTo(out);
  Close();
  return *this;
}

void CborMap::EncodeTo(std::string* out) const {
  // nlohmann::json objects are std::maps: keys in std::string order (unsigned bytes).
  std::vector<const Entry*> order;
  order.reserve(entries_.size());
  for (const Entry& e : entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const Entry* a, const Entry* b) { return a->key < b->key; });
  out->reserve(out->size() + values_.size() + 8 * entries_.size() + 8);
  CborHead(out, 5, entries_.size());
  for (const Entry* e : order) {
    PutText(out, e->key);
    out->append(values_, e->begin, e->end - e->begin);
  }
}

}  // namespace wtx
