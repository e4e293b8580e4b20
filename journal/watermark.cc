#include "journal/watermark.h"

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <xxhash.h>

#include "journal/record.h"
#include "src/util/coding.h"
#include "src/util/hash_util.h"

namespace wtx {

namespace {

constexpr std::string_view kCopyMagic = "WTXS";
constexpr uint8_t kCopyLayout = 1;
constexpr size_t kCheckedBytes = kWatermarkCopyBytes - 8;  // everything before the checksum

// The watermark file of journals written before the two copies: EncodeValue({"seq", "head"}).
Result<SyncWatermark> DecodeLegacyWatermark(std::string_view data) {
  auto v = DecodeValue(data, kWatermarkFile);
  if (!v.ok()) return v.status();
  const nlohmann::json& w = v.value();
  if (!w.is_object() || !w.contains("seq") || !w["seq"].is_number_unsigned() ||
      !w.contains("head") || !w["head"].is_string()) {
    return Status::Corruption(std::string(kWatermarkFile) + " lacks seq/head");
  }
  return SyncWatermark{w["seq"].get<uint64_t>(), w["head"].get<std::string>(), 0, kWatermarkFile};
}

}  // namespace

std::string EncodeWatermarkCopy(uint64_t generation, uint64_t seq, uint64_t head) {
  std::string out(kCopyMagic);
  out.push_back(static_cast<char>(kCopyLayout));
  out.append(3, '\0');
  PutFixed64(&out, generation);
  PutFixed64(&out, seq);
  PutFixed64(&out, head);
  PutFixed64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<SyncWatermark> DecodeWatermarkCopy(std::string_view data, const std::string& file) {
  if (data.size() != kWatermarkCopyBytes) {
    return Status::Corruption(file + ": " + std::to_string(data.size()) + " bytes, expected " +
                              std::to_string(kWatermarkCopyBytes) + " (torn or truncated)");
  }
  if (data.substr(0, 4) != kCopyMagic) return Status::Corruption(file + ": not a sync watermark");
  if (XXH3_64bits(data.data(), kCheckedBytes) != LoadFixed64(data.data() + kCheckedBytes)) {
    return Status::Corruption(file + ": checksum mismatch (damaged or torn)");
  }
  if (static_cast<uint8_t>(data[4]) != kCopyLayout || data[5] || data[6] || data[7]) {
    return Status::Corruption(file + ": unknown layout " +
                              std::to_string(static_cast<uint8_t>(data[4])));
  }
  SyncWatermark w;
  w.generation = LoadFixed64(data.data() + 8);
  w.seq = LoadFixed64(data.data() + 16);
  w.head = Hex64(LoadFixed64(data.data() + 24));
  w.file = file;
  return w;
}

std::string WatermarkReading::Problems() const {
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "; ") + p;
  return out;
}

WatermarkReading ReadWatermark(const std::string& dir,
                               const std::shared_ptr<rocksdb::FileSystem>& fs) {
  WatermarkReading r;
  auto f = fs ? fs : rocksdb::FileSystem::Default();
  // nullopt: absent; otherwise the content, or the problem in *problem.
  auto read = [&](const char* name, std::string* data, std::string* problem) {
    const std::string path = dir + "/" + name;
    if (!f->FileExists(path, rocksdb::IOOptions(), nullptr).ok()) return false;
    rocksdb::IOStatus s = rocksdb::ReadFileToString(f.get(), path, data);
    if (!s.ok()) *problem = std::string(name) + ": unreadable: " + s.ToString();
    return true;
  };
  for (int i = 0; i < 2; ++i) {
    std::string data, problem;
    if (!read(kWatermarkCopies[i], &data, &problem)) {
      r.problems.push_back(std::string(kWatermarkCopies[i]) + ": missing");
      continue;
    }
    r.copy_present[i] = true;
    if (problem.empty()) {
      auto w = DecodeWatermarkCopy(data, kWatermarkCopies[i]);
      if (w.ok()) {
        r.copy_valid[i] = true;
        r.valid.push_back(std::move(w).value());
        continue;
      }
      problem = w.status().message();
    }
    r.problems.push_back(problem);
  }
  std::string data, problem;
  if (read(kWatermarkFile, &data, &problem)) {
    r.legacy_present = true;
    if (problem.empty()) {
      auto w = DecodeLegacyWatermark(data);
      if (w.ok()) {
        r.valid.push_back(std::move(w).value());
      } else {
        problem = w.status().message();
      }
    }
    if (!problem.empty()) r.problems.push_back(problem);
  }
  for (const auto& w : r.valid) {
    if (!r.newest || w.seq > r.newest->seq ||
        (w.seq == r.newest->seq && w.generation > r.newest->generation)) {
      r.newest = w;
    }
  }
  return r;
}

}  // namespace wtx
