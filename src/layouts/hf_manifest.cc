#include "wtx/hf_manifest.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/layouts/hf_builder.h"
#include "src/layouts/hf_families.h"
#include "src/util/file_util.h"

namespace wtx {

using nlohmann::json;

namespace {

// The fp8 block layout of an fp8 quantization_config; errors for any other quantization.
Result<hf::Fp8Block> Fp8BlockFromConfig(const json& q) {
  if (!q.is_object()) return Status::InvalidArgument("quantization_config: expected an object");
  hf::ConfigReader r(q);
  WTX_ASSIGN_OR_RETURN(method, r.StringOr("quant_method", ""));
  if (method != "fp8") {
    return Status::InvalidArgument("quantization_config.quant_method: unsupported '" + method +
                                   "' (fp8 with weight_block_size; pass a dtype to ignore the "
                                   "quantization config)");
  }
  WTX_ASSIGN_OR_RETURN(fmt, r.StringOr("fmt", "e4m3"));
  if (fmt != "e4m3") {
    return Status::InvalidArgument("quantization_config.fmt: unsupported '" + fmt + "' (e4m3)");
  }
  auto it = q.find("weight_block_size");
  if (it == q.end() || it->is_null()) {
    return Status::InvalidArgument(
        "quantization_config.weight_block_size: missing (only block-quantized fp8 is supported)");
  }
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
      !(*it)[1].is_number_integer() || (*it)[0].get<int64_t>() <= 0 ||
      (*it)[1].get<int64_t>() <= 0) {
    return Status::InvalidArgument(
        "quantization_config.weight_block_size: expected [block_n, block_k] positive integers, "
        "got " +
        it->dump());
  }
  WTX_ASSIGN_OR_RETURN(scheme, r.StringOr("activation_scheme", "dynamic"));
  if (scheme != "dynamic") {
    // Static activation scales would add input_scale parameters; vLLM refuses them with blocks.
    return Status::InvalidArgument("quantization_config.activation_scheme: unsupported '" + scheme +
                                   "' (block-quantized fp8 is dynamic)");
  }
  return hf::Fp8Block{(*it)[0].get<int64_t>(), (*it)[1].get<int64_t>()};
}

// vLLM's Fp8Config: `ignored_layers`, or `modules_to_not_convert` when that is missing or
// empty; each a list of module names.
Status ReadIgnoredLayers(const json& q, hf::WeightFormat* f) {
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    auto it = q.find(key);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_array()) {
      return Status::InvalidArgument(std::string("quantization_config.") + key +
                                     ": expected a list of module names, got " + it->dump());
    }
    std::vector<std::string> names;
    names.reserve(it->size());
    for (size_t i = 0; i < it->size(); ++i) {
      const json& n = (*it)[i];
      if (!n.is_string()) {
        return Status::InvalidArgument(std::string("quantization_config.") + key + "[" +
                                       std::to_string(i) + "]: expected a module name, got " +
                                       n.dump());
      }
      names.push_back(n.get<std::string>());
    }
    if (names.empty()) continue;
    f->ignored_layers = std::move(names);
    f->ignored_field = key;
    break;
  }
  return Status::OK();
}

// The unquantized dtype of a config without --dtype: its torch_dtype (or "dtype", the name
// newer transformers write), as vLLM's dtype=auto: bfloat16 and float16 as they are, float32
// (and a missing field, which vLLM reads as float32) downcast to bf16 as vLLM does on GPUs.
Result<DType> ConfigDType(const json& config) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    const std::string v = it->is_string() ? it->get<std::string>() : std::string();
    if (v == "bfloat16") return DType::kBF16;
    if (v == "float16") return DType::kF16;
    if (v == "float32" || v == "auto") return DType::kBF16;
    return Status::InvalidArgument(std::string(key) + ": unsupported " + it->dump() +
                                   " (bfloat16|float16|float32; pass a dtype to override)");
  }
  return DType::kBF16;
}

