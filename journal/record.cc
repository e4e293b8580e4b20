#include "record.h"

#include <cstring>
#include <xxhash.h>

namespace wtx {

namespace {
constexpr std::string_view kMagic = "WTX1";
constexpr size_t kHeader = 4 + 8;
}  // namespace

std::string EncodeValue(const nlohmann::json& payload) {
  std::vector<uint8_t> cbor = nlohmann::json::to_cbor(payload);
  uint64_t h = XXH3_64bits(cbor.data(), cbor.size());
  std::string out;
  out.reserve(kHeader + cbor.size());
  out.append(kMagic);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
  out.append(reinterpret_cast<const char*>(cbor.data()), cbor.size());
  return out;
}

uint64_t ValueChecksum(std::string_view encoded) {
  if (encoded.size() < kHeader) return 0;
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h |= static_cast<uint64_t>(static_cast<uint8_t>(encoded[4 + i])) << (8 * i);
  return h;
}

Result<nlohmann::json> DecodeValue(std::string_view value, std::string_view what) {
  if (value.size() < kHeader || value.substr(0, 4) != kMagic) {
    return Status::Corruption(std::string(what) + ": bad record header");
  }
  std::string_view body = value.substr(kHeader);
  if (XXH3_64bits(body.data(), body.size()) != ValueChecksum(value)) {
    return Status::Corruption(std::string(what) + ": checksum mismatch");
  }
  nlohmann::json j = nlohmann::json::from_cbor(body.begin(), body.end(), /*strict=*/true,
                                               /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corruption(std::string(what) + ": undecodable CBOR");
  return j;
}

std::string RecordKey(uint64_t seq) {
  std::string k(1 + 8, '\0');
  k[0] = kRecordPrefix;
  for (int i = 0; i < 8; ++i) k[1 + i] = static_cast<char>((seq >> (8 * (7 - i))) & 0xff);
  return k;
}

uint64_t RecordSeq(std::string_view key) {
  if (key.size() != 9 || key[0] != kRecordPrefix) return 0;
  uint64_t seq = 0;
  for (int i = 0; i < 8; ++i) seq = (seq << 8) | static_cast<uint8_t>(key[1 + i]);
  return seq;
}

}  // namespace wtx
