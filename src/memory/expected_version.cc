// ComputeExpectedVersion: the digests a full transaction writing exactly the given source
// tensors must produce, through the participant's own hash functions (content_hash.h).
#include "wtx/expected_version.h"

#include <map>

#include "wtx/content_hash.h"

namespace wtx {

namespace {

std::string Where(int rank, const ParamSpec& p, const ShardSpec& s) {
  return (rank >= 0 ? "rank " + std::to_string(rank) + ": " : std::string()) + "parameter '" +
         p.name + "' shard '" + s.id + "' (source '" + s.source + "')";
}

Result<std::string> RankDigestOf(const Manifest& m, int rank, const SourceLookup& lookup) {
  const auto& params = m.params();
  std::vector<uint64_t> digests(params.size());
  std::vector<uint8_t> live;
  std::vector<uint8_t> converted;
  std::vector<uint8_t> slice;
  for (uint32_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    const size_t esz = DTypeSize(p.dtype);
    live.assign(static_cast<size_t>(p.num_bytes()), 0);
    for (const ShardSpec& s : p.shards) {
      // Padding rows stay zeros, what vLLM's loader leaves: hashed with the rest, as live.
      if (s.padding) continue;
      if (s.packed) {
        return Status::InvalidArgument(Where(rank, p, s) +
                                       " is packed: its live bytes cannot be predicted");
      }
      std::optional<SourceTensor> t = lookup(s.source);
      if (!t) return Status(ErrorCode::kNotFound, Where(rank, p, s) + ": no such source tensor");
      if (Shape(t->shape) != s.source_shape) {
        return Status::InvalidArgument(Where(rank, p, s) + ": source shape " +
                                       BoxToString(WholeBox(t->shape)) + ", the manifest's is " +
                                       BoxToString(WholeBox(s.source_shape)));
      }
      const size_t count = static_cast<size_t>(NumElements(s.source_shape));
      if (t->bytes != count * DTypeSize(t->dtype) || (count > 0 && t->data == nullptr)) {
        return Status::InvalidArgument(Where(rank, p, s) + ": " + std::to_string(t->bytes) +
                                       " bytes, expected " +
                                       std::to_string(count * DTypeSize(t->dtype)) + " (" +
                                       std::string(DTypeName(t->dtype)) + ")");
      }
      if (!DTypeConversionIsExact(t->dtype, p.dtype)) {
        return Status::InvalidArgument(
            Where(rank, p, s) + ": source dtype " + std::string(DTypeName(t->dtype)) +
            " cannot be converted exactly to the live dtype " + std::string(DTypeName(p.dtype)));
      }
      // Slice out of the source (converted first when the dtypes differ), then into the box.
      const uint8_t* src = static_cast<const uint8_t*>(t->data);
      slice.resize(static_cast<size_t>(NumElements(s.source_box)) * esz);
      if (t->dtype != p.dtype) {
        std::vector<uint8_t> raw(static_cast<size_t>(NumElements(s.source_box)) *
                                 DTypeSize(t->dtype));
        CopyBoxOut(s.source_shape, s.source_box, DTypeSize(t->dtype), src, raw.data());
        ConvertDType(t->dtype, p.dtype, raw.data(), slice.data(),
                     static_cast<size_t>(NumElements(s.source_box)));
      } else {
        CopyBoxOut(s.source_shape, s.source_box, esz, src, slice.data());
      }
      CopyBoxIn(p.shape, s.box, esz, slice.data(), live.data());
    }
    digests[i] = ParamDigest(live);
  }
  return RankDigest(m, digests);
}

}  // namespace

Result<std::string> ComputeExpectedRankDigest(const Manifest& manifest,
                                              const SourceLookup& lookup) {
  return RankDigestOf(manifest, -1, lookup);
}

Result<ExpectedVersion> ComputeExpectedVersion(const std::vector<const Manifest*>& rank_manifests,
                                               const SourceLookup& lookup) {
  if (rank_manifests.empty()) return Status::InvalidArgument("expected version of no rank");
  ExpectedVersion out;
  for (size_t r = 0; r < rank_manifests.size(); ++r) {
    if (!rank_manifests[r]) {
      return Status::InvalidArgument("rank " + std::to_string(r) + ": no manifest");
    }
    auto d = RankDigestOf(*rank_manifests[r], static_cast<int>(r), lookup);
    if (!d.ok()) return d.status();
    out.rank_digests.push_back(std::move(d).value());
  }
  out.version = CombineRankDigests(out.rank_digests);
  return out;
}

Result<ExpectedVersion> ComputeExpectedVersion(const std::vector<const Manifest*>& rank_manifests,
                                               const std::vector<SourceTensor>& sources) {
  std::map<std::string, const SourceTensor*, std::less<>> by_name;
  for (const SourceTensor& t : sources) {
    if (!by_name.emplace(t.name, &t).second) {
      return Status::InvalidArgument("source tensor '" + t.name + "' given twice");
    }
  }
  return ComputeExpectedVersion(rank_manifests,
                                [&](std::string_view name) -> std::optional<SourceTensor> {
                                  auto it = by_name.find(name);
                                  if (it == by_name.end()) return std::nullopt;
                                  return *it->second;
                                });
}

}  // namespace wtx
