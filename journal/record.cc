#include "journal/record.h"

#include <cassert>
#include <cstring>
#include <limits>

#include <xxhash.h>

#include "src/util/cbor.h"
#include "src/util/coding.h"
#include "src/util/hash_util.h"

namespace wtx {

namespace {

constexpr std::string_view kMagic = "WTX1";
constexpr std::string_view kWriteMagic = "WTXW";
constexpr size_t kHeader = 4 + 8;
constexpr uint8_t kWriteLayout = 1;  // first payload byte of a binary WRITE record

// Bounds-checked reading of a binary payload: every read past the end sets `failed`.
class PayloadReader {
 public:
  explicit PayloadReader(std::string_view s) : rest_(s) {}
  bool failed() const { return failed_; }
  bool done() const { return rest_.empty(); }
  std::string_view remaining() const { return rest_; }
  uint8_t U8() {
    if (!Need(1)) return 0;
    const uint8_t v = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return v;
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    const uint32_t v = LoadFixed32(rest_.data());
    rest_.remove_prefix(4);
    return v;
  }
  uint64_t U64() {
    if (!Need(8)) return 0;
    const uint64_t v = LoadFixed64(rest_.data());
    rest_.remove_prefix(8);
    return v;
  }
  std::string_view Take(size_t n) {
    if (!Need(n)) return {};
    std::string_view v = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return v;
  }
  std::string_view Bytes() { return Take(U32()); }

