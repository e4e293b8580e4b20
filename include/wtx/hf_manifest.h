// Manifests generated from a Hugging Face config.json, laid out as vLLM lays out one rank:
// fused QKV / gate-up / MLA-A projections, stacked MoE experts, column-, row- and vocab-parallel
// slicing (vocabulary padded to a multiple of 64), replicated norms and routers, fp8 block
// scales, MLA derived matrices, and expert parallelism as vLLM's --enable-expert-parallel.
//
// Contract: ManifestFromHfConfig returns the validated (Manifest::Build) manifest of rank
// `options.rank` of a group of options.GroupSize() ranks: tp without expert parallelism; with
// it (ep > 1) the ep = dp * tp ranks of vLLM's expert-parallel world, where attention and dense
// layers are tp-sliced by rank % tp (and replicated over the dp = ep / tp replicas) and each
// rank holds num_experts / ep whole experts. Live parameter names are vLLM's
// (`model.layers.3.self_attn.qkv_proj.weight`); shard sources are checkpoint names
// (`model.layers.3.self_attn.k_proj.weight`) with shard ids as vLLM's loaded_shard_id (`q`,
// `k`, `v`, `0`, `1`, `e7.w1` = local expert slot 7). All ranks of one group have identical
// names, dtypes, shapes, shard ids, modules and derived states, hence the same Fingerprint();
// only their sources and source boxes differ, and over the ranks of the group every element of
// every source tensor is held exactly once per replica, except replicated tensors (once per
// rank) and KV heads replicated because num_key_value_heads < tp (tp / num_key_value_heads
// times). Vocabulary padding rows are padding shards (no source). Supported model_type values:
// HfModelTypes(). Errors are kInvalidArgument naming the offending config field or option
// ("model_type: unknown 'gpt2' (...)", "tp 3 does not divide num_attention_heads 32",
// "ep 3 does not divide n_routed_experts 256"); ManifestFromHfConfigFile prefixes them with
// the path and adds kIOError for an unreadable file.
// The layout rules are described in docs/manifest.md.
//
// Thread-safety: the functions are pure (no shared state); safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "wtx/dtype.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

// Which global experts an expert-parallel rank holds (vLLM's expert_placement_strategy).
enum class ExpertPlacement {
  kLinear,      // rank r: experts [r * E/ep, (r + 1) * E/ep)
  kRoundRobin,  // rank r: experts r, r + ep, r + 2 * ep, ...
};
std::string_view ExpertPlacementName(ExpertPlacement p);  // "linear", "round_robin"
std::optional<ExpertPlacement> ExpertPlacementFromName(std::string_view name);

struct HfManifestOptions {
  int tp = 1;    // tensor-parallel degree
  int rank = 0;  // 0 <= rank < GroupSize()
  // Expert-parallel degree. 1: every rank holds every expert, tp-sliced. > 1: a multiple of tp
  // (vLLM's EP group is dp x tp); MoE layers are not tensor-sliced and each rank holds
  // num_experts / ep whole experts. Refused for a model without experts.
  int ep = 1;
  // As requested; the manifest uses EffectiveExpertPlacement(config, *this).
  ExpertPlacement expert_placement = ExpertPlacement::kLinear;
  // vLLM's --all2all-backend (ParallelConfig.all2all_backend): decides whether round_robin
  // survives when ep > tp (EffectiveExpertPlacement).
  std::string all2all_backend = "allgather_reducescatter";
  // nullopt: the config's torch_dtype (bfloat16, float16; float32 or absent: bf16, as vLLM's
  // dtype=auto downcasts), with fp8 block-quantized linears when the config has an fp8
  // quantization_config; set (e.g. bf16): that dtype, quantization config ignored.
  std::optional<DType> dtype;

  // Ranks of one group: ep with expert parallelism, else tp.
  int GroupSize() const { return ep > 1 ? ep : tp; }
};

// The placement vLLM applies for `options.expert_placement` on a model with this config.json
// (determine_expert_placement_strategy in vLLM's fused_moe layer): round_robin only when
//  * the model has expert groups (`n_group` > 1; Kimi-K2 and the Qwen3-MoE and Mixtral families
//    have none) and no redundant experts or EPLB (which wtx does not model), and
//  * where the MoE layers use all-to-all kernels (expert parallelism over several data-parallel
//    ranks: ep > tp), the all-to-all backend keeps round-robin routing tables
//    (`deepep_low_latency`, `nixl_ep`); vLLM's default backend (`allgather_reducescatter`) does
//    not, and vLLM falls back to linear.
// Otherwise linear. `why` (optional) says which rule decided.
ExpertPlacement EffectiveExpertPlacement(const nlohmann::json& config,
                                         const HfManifestOptions& options,
                                         std::string* why = nullptr);

// The supported config.json model_type values, in registration order.
std::vector<std::string> HfModelTypes();

// REQUIRES: config is a parsed config.json object (anything else is reported as an error).
Result<ManifestPtr> ManifestFromHfConfig(const nlohmann::json& config,
                                         const HfManifestOptions& options);
// Every rank of the group `options` describes (options.rank is ignored), in rank order, laid
// out on up to one thread per core; the first failing rank's error otherwise.
Result<std::vector<ManifestPtr>> ManifestsOfGroup(const nlohmann::json& config,
                                                  const HfManifestOptions& options);
// Reads and parses `path`, then ManifestFromHfConfig.
Result<ManifestPtr> ManifestFromHfConfigFile(const std::string& path,
                                             const HfManifestOptions& options);

// Sizes of one rank's manifest: elements and bytes of its live parameters, their count, and
// their shard count.
struct ManifestSummary {
  int64_t params = 0;
  int64_t bytes = 0;
  size_t tensors = 0;
  size_t shards = 0;
};
ManifestSummary Summarize(const Manifest& m);

}  // namespace wtx
