// CborMap: a CBOR map with text keys, built field by field and encoded to exactly the bytes
// nlohmann::json::to_cbor gives for the equal JSON object: keys in the order of the JSON
// object's std::map (byte-wise), every length and integer in its shortest form, text as major
// type 3, binary as major type 2 without a tag, booleans and null as simple values. The journal
// appends the participant's hot records and state through it without building JSON; the bytes,
// and so the checksums and the chain, are those the JSON path wrote (tests/cbor_writer_test.cc
// compares the two for every field kind and size class).
//
// Keys are string_views that must outlive the map (string literals in practice). A key given
// twice is a programming error (asserted). Not for floats (no journal record holds one).
//
// Thread-safety: a plain value (one owner).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wtx {

class CborMap {
 public:
  CborMap& Int(std::string_view key, int64_t v);
  CborMap& Uint(std::string_view key, uint64_t v);
  CborMap& Bool(std::string_view key, bool v);
  CborMap& Null(std::string_view key);
  CborMap& Text(std::string_view key, std::string_view v);
  // null when absent (as nlohmann's json of an empty optional: OptionalStringJson).
  CborMap& OptText(std::string_view key, const std::optional<std::string>& v);
  CborMap& Texts(std::string_view key, const std::vector<std::string>& v);
  CborMap& Ints(std::string_view key, const std::vector<int64_t>& v);
  CborMap& Binary(std::string_view key, const std::vector<uint8_t>& v);
  CborMap& Map(std::string_view key, const CborMap& m);
  CborMap& Maps(std::string_view key, const std::vector<CborMap>& v);

  bool empty() const { return entries_.empty(); }
  // Appends the encoded map to *out.
  void EncodeTo(std::string* out) const;
  std::string Encode() const {
    std::string s;
    EncodeTo(&s);
    return s;
  }

 private:
  struct Entry {
    std::string_view key;
    uint32_t begin = 0;  // the value's bytes in values_
    uint32_t end = 0;
  };
  std::string* Add(std::string_view key);
  void Close();

  std::vector<Entry> entries_;
  std::string values_;
};

// Appends the CBOR head of `major` (0..7) with argument `n` in its shortest form.
void CborHead(std::string* out, uint8_t major, uint64_t n);

}  // namespace wtx
