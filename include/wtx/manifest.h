// Manifest: what one rank holds — its live parameters, the shards that feed them from source
// (checkpoint) tensors, the modules whose post-load work runs together, and the derived states
// computed from parameters.
//
// Contract: a Manifest obtained from ParseManifest / Manifest::Build is validated: every box
// lies inside its tensor, the shards of a parameter are pairwise disjoint and together cover
// it exactly, each shard's box and source_box have equal extents (the box may carry extra
// leading extent-1 dimensions), every source tensor has one shape, modules and derived states
// name existing parameters, and no size can overflow: every parameter and source tensor has at
// most kMaxTensorDims dimensions and kMaxTensorBytes bytes, all parameters together at most
// kMaxManifestBytes (wtx/limits.h); a manifest beyond them is refused naming the parameter.
// A padding shard (vLLM's padded vocabulary rows) has no source: it is not indexed by source,
// and no transaction requires it to be written. Its Fingerprint() is canonical over names,
// dtypes, shapes, shard ids, served forms, modules and derived states (not over per-rank source
// boxes), so all ranks of a TP group agree on it.
//
// Thread-safety: a Manifest is immutable after construction; concurrent reads are safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "wtx/box.h"
#include "wtx/dtype.h"
#include "wtx/limits.h"
#include "wtx/status.h"

namespace wtx {

enum class Phase { kPostLoad, kAttention, kKernel };
std::string_view PhaseName(Phase phase);

struct ShardSpec {
  std::string id;       // "q", "k", "v", "0", "1", "e3.w1", ...
  std::string source;   // checkpoint tensor name
  Shape source_shape;   // full (unsharded) source shape
  Box box;              // live coordinates
  Box source_box;       // source coordinates (the TP slice)
  bool packed = false;  // live bytes are not a translation of the source
  // Live elements that no source feeds (vLLM's vocabulary padding rows): source, source_shape
  // and source_box are empty; not required coverage; their bytes count in the version.
  bool padding = false;
};

// How a processed parameter is served (docs/manifest.md, "Processed parameters"): the engine's
// post-load processing turns the checkpoint bytes (the parameter's dtype and shape, what its
// shards and the trainer describe) into live storage of another form (fp8 quantization on
// load, repacking). The live tensor bound to the parameter has this dtype and shape.
struct ServedForm {
  DType dtype = DType::kF32;
  Shape shape;
  int64_t num_bytes() const {
    int64_t b = 0;
    if (__builtin_mul_overflow(NumElements(shape), static_cast<int64_t>(DTypeSize(dtype)), &b)) {
      return INT64_MAX;
    }
    return b;
  }
  bool operator==(const ServedForm&) const = default;
};

struct ParamSpec {
  std::string name;
  DType dtype = DType::kF32;  // checkpoint coordinates: what its shards carry
  Shape shape;
  std::vector<ShardSpec> shards;  // never empty once built
  // Set: a processed parameter; its checkpoint bytes never sit in live memory. They are
  // declared as they pass to the engine's loader (Participant::Declare) and the live tensor
  // holds this form. nullopt: the live tensor is the checkpoint bytes.
  std::optional<ServedForm> served;
  // Bytes of the live tensor: the served form's, else the checkpoint's.
  int64_t live_bytes() const { return served ? served->num_bytes() : num_bytes(); }
  // A tensor the engine computes itself in its post-load processing (MLA's absorbed
  // W_UK_T / W_UV): processed, and fed by no source (padding shards only). Nothing is sent
  // for it: its checkpoint bytes are zeros (as the trainer's expected version counts padding)
  // and its live bytes count in the served digest, rehashed at every prepare that wrote.
  bool served_only() const {
    if (!served) return false;
    for (const ShardSpec& s : shards) {
      if (!s.padding) return false;
    }
    return true;
  }
  int64_t num_elements() const { return NumElements(shape); }
  // Saturates at INT64_MAX; a built manifest keeps it within kMaxTensorBytes (wtx/limits.h).
  int64_t num_bytes() const {
    int64_t b = 0;
    if (__builtin_mul_overflow(num_elements(), static_cast<int64_t>(DTypeSize(dtype)), &b)) {
      return INT64_MAX;
    }
    return b;
  }
};

struct ModuleSpec {
  std::string name;
  std::vector<std::string> params;
};

struct DerivedSpec {
  std::string name;
  std::vector<std::string> sources;  // parameter names
  Phase phase = Phase::kPostLoad;
};

// Where a source tensor lands on this rank.
struct ShardRef {
  uint32_t param = 0;
  uint32_t shard = 0;
};

class Manifest {
 public:
  Manifest(const Manifest&) = delete;
  Manifest& operator=(const Manifest&) = delete;

  // Validates and indexes. Errors are kInvalidArgument naming the field
  // ("params[2].shards[1].box: ...").
  static Result<std::shared_ptr<const Manifest>> Build(std::vector<ParamSpec> params,
                                                       std::vector<ModuleSpec> modules,
                                                       std::vector<DerivedSpec> derived);

  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<ModuleSpec>& modules() const { return modules_; }
  const std::vector<DerivedSpec>& derived() const { return derived_; }

  std::optional<uint32_t> FindParam(std::string_view name) const;
  std::optional<uint32_t> FindModule(std::string_view name) const;
  std::optional<uint32_t> FindDerived(std::string_view name) const;
  std::optional<uint32_t> FindShard(uint32_t param, std::string_view shard_id) const;
  // Every shard on this rank fed by `source` (empty if the rank does not hold it).
  const std::vector<ShardRef>& ShardsOfSource(std::string_view source) const;
  bool HoldsSource(std::string_view source) const { return !ShardsOfSource(source).empty(); }
  // The distinct parameters those shards belong to, in manifest order.
  std::vector<uint32_t> ParamsOfSource(std::string_view source) const;
  // Shape of a source tensor, if any shard on this rank names it.
  std::optional<Shape> SourceShape(std::string_view source) const;
  // Derived states that read parameter `param`.
  const std::vector<uint32_t>& DerivedOfParam(uint32_t param) const {
    return derived_of_param_[param];
  }
  // Parameter names in canonical (sorted) order, as indices.
  const std::vector<uint32_t>& CanonicalOrder() const { return canonical_order_; }

  // Hex XXH3-128 over the canonical description.
  const std::string& Fingerprint() const { return fingerprint_; }
  int64_t TotalElements() const;
  int64_t TotalBytes() const;
  size_t TotalShards() const;

  nlohmann::json ToJson() const;

 private:
  Manifest() = default;
  Status Index();

  std::vector<ParamSpec> params_;
  std::vector<ModuleSpec> modules_;
  std::vector<DerivedSpec> derived_;
  std::unordered_map<std::string_view, uint32_t> param_index_;
  std::unordered_map<std::string_view, uint32_t> module_index_;
  std::unordered_map<std::string_view, uint32_t> derived_index_;
  std::unordered_map<std::string_view, std::vector<ShardRef>> source_index_;
  std::vector<std::vector<uint32_t>> derived_of_param_;
  std::vector<uint32_t> canonical_order_;
  std::string fingerprint_;
};

using ManifestPtr = std::shared_ptr<const Manifest>;

// Parses the manifest JSON of spec/scenario.md. Errors name the field.
Result<ManifestPtr> ParseManifest(const nlohmann::json& j);
Result<ManifestPtr> ParseManifestText(std::string_view text);

}  // namespace wtx
