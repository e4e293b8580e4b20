// Journal record encoding. A stored value is one of
//   "WTX1" | XXH3-64 of the payload (8 bytes, little endian) | CBOR payload
//   "WTXW" | XXH3-64 of the payload (8 bytes, little endian) | binary WRITE record
// so that a flipped byte anywhere is detected on read. The binary form holds the participant's
// most frequent record (one per write piece) in a fixed little-endian layout that is encoded
// and replayed without building JSON (docs/journal-format.md). Record keys are "r" followed by
// the sequence number in 8 big-endian bytes, so RocksDB's order is sequence order.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/box.h"
#include "wtx/status.h"

namespace wtx {

// A WRITE record: the bytes of `box` of `param` (touching `shards`) landed in transaction `tx`.
struct WriteRecord {
  std::string tx;
  std::string param;
  Box box;
  int64_t elements = 0;
  int64_t bytes = 0;
  std::vector<std::string> shards;
  int64_t ts = 0;
};

// A decoded binary WRITE record. The views point into the stored value, which must outlive it.
struct WriteRecordView {
  uint64_t seq = 0;
  uint64_t prev = 0;  // checksum of the previous record (the chain link)
  int64_t ts = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
  std::string_view tx;
  std::string_view param;
  std::string_view box_bytes;    // per dimension: begin, end (int64, little endian)
  std::string_view shard_bytes;  // per shard: length (uint32) and bytes

  // The record as a JSON object, as its CBOR form would decode: type "WRITE", tx, param, box,
  // elements, bytes, shards, ts, seq and prev (hex).
  nlohmann::json ToJson() const;
};

std::string EncodeValue(const nlohmann::json& payload);
// The stored value of an already encoded CBOR payload (EncodeValue of the JSON it encodes).
std::string EncodeCborValue(std::string_view cbor);
// Encodes `w` as record `seq` following the record whose checksum is `prev`.
std::string EncodeWriteRecord(const WriteRecord& w, uint64_t seq, uint64_t prev);
// The same bytes written into *out (replacing its contents), reusing its capacity.
void EncodeWriteRecordTo(const WriteRecord& w, uint64_t seq, uint64_t prev, std::string* out);
// True when `value` is stored in the binary WRITE form (by its magic; not yet verified).
bool IsWriteRecordValue(std::string_view value);
// Verifies the checksum and layout of a binary WRITE value. kJournalCorrupt naming `what`.
Result<WriteRecordView> DecodeWriteRecord(std::string_view value, std::string_view what);
// Either form, as JSON. kJournalCorrupt (naming `what`) on a bad magic, short value, checksum,
// CBOR or binary layout error.
Result<nlohmann::json> DecodeValue(std::string_view value, std::string_view what);
// The checksum stored in an encoded value (the chain link of the next record).
uint64_t ValueChecksum(std::string_view encoded);

std::string RecordKey(uint64_t seq);
// 0 when `key` is not a record key.
uint64_t RecordSeq(std::string_view key);

inline constexpr std::string_view kMetaKey = "m";
inline constexpr std::string_view kStateKey = "s";
inline constexpr char kRecordPrefix = 'r';

}  // namespace wtx
