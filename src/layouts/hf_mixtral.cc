// mixtral layout (vLLM MixtralForCausalLM): llama attention; every decoder layer is a sparse MoE
// block `model.layers.N.block_sparse_moe` with a replicated router `gate.weight` [E, H] and
// vLLM's FusedMoE experts, fed by the checkpoint's `experts.E.w1` (gate), `w3` (up) and `w2`
// (down) of num_local_experts experts of intermediate_size.
#include "src/layouts/hf_families.h"

namespace wtx::hf {

Status BuildMixtral(const ConfigReader& c, Builder* b) {
  WTX_ASSIGN_OR_RETURN(frame, ReadDecoderFrame(c, *b));
  WTX_ASSIGN_OR_RETURN(experts, c.PositiveInt("num_local_experts"));
  WTX_ASSIGN_OR_RETURN(inter, c.PositiveInt("intermediate_size"));
  const int64_t hidden = frame.attn.hidden;
  ExpertsSpec spec{experts, "num_local_experts", hidden, inter, "intermediate_size", {}};
  spec.names = {".w1", ".w3", ".w2"};
  WTX_RETURN_IF_ERROR(b->CheckExperts(spec, frame.layers));

  return AddDecoder(b, frame, [&](int64_t layer) {
    return AddRoutedMoeModule(b, layer, "block_sparse_moe", spec);
  });
}

}  // namespace wtx::hf