Result<hf::WeightFormat> ResolveFormat(const json& config, const std::optional<DType>& dtype) {
  auto q = config.find("quantization_config");
  const bool has_quant = q != config.end() && !q->is_null();
  hf::WeightFormat f;
  if (dtype && *dtype != DType::kFP8E4M3) {
    f.dtype = *dtype;  // an explicit dtype ignores the checkpoint's quantization
    return f;
  }
  WTX_ASSIGN_OR_RETURN(base, ConfigDType(config));
  f.dtype = base;
  if (dtype || has_quant) {
    // fp8: requested explicitly (block from the config if it has one, else 128x128) or by the
    // config's quantization_config.
    if (has_quant) {
      auto block = Fp8BlockFromConfig(*q);
      if (!block.ok() && !dtype) return block.status();
      f.fp8 = block.ok() ? block.value() : hf::Fp8Block{};
      if (q->is_object()) WTX_RETURN_IF_ERROR(ReadIgnoredLayers(*q, &f));
    } else {
      f.fp8 = hf::Fp8Block{};
    }
  }
  return f;
}

std::string ModelTypeList() {
  std::string out;
  for (const hf::Family& f : hf::Families()) {
    if (!out.empty()) out += '|';
    out += f.model_type;
  }
  return out;
}

Status CheckParallelism(const HfManifestOptions& o) {
  if (o.tp < 1) return Status::InvalidArgument("tp " + std::to_string(o.tp) + " must be >= 1");
  if (o.ep < 1) return Status::InvalidArgument("ep " + std::to_string(o.ep) + " must be >= 1");
  if (o.ep > 1 && o.ep % o.tp != 0) {
    return Status::InvalidArgument(
        "ep " + std::to_string(o.ep) + " is not a multiple of tp " + std::to_string(o.tp) +
        " (vLLM's expert-parallel group is the data-parallel x tensor-parallel world: ep = dp * "
        "tp)");
  }
  const int group = o.GroupSize();
  if (o.rank < 0 || o.rank >= group) {
    return Status::InvalidArgument(
        "rank " + std::to_string(o.rank) + " out of range for tp " + std::to_string(o.tp) +
        (o.ep > 1 ? ", ep " + std::to_string(o.ep) + " (0 <= rank < ep)" : " (0 <= rank < tp)"));
  }
  return Status::OK();
}

}  // namespace

std::string_view ExpertPlacementName(ExpertPlacement p) {
  return p == ExpertPlacement::kRoundRobin ? "round_robin" : "linear";
}

std::optional<ExpertPlacement> ExpertPlacementFromName(std::string_view name) {
  if (name == "linear") return ExpertPlacement::kLinear;
  if (name == "round_robin") return ExpertPlacement::kRoundRobin;
  return std::nullopt;
}

ExpertPlacement EffectiveExpertPlacement(const json& config, const HfManifestOptions& options,
                                         std::string* why) {
  std::string reason;
  ExpertPlacement out = options.expert_placement;
  const int dp = options.tp > 0 && options.ep > options.tp ? options.ep / options.tp : 1;
  const std::string& backend = options.all2all_backend;
  if (options.expert_placement == ExpertPlacement::kLinear) {
    reason = "linear as requested";
  } else {
    auto g = config.is_object() ? config.find("n_group") : config.end();
    const int64_t groups = g != config.end() && g->is_number_integer() ? g->get<int64_t>() : 0;
    if (groups <= 1) {
      out = ExpertPlacement::kLinear;
      reason =
          "round_robin requested, linear applied: vLLM places experts round-robin only for "
          "models with expert groups (n_group > 1; this config has " +
          (g == config.end() || g->is_null() ? std::string("none") : "n_group " + g->dump()) + ")";
    } else if (dp > 1 && backend != "deepep_low_latency" && backend != "nixl_ep") {
      out = ExpertPlacement::kLinear;
      reason = "round_robin requested, linear applied: with ep " + std::to_string(options.ep) +
               " over tp " + std::to_string(options.tp) + " (dp " + std::to_string(dp) +
               ") vLLM's MoE layers use all-to-all kernels, and its all-to-all backend '" +
               backend +
               "' has no round-robin routing tables (deepep_low_latency and nixl_ep have)";
    } else {
      reason = "round_robin as requested: the model has " + std::to_string(groups) +
               " expert groups (n_group)" +
               (dp > 1 ? ", and the all-to-all backend '" + backend + "' routes round-robin" : "");
    }
  }
  if (why) *why = std::move(reason);
  return out;
}

