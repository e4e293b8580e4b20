// Manifests generated from a Hugging Face config.json, laid out as vLLM lays out one tensor-
// parallel rank: fused QKV / gate-up / MLA-A projections, stacked MoE experts, column-, row- and
// vocab-parallel slicing, replicated norms and routers, fp8 block scales, MLA derived matrices.
//
// Contract: ManifestFromHfConfig returns the validated (Manifest::Build) manifest of rank
// `options.rank` of a TP group of degree `options.tp`. Live parameter names are vLLM's
// (`model.layers.3.self_attn.qkv_proj.weight`); shard sources are checkpoint names
// (`model.layers.3.self_attn.k_proj.weight`) with shard ids as vLLM's loaded_shard_id (`q`,
// `k`, `v`, `0`, `1`, `e7.w1`). All ranks of one group have identical names, dtypes, shapes,
// shard ids, modules and derived states, hence the same Fingerprint(); only their source boxes
// differ, and over the ranks of the group every element of every source tensor is held exactly
// once, except replicated tensors (once per rank) and KV heads replicated because
// num_key_value_heads < tp (tp / num_key_value_heads times). Supported model_type values:
// llama, qwen2, deepseek_v3, kimi_k2. Errors are kInvalidArgument naming the offending config
// field or option ("model_type: unknown 'gpt2' (...)", "tp 3 does not divide
// num_attention_heads 32"); ManifestFromHfConfigFile prefixes them with the path and adds
// kIOError for an unreadable file.
// The layout rules are described in docs/manifest.md.
//
// Thread-safety: the functions are pure (no shared state); safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "wtx/dtype.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

struct HfManifestOptions {
  int tp = 1;    // tensor-parallel degree
  int rank = 0;  // 0 <= rank < tp
  // nullopt: bf16 weights, fp8 (block 128x128) when the config has an fp8 quantization_config;
  // set (e.g. bf16): that dtype, quantization config ignored.
  std::optional<DType> dtype;
};

// REQUIRES: config is a parsed config.json object (anything else is reported as an error).
Result<ManifestPtr> ManifestFromHfConfig(const nlohmann::json& config,
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
