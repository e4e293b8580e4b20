// llama / mistral / qwen2 layouts (vLLM LlamaForCausalLM, which also serves
// MistralForCausalLM, and Qwen2ForCausalLM).
#include "src/layouts/hf_families.h"

namespace wtx::hf {

namespace {

Status BuildLlamaShaped(const ConfigReader& c, bool qwen2, Builder* b) {
  WTX_ASSIGN_OR_RETURN(frame, ReadDecoderFrame(c, *b));
  WTX_ASSIGN_OR_RETURN(inter, c.PositiveInt("intermediate_size"));
  WTX_ASSIGN_OR_RETURN(attention_bias, c.BoolOr("attention_bias", false));
  WTX_ASSIGN_OR_RETURN(mlp_bias, c.BoolOr("mlp_bias", false));
  WTX_RETURN_IF_ERROR(CheckTpDivides(b->tp(), inter, "intermediate_size"));
  // Qwen2 always has q/k/v biases and never o_proj / MLP biases; llama follows its flags.
  frame.attn.qkv_bias = qwen2 || attention_bias;
  frame.attn.o_bias = !qwen2 && attention_bias;
  const bool gated_bias = !qwen2 && mlp_bias;
  return AddDecoder(b, frame, [&](int64_t layer) {
    return AddDenseMlpModule(b, layer, frame.attn.hidden, inter, gated_bias);
  });
}

}  // namespace

Status BuildLlama(const ConfigReader& c, Builder* b) { return BuildLlamaShaped(c, false, b); }

Status BuildQwen2(const ConfigReader& c, Builder* b) { return BuildLlamaShaped(c, true, b); }

}  // namespace wtx::hf
