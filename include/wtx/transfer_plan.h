// Transfer plans (docs/m2n.md): which trainer rank sends which piece of which source tensor to
// which engine rank, when a sharded trainer (FSDP, Megatron-style TP, EP) updates engine ranks
// that each hold their own shards -- an M-to-N update, without gathering any tensor.
//
// Contract: PlanTransfer returns the minimal list of pieces such that every element each
// engine rank needs (the source boxes of its non-padding shards) is sent to that rank exactly
// once, by one trainer rank that holds it. An element several trainer ranks hold (a replicated
// norm, a TP trainer's replicated KV heads) is sent by one of them, the holders taken in turn
// starting at rank `engine % trainer ranks`, so replicated tensors spread over the senders. A
// piece never spans two of an engine rank's needed boxes, so it lies inside one source box of
// a shard of its engine rank, and lands there with WriteSource(source, data, box) or
// Reserve/Landed by source box. When some element an engine rank needs is held by no trainer
// rank, the plan is refused (kInvalidArgument) naming the source, the box and the engine rank;
// a sharding that names a source no engine rank holds, a box outside its source, or boxes of
// one trainer rank that overlap, is refused naming the trainer rank, source and box. The plan
// carries each engine rank's manifest fingerprint and layout digest: CheckPlanForEngine refuses
// a plan made for another manifest or another rank.
//
// Thread-safety: the functions are pure; a TrainerSharding and a TransferPlan are immutable
// after construction, safe to read from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "wtx/box.h"
#include "wtx/dtype.h"
#include "wtx/hf_manifest.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

// What each trainer rank holds of each source tensor.
class TrainerSharding {
 public:
  virtual ~TrainerSharding() = default;
  virtual int ranks() const = 0;
  // The one-line spec ("fsdp:4", "tp:2", "explicit:3").
  virtual const std::string& spec() const = 0;
  // Calls fn(rank, box) for every box a trainer rank holds of `source` (of shape `shape`) that
  // intersects `region`, in rank order. The boxes of one rank are disjoint.
  virtual void ForEachHolder(std::string_view source, const Shape& shape, const Box& region,
                             const std::function<void(int, const Box&)>& fn) const = 0;
  // The same boxes, starting at the first rank >= `first` and wrapping around to the ranks
  // before it (the rotation that spreads a replicated tensor's senders), until fn returns
  // false (the planner stops once the region is covered: one holder of a tensor replicated
  // over hundreds of ranks is asked, not all). The default rotates ForEachHolder's answer.
  virtual void ForEachHolderFrom(std::string_view source, const Shape& shape, const Box& region,
                                 int first, const std::function<bool(int, const Box&)>& fn) const;
  // Checks the sharding against the sources the engine holds (`shape_of(name)`: the source's
  // shape, or null when no engine rank holds it): OK, or kInvalidArgument naming the trainer
  // rank, source and box that do not fit.
  virtual Status Check(const std::function<const Shape*(std::string_view)>& shape_of) const {
    return Status::OK();
  }
};

// FSDP (FSDP2's dim-0 sharding, torch.chunk): rank r of K holds rows [r*c, min((r+1)*c, n))
// of every source of n rows, c = ceil(n / K); ranks past the last row hold nothing.
// kInvalidArgument unless 1 <= ranks <= kMaxRanks.
Result<std::unique_ptr<TrainerSharding>> FsdpSharding(int ranks);
// A trainer laid out as engine ranks are (Megatron-style TP / EP, the same slicing as vLLM's):
// rank r holds the source boxes of the shards of manifests[r]. `spec` names it in messages.
Result<std::unique_ptr<TrainerSharding>> ManifestSharding(std::vector<ManifestPtr> manifests,
                                                          std::string spec);
// Explicit holdings: holdings[r] maps a source name to the boxes trainer rank r holds of it
// (source coordinates). Check() refuses boxes outside their source, overlapping boxes of one
// rank, and sources no engine rank holds.
Result<std::unique_ptr<TrainerSharding>> ExplicitSharding(
    std::vector<std::map<std::string, std::vector<Box>, std::less<>>> holdings);
// One-line specs: "fsdp:K"; "tp:K", "ep:E" or "tp:T,ep:E" (the trainer holds what rank r of a
// vLLM group of those degrees holds of the model of `hf_config`; `base` gives the dtype and
// expert placement). Errors name the spec and what is wrong in it.
Result<std::unique_ptr<TrainerSharding>> ParseTrainerSpec(std::string_view spec,
                                                          const nlohmann::json* hf_config,
                                                          const HfManifestOptions& base = {});

// One piece of a plan: trainer rank `trainer` sends the box `ranges[first_range ..
// first_range + rank of the source)` of source `source` (an index into TransferPlan::sources)
// to engine rank `engine`.
struct PlannedPiece {
  int32_t trainer = 0;
  int32_t engine = 0;
  uint32_t source = 0;
  uint32_t first_range = 0;
};

struct PlannedSource {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;  // the live dtype of the parameters it feeds
};

struct TransferPlan {
  std::string trainer_spec;
  int trainer_ranks = 0;
  int engine_ranks = 0;
  std::vector<std::string> engine_fingerprints;  // Manifest::Fingerprint() per engine rank
  std::vector<std::string> engine_layouts;       // EngineLayoutDigest() per engine rank
  std::vector<PlannedSource> sources;            // in the order the engine ranks name them
  std::vector<PlannedPiece> pieces;  // by engine rank, then source order, then trainer rank
  std::vector<Range> ranges;         // the pieces' boxes, back to back

  Box BoxOf(size_t piece) const;
  int64_t BytesOf(size_t piece) const;
  int64_t TotalBytes() const;
  // Bytes each trainer rank sends / each engine rank receives.
  std::vector<int64_t> BytesPerTrainer() const;
  std::vector<int64_t> BytesPerEngine() const;
  // All three in one pass over the pieces.
  struct Sizes {
    int64_t total = 0;
    std::vector<int64_t> per_trainer, per_engine;
  };
  Sizes BytesByRank() const;
  // The plan as JSON (docs/m2n.md, "Plan format"); PlanFromJson reads it back, refusing
  // anything malformed naming the field (and the piece index).
  nlohmann::json ToJson() const;
  // The same JSON as text, written straight from the plan without a JSON document in between:
  // what `wtx plan --json/--out` and Python's to_json() write (a plan of millions of pieces
  // costs its text and nothing more). Parses to exactly ToJson().
  std::string ToJsonText() const;
};

Result<TransferPlan> PlanFromJson(const nlohmann::json& j);

// REQUIRES: engine[n] is engine rank n's manifest. `on_rank` (optional) is called after each
// engine rank is planned with (ranks planned, engine.size()): `wtx plan`'s progress.
Result<TransferPlan> PlanTransfer(
    const TrainerSharding& trainer, std::span<const ManifestPtr> engine,
    const std::function<void(size_t planned, size_t ranks)>& on_rank = nullptr);

// A digest of what rank `m` holds where: its fingerprint and, for each shard, its source and
// source box (the fingerprint alone does not tell the ranks of a group apart). Hex XXH3-128.
std::string EngineLayoutDigest(const Manifest& m);
// OK when `m` is the manifest of engine rank `rank` the plan was made for; kInvalidArgument
// naming the rank and what differs (rank out of range, fingerprint, layout) otherwise.
Status CheckPlanForEngine(const TransferPlan& plan, int rank, const Manifest& m);

}  // namespace wtx