 private:
  bool Need(size_t n) {
    if (failed_ || rest_.size() < n) failed_ = true;
    return !failed_;
  }
  std::string_view rest_;
  bool failed_ = false;
};

std::string WithHeader(std::string_view magic, std::string_view payload) {
  std::string out;
  out.reserve(kHeader + payload.size());
  out.append(magic);
  PutFixed64(&out, XXH3_64bits(payload.data(), payload.size()));
  out.append(payload);
  return out;
}

// The payload of a value whose magic is `magic` and whose checksum holds.
Result<std::string_view> CheckedPayload(std::string_view value, std::string_view magic,
                                        std::string_view what) {
  if (value.size() < kHeader || value.substr(0, 4) != magic) {
    return Status::Corruption(std::string(what) + ": bad record header");
  }
  std::string_view body = value.substr(kHeader);
  if (XXH3_64bits(body.data(), body.size()) != ValueChecksum(value)) {
    return Status::Corruption(std::string(what) + ": checksum mismatch");
  }
  return body;
}

}  // namespace

std::string EncodeValue(const nlohmann::json& payload) {
  std::vector<uint8_t> cbor = nlohmann::json::to_cbor(payload);
  return WithHeader(kMagic,
                    std::string_view(reinterpret_cast<const char*>(cbor.data()), cbor.size()));
}

std::string EncodeCborValue(std::string_view cbor) { return WithHeader(kMagic, cbor); }

void EncodeWriteRecordTo(const WriteRecord& w, uint64_t seq, uint64_t prev, std::string* out) {
  // Sized once and filled through a cursor: the append path encodes a record per write.
  size_t size = kHeader + 1 + size_t{5} * 8 + 4 + w.tx.size() + 4 + w.param.size() + 4 +
                16 * w.box.size() + 4;
  for (const std::string& s : w.shards) size += 4 + s.size();
  out->resize(size);
  char* p = out->data();
  auto put64 = [&p](uint64_t v) {
    for (int i = 0; i < 8; ++i) *p++ = static_cast<char>(v >> (8 * i));
  };
  auto put32 = [&p](uint32_t v) {
    for (int i = 0; i < 4; ++i) *p++ = static_cast<char>(v >> (8 * i));
  };
  auto put_bytes = [&](std::string_view b) {
    put32(static_cast<uint32_t>(b.size()));
    std::memcpy(p, b.data(), b.size());
    p += b.size();
  };
  std::memcpy(p, kWriteMagic.data(), kWriteMagic.size());
  p += kWriteMagic.size();
  char* checksum = p;
  p += 8;  // filled once the payload is written
  *p++ = static_cast<char>(kWriteLayout);
  put64(seq);
  put64(prev);
  put64(static_cast<uint64_t>(w.ts));
  put64(static_cast<uint64_t>(w.elements));
  put64(static_cast<uint64_t>(w.bytes));
  put_bytes(w.tx);
  put_bytes(w.param);
  put32(static_cast<uint32_t>(w.box.size()));
  for (const Range& r : w.box) {
    put64(static_cast<uint64_t>(r.begin));
    put64(static_cast<uint64_t>(r.end));
  }
  put32(static_cast<uint32_t>(w.shards.size()));
  for (const std::string& s : w.shards) put_bytes(s);
  assert(p == out->data() + out->size() && "WRITE record size computed above");
  const uint64_t sum = XXH3_64bits(out->data() + kHeader, out->size() - kHeader);
  p = checksum;
  put64(sum);
}

std::string EncodeWriteRecord(const WriteRecord& w, uint64_t seq, uint64_t prev) {
  std::string out;
  EncodeWriteRecordTo(w, seq, prev, &out);
  return out;
}

bool IsWriteRecordValue(std::string_view value) {
  return value.size() >= kHeader && value.substr(0, 4) == kWriteMagic;
}

Result<WriteRecordView> DecodeWriteRecord(std::string_view value, std::string_view what) {
  WTX_ASSIGN_OR_RETURN(payload, CheckedPayload(value, kWriteMagic, what));
  PayloadReader in(payload);
  WriteRecordView v;
  const uint8_t layout = in.U8();
  v.seq = in.U64();
  v.prev = in.U64();
  v.ts = static_cast<int64_t>(in.U64());
  v.elements = static_cast<int64_t>(in.U64());
  v.bytes = static_cast<int64_t>(in.U64());
  v.tx = in.Bytes();
  v.param = in.Bytes();
  const uint32_t rank = in.U32();
  v.box_bytes = in.Take(16ull * rank);  // fails, without allocating, past the payload
  const uint32_t shards = in.U32();
  v.shard_bytes = in.remaining();
  // Text fields must be UTF-8, as in CBOR text strings: readers print them as JSON.
  bool text_ok = IsUtf8(v.tx) && IsUtf8(v.param);
  for (uint32_t i = 0; i < shards && !in.failed(); ++i) text_ok = IsUtf8(in.Bytes()) && text_ok;
  if (layout != kWriteLayout || in.failed() || !in.done()) {
    return Status::Corruption(std::string(what) + ": malformed binary WRITE record");
  }
  if (!text_ok) {
    return Status::Corruption(std::string(what) +
                              ": malformed binary WRITE record (text that is not UTF-8)");
  }
  // The rule the JSON form's decoder applies to a box: no range ends before it begins.
  for (size_t i = 0; i + 16 <= v.box_bytes.size(); i += 16) {
    const auto begin = static_cast<int64_t>(LoadFixed64(v.box_bytes.data() + i));
    const auto end = static_cast<int64_t>(LoadFixed64(v.box_bytes.data() + i + 8));
    if (begin > end) {
      return Status::Corruption(std::string(what) +
                                ": malformed binary WRITE record (box dimension " +
                                std::to_string(i / 16) + ": end " + std::to_string(end) +
                                " precedes begin " + std::to_string(begin) + ")");
    }
  }
  return v;
}

nlohmann::json WriteRecordView::ToJson() const {
  nlohmann::json box = nlohmann::json::array();
  for (size_t i = 0; i + 16 <= box_bytes.size(); i += 16) {
    box.push_back({static_cast<int64_t>(LoadFixed64(box_bytes.data() + i)),
                   static_cast<int64_t>(LoadFixed64(box_bytes.data() + i + 8))});
  }
  nlohmann::json shards = nlohmann::json::array();
  PayloadReader in(shard_bytes);
  while (!in.done() && !in.failed()) shards.push_back(std::string(in.Bytes()));
  return {{"type", "WRITE"},
          {"tx", std::string(tx)},
          {"param", std::string(param)},
          {"box", box},
          {"elements", elements},
          {"bytes", bytes},
          {"shards", shards},
          {"ts", ts},
          {"seq", seq},
          {"prev", Hex64(prev)}};
}

uint64_t ValueChecksum(std::string_view encoded) {
  if (encoded.size() < kHeader) return 0;
  return LoadFixed64(encoded.data() + 4);
}

Result<nlohmann::json> DecodeValue(std::string_view value, std::string_view what) {
  if (IsWriteRecordValue(value)) {
    WTX_ASSIGN_OR_RETURN(w, DecodeWriteRecord(value, what));
    return w.ToJson();
  }
  WTX_ASSIGN_OR_RETURN(body, CheckedPayload(value, kMagic, what));
  std::optional<nlohmann::json> j =
      ParseCbor(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  if (!j) return Status::Corruption(std::string(what) + ": undecodable CBOR");
  return std::move(*j);
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
