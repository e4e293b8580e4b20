// The Hugging Face layout flags shared by `wtx manifest` and `wtx plan` (hf_flags.h).
#include "tools/wtx/hf_flags.h"

#include "tools/wtx/commands.h"

namespace wtx::cli {

void AddHfFlags(CLI::App* cmd, HfFlags* f) {
  std::string types;
  for (const std::string& t : HfModelTypes()) types += (types.empty() ? "" : "|") + t;
  cmd->add_option("--hf-config", f->hf_config, "config.json (" + types + ")")->required();
  AddIntOption(cmd, "--tp", &f->tp, kRankCountBounds, "tensor-parallel degree")
      ->capture_default_str();
  AddIntOption(cmd, "--ep", &f->ep, kRankCountBounds,
               "expert-parallel degree (vLLM --enable-expert-parallel: ep = dp * tp ranks, "
               "each holding num_experts / ep whole experts)")
      ->capture_default_str();
  cmd->add_option("--expert-placement", f->expert_placement,
                  "linear|round_robin: which experts an expert-parallel rank holds")
      ->capture_default_str();
  cmd->add_option("--all2all-backend", f->all2all_backend,
                  "vLLM's --all2all-backend: with ep > tp, round_robin placement survives only "
                  "on deepep_low_latency or nixl_ep (vLLM falls back to linear otherwise)")
      ->capture_default_str();
  cmd->add_option_function<std::string>(
      "--dtype",
      [f](const std::string& v) {
        f->dtype = v;
        f->dtype_given = true;
      },
      "bf16|f16|f32: store every weight so, ignoring quantization_config (default: "
      "the config's torch_dtype, fp8 block-quantized linears when the config says "
      "so)");
}

Result<HfManifestOptions> HfOptionsFromFlags(const HfFlags& f) {
  HfManifestOptions options;
  options.tp = f.tp;
  options.ep = f.ep;
  auto placement = ExpertPlacementFromName(f.expert_placement);
  if (!placement) {
    return Status::InvalidArgument("--expert-placement: unknown '" + f.expert_placement +
                                   "' (linear|round_robin)");
  }
  options.expert_placement = *placement;
  if (f.all2all_backend.empty()) {
    return Status::InvalidArgument(
        "--all2all-backend: empty (e.g. allgather_reducescatter, "
        "deepep_low_latency)");
  }
  options.all2all_backend = f.all2all_backend;
  if (f.dtype_given && f.dtype.empty()) {
    return Status::InvalidArgument(
        "--dtype: empty (bf16|f16|f32, or leave the flag out for the "
        "config's torch_dtype)");
  }
  if (!f.dtype.empty()) {
    auto dt = DTypeFromName(f.dtype);
    if (!dt || (*dt != DType::kBF16 && *dt != DType::kF16 && *dt != DType::kF32)) {
      return Status::InvalidArgument("--dtype: unknown '" + f.dtype + "' (bf16|f16|f32)");
    }
    options.dtype = *dt;
  }
  return options;
}

std::string FlagMessage(const Status& s) {
  const std::string& m = s.message();
  if (m.rfind("tp ", 0) == 0 || m.rfind("rank ", 0) == 0 || m.rfind("ep ", 0) == 0) {
    return "--" + m;
  }
  return m;
}

}  // namespace wtx::cli
