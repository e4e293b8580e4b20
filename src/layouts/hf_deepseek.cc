// deepseek_v3 / kimi_k2 layouts (vLLM DeepseekV3ForCausalLM: MLA attention, DeepSeekMoE).
#include <string>

#include "src/layouts/hf_families.h"
#include "wtx/limits.h"

namespace wtx::hf {

Status BuildDeepseekV3(const ConfigReader& c, Builder* b) {
  WTX_ASSIGN_OR_RETURN(hidden, c.PositiveInt("hidden_size"));
  WTX_ASSIGN_OR_RETURN(layers, c.PositiveCount("num_hidden_layers", kMaxLayers));
  WTX_ASSIGN_OR_RETURN(heads, c.PositiveInt("num_attention_heads"));
  WTX_ASSIGN_OR_RETURN(vocab, c.PositiveInt("vocab_size"));
  WTX_ASSIGN_OR_RETURN(q_lora_rank, c.OptionalPositiveInt("q_lora_rank"));
  WTX_ASSIGN_OR_RETURN(kv_lora_rank, c.PositiveInt("kv_lora_rank"));
  WTX_ASSIGN_OR_RETURN(nope_dim, c.PositiveInt("qk_nope_head_dim"));
  WTX_ASSIGN_OR_RETURN(rope_dim, c.PositiveInt("qk_rope_head_dim"));
  WTX_ASSIGN_OR_RETURN(v_dim, c.PositiveInt("v_head_dim"));
  WTX_ASSIGN_OR_RETURN(routed_experts, c.OptionalPositiveInt("n_routed_experts"));
  WTX_ASSIGN_OR_RETURN(shared_experts, c.IntOr("n_shared_experts", 0, 0));
  WTX_ASSIGN_OR_RETURN(first_dense, c.IntOr("first_k_dense_replace", 0, 0));
  WTX_ASSIGN_OR_RETURN(moe_freq, c.IntOr("moe_layer_freq", 1, 1));
  WTX_ASSIGN_OR_RETURN(topk_method, c.StringOr("topk_method", "noaux_tc"));
  WTX_ASSIGN_OR_RETURN(tie, c.BoolOr("tie_word_embeddings", false));

  // vLLM's rule for which decoder layers are MoE.
  auto is_moe = [&](int64_t layer) {
    return routed_experts.has_value() && layer >= first_dense && layer % moe_freq == 0;
  };
  const LayerKinds kinds = ClassifyLayers(layers, is_moe);

  int64_t inter = 0, moe_inter = 0;
  if (kinds.dense) {
    WTX_ASSIGN_OR_RETURN(i, c.PositiveInt("intermediate_size"));
    inter = i;
  }
  if (kinds.moe) {
    WTX_ASSIGN_OR_RETURN(i, c.PositiveInt("moe_intermediate_size"));
    moe_inter = i;
  } else {
    // Read (so it counts as modeled) though no layer has experts: nothing is built from it.
    WTX_RETURN_IF_ERROR(c.IntOr("moe_intermediate_size", 0, 0).status());
  }

  const int tp = b->tp();
  WTX_RETURN_IF_ERROR(CheckTpDivides(tp, heads, "num_attention_heads"));
  if (kinds.dense) WTX_RETURN_IF_ERROR(CheckTpDivides(tp, inter, "intermediate_size"));
  ExpertsSpec experts;
  if (kinds.moe) {
    experts = {*routed_experts, "n_routed_experts", hidden, moe_inter, "moe_intermediate_size", {}};
    WTX_RETURN_IF_ERROR(CheckTpAtMostExperts(tp, *routed_experts, "n_routed_experts"));
    WTX_RETURN_IF_ERROR(b->CheckExperts(experts, layers));
    if (shared_experts > 0) {
      WTX_RETURN_IF_ERROR(CheckTpDivides(tp, moe_inter * shared_experts,
                                         "moe_intermediate_size * n_shared_experts"));
    }
  }
  const DType dtype = b->format().dtype;
  const bool fp8 = b->format().fp8.has_value();
  const int64_t qk_dim = nope_dim + rope_dim;
  const int64_t kv_a_rows = kv_lora_rank + rope_dim;
  const Range q_rows = b->TpSlice(heads * qk_dim);
  const Range kv_b_rows = b->TpSlice(heads * (nope_dim + v_dim));
  const Range o_cols = b->TpSlice(heads * v_dim);

  return AddDecoderLayers(b, hidden, layers, vocab, tie, [&](int64_t layer) -> Status {
    const std::string attn = BeginAttentionModule(b, layer, hidden);
    if (q_lora_rank) {
      // The two down-projections read the same input: vLLM fuses them, replicated.
      const LinearPart qkv_a[] = {{"0", attn + ".q_a_proj", *q_lora_rank, {0, *q_lora_rank}},
                                  {"1", attn + ".kv_a_proj_with_mqa", kv_a_rows, {0, kv_a_rows}}};
      WTX_RETURN_IF_ERROR(b->AddLinear(attn + ".fused_qkv_a_proj", qkv_a, hidden, {0, hidden},
                                       false, /*quantized=*/true));
      b->AddReplicated(attn + ".q_a_layernorm.weight", {*q_lora_rank}, dtype);
      const LinearPart q_b[] = {{"0", attn + ".q_b_proj", heads * qk_dim, q_rows}};
      WTX_RETURN_IF_ERROR(b->AddLinear(attn + ".q_b_proj", q_b, *q_lora_rank, {0, *q_lora_rank},
                                       false, /*quantized=*/true));
    } else {
      const LinearPart q[] = {{"0", attn + ".q_proj", heads * qk_dim, q_rows}};
      WTX_RETURN_IF_ERROR(
          b->AddLinear(attn + ".q_proj", q, hidden, {0, hidden}, false, /*quantized=*/true));
      const LinearPart kv_a[] = {{"0", attn + ".kv_a_proj_with_mqa", kv_a_rows, {0, kv_a_rows}}};
      WTX_RETURN_IF_ERROR(b->AddLinear(attn + ".kv_a_proj_with_mqa", kv_a, hidden, {0, hidden},
                                       false, /*quantized=*/true));
    }
    b->AddReplicated(attn + ".kv_a_layernorm.weight", {kv_lora_rank}, dtype);
    const LinearPart kv_b[] = {{"0", attn + ".kv_b_proj", heads * (nope_dim + v_dim), kv_b_rows}};
    WTX_RETURN_IF_ERROR(b->AddLinear(attn + ".kv_b_proj", kv_b, kv_lora_rank, {0, kv_lora_rank},
                                     false, /*quantized=*/true));
    const LinearPart o[] = {{"0", attn + ".o_proj", hidden, {0, hidden}}};
    WTX_RETURN_IF_ERROR(
        b->AddLinear(attn + ".o_proj", o, heads * v_dim, o_cols, false, /*quantized=*/true));
    // MLA absorbs kv_b_proj into the attention kernel: W_UK_T and W_UV are (dequantized)
    // copies of its two halves.
    std::vector<std::string> kv_b_sources{attn + ".kv_b_proj.weight"};
    if (fp8 && !b->format().Lists(attn + ".kv_b_proj"))
      kv_b_sources.push_back(attn + ".kv_b_proj.weight_scale_inv");
    b->AddDerived(attn + ".W_UK_T", kv_b_sources, Phase::kAttention);
    b->AddDerived(attn + ".W_UV", std::move(kv_b_sources), Phase::kAttention);
    b->AddModuleScalesDerived(attn + ".fp8_scales");

    if (!is_moe(layer)) return AddDenseMlpModule(b, layer, hidden, inter, false);
    const std::string mlp = BeginMlpModule(b, layer, hidden, "mlp");
    WTX_RETURN_IF_ERROR(b->AddRouter(mlp, experts));  // vLLM: quant_config=None
    if (topk_method == "noaux_tc") {
      // vLLM keeps the routing bias in f32 whatever the model dtype.
      b->AddReplicated(mlp + ".gate.e_score_correction_bias", {*routed_experts}, DType::kF32);
    }
    WTX_RETURN_IF_ERROR(b->AddExperts(mlp, experts));
    if (shared_experts > 0) {
      // Shared experts are a plain tp-sliced MLP, with or without expert parallelism.
      WTX_RETURN_IF_ERROR(
          AddGatedMlp(b, mlp + ".shared_experts", hidden, moe_inter * shared_experts, false));
    }
    b->AddModuleScalesDerived(mlp + ".fp8_scales");
    return Status::OK();
  });
}

}  // namespace wtx::hf
