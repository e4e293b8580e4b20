#include "src/checkpoint/checkpoint_slices.h"

#include <set>

namespace wtx {

namespace {

// The live dtype `source` is written in (WriteSource requires one).
DType LiveDTypeOf(const Manifest& m, std::string_view source) {
  const ShardRef& r = m.ShardsOfSource(source).front();
  return m.params()[r.param].dtype;
}

}  // namespace

std::vector<std::string> SourcesOfManifest(const Manifest& manifest) {
  std::set<std::string> names;
  for (const ParamSpec& p : manifest.params()) {
    for (const ShardSpec& s : p.shards) {
      if (!s.padding) names.insert(s.source);  // padding rows read no tensor
    }
  }
  return {names.begin(), names.end()};
}

Result<std::vector<std::string>> CheckCheckpointForManifest(const SafetensorsCheckpoint& checkpoint,
                                                            const Manifest& manifest) {
  std::vector<std::string> missing;
  for (const std::string& source : SourcesOfManifest(manifest)) {
    const CheckpointTensor* t = checkpoint.Find(source);
    if (!t) {
      missing.push_back(source);
      continue;
    }
    WTX_RETURN_IF_ERROR(CheckTensorAgainstManifest(*t, manifest));
    const DType live = LiveDTypeOf(manifest, source);
    if (!DTypeConversionIsExact(t->dtype, live)) {
      return Status::InvalidArgument(
          t->file + ": tensor '" + source + "' is " + std::string(DTypeName(t->dtype)) +
          ", the live parameter is " + std::string(DTypeName(live)) +
          ": that conversion is not exact (wtx converts only bf16/f16/fp8_e4m3 -> f32, "
          "fp8_e4m3 -> bf16/f16, i8/u8 -> i32); load with --dtype " +
          std::string(DTypeName(t->dtype)) + " or convert the checkpoint");
    }
  }
  return missing;
}

uint64_t CheckpointBytesFor(const SafetensorsCheckpoint& checkpoint, const Manifest& manifest) {
  uint64_t total = 0;
  for (const std::string& source : SourcesOfManifest(manifest)) {
    if (const CheckpointTensor* t = checkpoint.Find(source)) total += t->bytes.size();
  }
  return total;
}

Result<SliceLoadReport> WriteCheckpointSlices(const SafetensorsCheckpoint& checkpoint,
                                              Participant& participant,
                                              const std::function<void(uint64_t)>& on_read) {
  const Manifest& m = participant.manifest();
  WTX_ASSIGN_OR_RETURN(missing, CheckCheckpointForManifest(checkpoint, m));
  SliceLoadReport report;
  report.missing = std::move(missing);
  std::vector<uint8_t> converted;
  for (const std::string& source : SourcesOfManifest(m)) {
    const CheckpointTensor* t = checkpoint.Find(source);
    if (!t) continue;
    const DType live = LiveDTypeOf(m, source);
    const void* data = t->bytes.data();
    size_t bytes = t->bytes.size();
    if (t->dtype != live) {
      const size_t count = static_cast<size_t>(NumElements(t->shape));
      converted.resize(count * DTypeSize(live));
      ConvertDType(t->dtype, live, data, converted.data(), count);
      data = converted.data();
      bytes = converted.size();
    }
    // In the live dtype, the file is read straight into the live tensors (pread: no page
    // fault per 4 KiB of the mapping); converted ones are written from the conversion.
    Result<int> n = data == t->bytes.data() && t->fd >= 0
                        ? participant.WriteSourceFromFile(
                              source, SourceFile{t->fd, t->file_offset, t->file, data})
                        : participant.WriteSource(source, data, bytes);
    if (!n.ok()) {
      // A failed read already names the file.
      if (n.status().code() == ErrorCode::kIOError) return n.status();
      return Status(n.status().code(), t->file + ": " + n.status().message());
    }
    report.shards += n.value();
    report.bytes += t->bytes.size();
    if (on_read) on_read(t->bytes.size());
  }
  return report;
}

}  // namespace wtx