std::vector<std::string> HfModelTypes() {
  std::vector<std::string> out;
  for (const hf::Family& f : hf::Families()) out.emplace_back(f.model_type);
  return out;
}

Result<ManifestPtr> ManifestFromHfConfig(const json& config, const HfManifestOptions& options) {
  if (!config.is_object()) return Status::InvalidArgument("config: expected a JSON object");
  WTX_RETURN_IF_ERROR(CheckParallelism(options));
  auto mt = config.find("model_type");
  if (mt == config.end() || !mt->is_string()) {
    return Status::InvalidArgument("model_type: missing or not a string");
  }
  const std::string& model_type = mt->get_ref<const std::string&>();
  const hf::Family* family = hf::FindFamily(model_type);
  if (!family) {
    return Status::InvalidArgument("model_type: unknown '" + model_type + "' (" + ModelTypeList() +
                                   ")");
  }
  WTX_ASSIGN_OR_RETURN(format, ResolveFormat(config, options.dtype));
  hf::Parallelism par;
  par.tp = options.tp;
  par.tp_rank = options.rank % options.tp;
  par.ep = options.ep;
  par.ep_rank = options.ep > 1 ? options.rank : 0;
  par.placement = EffectiveExpertPlacement(config, options);
  hf::Builder builder(par, format);
  const hf::ConfigReader reader(config);
  WTX_RETURN_IF_ERROR(family->build(reader, &builder));
  if (auto unread = reader.UnreadLayoutKeys(); !unread.empty()) {
    std::string keys;
    for (const std::string& k : unread) keys += (keys.empty() ? "" : ", ") + k;
    return Status::InvalidArgument(
        keys + ": changes the parameters vLLM builds, but wtx does not model it for model_type '" +
        model_type + "'; refused rather than dropped (docs/manifest.md, \"Config keys\")");
  }
  if (options.ep > 1 && !builder.has_experts()) {
    return Status::InvalidArgument("ep " + std::to_string(options.ep) + ": model_type '" +
                                   model_type +
                                   "' has no MoE layer (expert parallelism needs experts)");
  }
  return std::move(builder).Finish();
}

Result<ManifestPtr> ManifestFromHfConfigFile(const std::string& path,
                                             const HfManifestOptions& options) {
  WTX_ASSIGN_OR_RETURN(text, ReadRegularFile(path));
  json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return Status::InvalidArgument(path + ": not valid JSON");
  auto m = ManifestFromHfConfig(config, options);
  if (!m.ok()) {
    return Status(m.status().code(), path + ": " + m.status().message());
  }
  return m;
}

Result<std::vector<ManifestPtr>> ManifestsOfGroup(const json& config,
                                                  const HfManifestOptions& options) {
  const int ranks = options.GroupSize();
  std::vector<Result<ManifestPtr>> laid(ranks, Status::InvalidArgument("not laid out"));
  std::atomic<int> next{0};
  auto lay_out = [&] {
    for (int r = next++; r < ranks; r = next++) {
      HfManifestOptions o = options;
      o.rank = r;
      laid[r] = ManifestFromHfConfig(config, o);
    }
  };
  const int threads =
      std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, ranks);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(lay_out);
  lay_out();
  for (std::thread& t : pool) t.join();
  std::vector<ManifestPtr> out;
  out.reserve(ranks);
  for (Result<ManifestPtr>& m : laid) {
    if (!m.ok()) return m.status();
    out.push_back(std::move(m).value());
  }
  return out;
}

ManifestSummary Summarize(const Manifest& m) {
  ManifestSummary s;
  s.params = m.TotalElements();
  s.bytes = m.TotalBytes();
  s.tensors = m.params().size();
  s.shards = m.TotalShards();
  return s;
}

}  // namespace wtx
