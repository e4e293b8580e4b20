// qwen3_moe layout (vLLM Qwen3MoeForCausalLM): qwen3 attention (q_norm / k_norm); decoder layer
// N is MoE when N is not in mlp_only_layers, num_experts > 0 and (N + 1) % decoder_sparse_step
// == 0, with a replicated router `mlp.gate.weight` [E, H] (fp8 with block scales in the fp8
// layout unless ignored), stacked experts and, with shared_expert_intermediate_size > 0, a shared
// expert; the other layers have the dense gated MLP of intermediate_size.
#include <algorithm>

#include "src/layouts/hf_families.h"

namespace wtx::hf {

Status BuildQwen3Moe(const ConfigReader& c, Builder* b) {
  WTX_ASSIGN_OR_RETURN(frame, ReadDecoderFrame(c, *b));
  WTX_ASSIGN_OR_RETURN(attention_bias, c.BoolOr("attention_bias", false));
  WTX_ASSIGN_OR_RETURN(experts, c.IntOr("num_experts", 0, 0));
  WTX_ASSIGN_OR_RETURN(sparse_step, c.IntOr("decoder_sparse_step", 1, 1));
  WTX_ASSIGN_OR_RETURN(mlp_only, c.IntListOr("mlp_only_layers"));
  frame.attn.qkv_bias = attention_bias;
  frame.attn.qk_norm = true;
  const int64_t hidden = frame.attn.hidden;

  auto is_moe = [&](int64_t layer) {
    return experts > 0 && (layer + 1) % sparse_step == 0 &&
           std::find(mlp_only.begin(), mlp_only.end(), layer) == mlp_only.end();
  };
  const LayerKinds kinds = ClassifyLayers(frame.layers, is_moe);

  int64_t inter = 0;
  if (kinds.dense) {
    WTX_ASSIGN_OR_RETURN(i, c.PositiveInt("intermediate_size"));
    WTX_RETURN_IF_ERROR(CheckTpDivides(b->tp(), i, "intermediate_size"));
    inter = i;
  }
  ExpertsSpec spec;
  if (!kinds.moe) {
    // Read (so it counts as modeled) though no layer has experts: nothing is built from it.
    WTX_RETURN_IF_ERROR(c.IntOr("moe_intermediate_size", 0, 0).status());
  }
  if (kinds.moe) {
    WTX_ASSIGN_OR_RETURN(i, c.PositiveInt("moe_intermediate_size"));
    spec = {experts, "num_experts", hidden, i, "moe_intermediate_size", {}};
    spec.quantized_router = true;  // vLLM's Qwen3MoeSparseMoeBlock gives its gate quant_config
    WTX_RETURN_IF_ERROR(CheckTpAtMostExperts(b->tp(), experts, "num_experts"));
    WTX_RETURN_IF_ERROR(b->CheckExperts(spec, frame.layers));
  }

  // The shared expert beside the routed ones (vLLM's Qwen3-MoE with
  // shared_expert_intermediate_size > 0): a TP-sliced gated MLP `mlp.shared_expert` and its
  // replicated gate `mlp.shared_expert_gate.weight` [1, hidden].
  WTX_ASSIGN_OR_RETURN(shared_inter, c.IntOr("shared_expert_intermediate_size", 0, 0));
  if (kinds.moe && shared_inter > 0) {
    WTX_RETURN_IF_ERROR(CheckTpDivides(b->tp(), shared_inter, "shared_expert_intermediate_size"));
  }
  auto shared = [&](const std::string& module) -> Status {
    if (shared_inter == 0) return Status::OK();
    WTX_RETURN_IF_ERROR(AddGatedMlp(b, module + ".shared_expert", hidden, shared_inter, false));
    b->AddReplicated(module + ".shared_expert_gate.weight", {1, hidden}, b->format().dtype);
    return Status::OK();
  };
  return AddDecoder(b, frame, [&](int64_t layer) {
    if (!is_moe(layer)) return AddDenseMlpModule(b, layer, hidden, inter, false);
    return AddRoutedMoeModule(b, layer, "mlp", spec, shared);
  });
}

}  // namespace wtx::hf
