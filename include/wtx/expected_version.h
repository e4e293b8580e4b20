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
// ExpectedVersionBuilder computes the same digests while the sources go out, one source at a
// time in any order (the trainer hashes each piece as it leaves, overlapped with the transfer):
// every byte of a source is read once and hashed where it lands in each rank's parameters,
// only the hash chunks a source cuts are buffered until the sources that fill them come.
// ComputeExpectedVersion is a builder fed every source at once.
//
// Thread-safety: the functions are pure and call the lookup from the calling thread only; an
// ExpectedVersionBuilder has one owner (no internal locking; Add and Finish from one thread at a
// time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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

class ExpectedVersionBuilder {
 public:
  // rank_manifests[r] is rank r's manifest; the manifests must outlive the builder. Refuses
  // (kInvalidArgument naming rank, parameter, shard) a manifest with a packed shard, whose live
  // bytes cannot be predicted, or a null manifest.
  static Result<std::unique_ptr<ExpectedVersionBuilder>> Create(
      const std::vector<const Manifest*>& rank_manifests);
  ~ExpectedVersionBuilder();
  ExpectedVersionBuilder(const ExpectedVersionBuilder&) = delete;
  ExpectedVersionBuilder& operator=(const ExpectedVersionBuilder&) = delete;

  // Hashes every slice of `source` that a shard of some rank's parameter holds (a source no
  // shard reads is ignored: returns 0) and returns the number of shards it fed. Errors, with
  // nothing taken from `source`: given twice, a shape other than the manifest's source_shape,
  // a byte count other than shape x dtype, a dtype that does not convert exactly to the
  // parameter's (each naming rank, parameter, shard and source).
  // REQUIRES: Finish() not called; `source.data` readable for `source.bytes` during the call.
  Result<size_t> Add(const SourceTensor& source);
  // The version of every rank once every source has come; shards whose source never came are
  // kNotFound naming the first (rank, parameter, shard, source). Padding shards count as zeros.
  // REQUIRES: called once.
  Result<ExpectedVersion> Finish();
  // Sources taken so far.
  size_t sources_added() const;

 private:
  friend Result<std::string> ComputeExpectedRankDigest(const Manifest& manifest,
                                                       const SourceLookup& lookup);
  struct State;
  explicit ExpectedVersionBuilder(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// rank_manifests[r] is rank r's manifest. REQUIRES: no null pointer.
Result<ExpectedVersion> ComputeExpectedVersion(const std::vector<const Manifest*>& rank_manifests,
                                               const std::vector<SourceTensor>& sources);
Result<ExpectedVersion> ComputeExpectedVersion(const std::vector<const Manifest*>& rank_manifests,
                                               const SourceLookup& lookup);
// One rank's digest (the same rules, one manifest).
Result<std::string> ComputeExpectedRankDigest(const Manifest& manifest, const SourceLookup& lookup);

}  // namespace wtx
