// Expected versions: what the sender knows it sent. From the full source tensors (by
// checkpoint name) and the manifest of every rank, computes each rank's content digest and the
// combined version a transaction that writes exactly those tensors must commit, with the very
// content-hash code the participants use (content_hash.h), so that Coordinator::Commit
// (CommitOptions::expect_version) can refuse a commit whose live bytes differ from what was
// sent.
//
// Contract: every parameter of every rank must be fully determined by the sources -- each of
// its shards' sources present, with the manifest's source_shape, in the parameter's dtype
// (bytes = elements x dtype size). The expectation is that of a `full` transaction: the rank's
// live bytes are exactly the sources' slices. Packed shards (live bytes not a translation of
// the source) cannot be predicted and are refused. Errors are kInvalidArgument (or kNotFound
// for a source that is absent) naming the rank, the parameter, the shard and the source.
//
// Thread-safety: pure functions; the lookup callback is called from the calling thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wtx/dtype.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

// A full source tensor as the sender holds it: row-major bytes of `shape` in `dtype`.
struct SourceTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  const void* data = nullptr;
  size_t bytes = 0;
};

struct ExpectedVersion {
  std::string version;                    // CombineRankDigests(rank_digests)
  std::vector<std::string> rank_digests;  // rank order, as Vote::digest / RankDigest
};

// The source tensor named `name`, or nullopt when the sender has none. The returned bytes must
// stay valid until ComputeExpectedVersion returns.
using SourceLookup = std::function<std::optional<SourceTensor>(std::string_view name)>;

// rank_manifests[r] is rank r's manifest. REQUIRES: no null pointer.
Result<ExpectedVersion> ComputeExpectedVersion(const std::vector<const Manifest*>& rank_manifests,
                                               const std::vector<SourceTensor>& sources);
Result<ExpectedVersion> ComputeExpectedVersion(const std::vector<const Manifest*>& rank_manifests,
                                               const SourceLookup& lookup);
// One rank's digest (the same rules, one manifest).
Result<std::string> ComputeExpectedRankDigest(const Manifest& manifest, const SourceLookup& lookup);

}  // namespace wtx
