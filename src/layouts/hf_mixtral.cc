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
  const ExpertsSpec spec{experts, "num_local_experts", hidden,
                         inter,   "intermediate_size", {".w1", ".w3", ".w2"}};
  WTX_RETURN_IF_ERROR(b->CheckExperts(spec));

  return AddDecoder(b, frame, [&](int64_t layer) -> Status {
    const std::string lp = "model.layers." + std::to_string(layer);
    const std::string moe = lp + ".block_sparse_moe";
    b->BeginModule(moe);
    b->AddReplicated(lp + ".post_attention_layernorm.weight", {hidden}, b->format().dtype);
    b->AddReplicated(moe + ".gate.weight", {experts, hidden}, b->format().dtype);
    WTX_RETURN_IF_ERROR(b->AddExperts(moe, spec));
    b->AddModuleScalesDerived(moe + ".fp8_scales");
    return Status::OK();
  });
}

}  // namespace wtx::hf
