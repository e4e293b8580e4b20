// Journal record encoding. A stored value is
//   "WTX1" | XXH3-64 of the CBOR payload (8 bytes, little endian) | CBOR payload
// so that a flipped byte anywhere is detected on read. Record keys are "r" followed by the
// sequence number in 8 big-endian bytes, so RocksDB's order is sequence order.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx {

std::string EncodeValue(const nlohmann::json& payload);
// kJournalCorrupt (naming `what`) on a bad magic, short value, checksum or CBOR error.
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
