// llama / qwen2 layouts (vLLM LlamaForCausalLM / Qwen2ForCausalLM).
#include <string>

#include "src/layouts/hf_families.h"

namespace wtx::hf {

Status BuildLlamaFamily(const ConfigReader& c, bool qwen2, Builder* b) {
  WTX_ASSIGN_OR_RETURN(hidden, c.PositiveInt("hidden_size"));
  WTX_ASSIGN_OR_RETURN(layers, c.PositiveInt("num_hidden_layers"));
  WTX_ASSIGN_OR_RETURN(heads, c.PositiveInt("num_attention_heads"));
  WTX_ASSIGN_OR_RETURN(kv_heads, c.IntOr("num_key_value_heads", heads, 1));
  WTX_ASSIGN_OR_RETURN(inter, c.PositiveInt("intermediate_size"));
  WTX_ASSIGN_OR_RETURN(vocab, c.PositiveInt("vocab_size"));
  WTX_ASSIGN_OR_RETURN(head_dim_field, c.OptionalPositiveInt("head_dim"));
  WTX_ASSIGN_OR_RETURN(tie, c.BoolOr("tie_word_embeddings", false));
  WTX_ASSIGN_OR_RETURN(attention_bias, c.BoolOr("attention_bias", false));
  WTX_ASSIGN_OR_RETURN(mlp_bias, c.BoolOr("mlp_bias", false));
  // Qwen2 always has q/k/v biases and never o_proj / MLP biases; llama follows its flags.
  const bool qkv_bias = qwen2 || attention_bias;
  const bool o_bias = !qwen2 && attention_bias;
  const bool gated_bias = !qwen2 && mlp_bias;

  if (!head_dim_field && hidden % heads != 0) {
    return Status::InvalidArgument("head_dim: absent, and num_attention_heads " +
                                   std::to_string(heads) + " does not divide hidden_size " +
                                   std::to_string(hidden));
  }
  const int64_t head_dim = head_dim_field ? *head_dim_field : hidden / heads;
  if (heads % kv_heads != 0) {
    return Status::InvalidArgument("num_key_value_heads: " + std::to_string(kv_heads) +
                                   " does not divide num_attention_heads " + std::to_string(heads));
  }
  const int tp = b->tp();
  WTX_RETURN_IF_ERROR(CheckTpDivides(tp, heads, "num_attention_heads"));
  if (kv_heads >= tp) {
    WTX_RETURN_IF_ERROR(CheckTpDivides(tp, kv_heads, "num_key_value_heads"));
  } else if (tp % kv_heads != 0) {
    return Status::InvalidArgument(
        "num_key_value_heads " + std::to_string(kv_heads) + " does not divide tp " +
        std::to_string(tp) + " (with fewer KV heads than tp, each head is replicated on tp / " +
        "num_key_value_heads ranks)");
  }
  WTX_RETURN_IF_ERROR(CheckTpDivides(tp, inter, "intermediate_size"));
  WTX_RETURN_IF_ERROR(CheckTpDivides(tp, vocab, "vocab_size"));

  const DType dtype = b->format().dtype;
  const Range q_rows = b->TpSlice(heads * head_dim);
  Range kv_rows;
  if (kv_heads >= tp) {
    kv_rows = b->TpSlice(kv_heads * head_dim);
  } else {
    const int64_t head = static_cast<int64_t>(b->rank()) * kv_heads / tp;
    kv_rows = {head * head_dim, (head + 1) * head_dim};
  }

  b->BeginModule("model.embed_tokens");
  b->AddVocabParallel("model.embed_tokens.weight", vocab, hidden);

  for (int64_t layer = 0; layer < layers; ++layer) {
    const std::string lp = "model.layers." + std::to_string(layer);
    const std::string attn = lp + ".self_attn";
    b->BeginModule(attn);
    b->AddReplicated(lp + ".input_layernorm.weight", {hidden}, dtype);
    const LinearPart qkv[] = {{"q", attn + ".q_proj", heads * head_dim, q_rows},
                              {"k", attn + ".k_proj", kv_heads * head_dim, kv_rows},
                              {"v", attn + ".v_proj", kv_heads * head_dim, kv_rows}};
    WTX_RETURN_IF_ERROR(b->AddLinear(attn + ".qkv_proj", qkv, hidden, {0, hidden}, qkv_bias,
                                     /*quantized=*/true));
    const LinearPart o[] = {{"0", attn + ".o_proj", hidden, {0, hidden}}};
    WTX_RETURN_IF_ERROR(
        b->AddLinear(attn + ".o_proj", o, heads * head_dim, q_rows, o_bias, /*quantized=*/true));
    b->AddModuleScalesDerived(attn + ".fp8_scales");

    b->BeginModule(lp + ".mlp");
    b->AddReplicated(lp + ".post_attention_layernorm.weight", {hidden}, dtype);
    WTX_RETURN_IF_ERROR(AddGatedMlp(b, lp + ".mlp", hidden, inter, gated_bias));
    b->AddModuleScalesDerived(lp + ".mlp.fp8_scales");
  }

  AddLmHead(b, hidden, vocab, tie, dtype);
  return Status::OK();
}

}  // namespace wtx::hf
