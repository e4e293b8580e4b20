// Internal: the model families of ManifestFromHfConfig. Each reads its fields from a
// config.json and lays out one TP rank into a Builder; errors name the config field.
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include "src/layouts/hf_builder.h"

namespace wtx::hf {

// llama and qwen2: fused qkv_proj (q/k/v, with bias for qwen2 or attention_bias), o_proj,
// gate_up_proj, down_proj, vocab-parallel embed_tokens and lm_head (none when tied).
Status BuildLlamaFamily(const ConfigReader& config, bool qwen2, Builder* b);

// deepseek_v3 and kimi_k2: MLA attention (fused_qkv_a_proj, q_b_proj, kv_b_proj with derived
// W_UK_T / W_UV), dense MLP below first_k_dense_replace, MoE above (router, stacked routed
// experts, shared experts). The multi-token-prediction layers are not part of the model.
Status BuildDeepseekV3Family(const ConfigReader& config, Builder* b);

}  // namespace wtx::hf
