// qwen3 layout (vLLM Qwen3ForCausalLM): the llama layout with per-head RMS norms of q and k
// (`self_attn.q_norm.weight`, `self_attn.k_norm.weight`, [head_dim]), head_dim from the config,
// q/k/v biases only with attention_bias.
#include "src/layouts/hf_families.h"

namespace wtx::hf {

Status BuildQwen3(const ConfigReader& c, Builder* b) {
  WTX_ASSIGN_OR_RETURN(frame, ReadDecoderFrame(c, *b));
  WTX_ASSIGN_OR_RETURN(inter, c.PositiveInt("intermediate_size"));
  WTX_ASSIGN_OR_RETURN(attention_bias, c.BoolOr("attention_bias", false));
  WTX_RETURN_IF_ERROR(CheckTpDivides(b->tp(), inter, "intermediate_size"));
  frame.attn.qkv_bias = attention_bias;
  frame.attn.qk_norm = true;
  return AddDecoder(b, frame, [&](int64_t layer) {
    return AddDenseMlpModule(b, layer, frame.attn.hidden, inter, false);
  });
}

}  // namespace wtx::hf
