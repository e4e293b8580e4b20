#include "wtx/hf_manifest.h"

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "src/layouts/hf_builder.h"
#include "src/layouts/hf_families.h"

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
  return hf::Fp8Block{(*it)[0].get<int64_t>(), (*it)[1].get<int64_t>()};
}

Result<hf::WeightFormat> ResolveFormat(const json& config, const std::optional<DType>& dtype) {
  auto q = config.find("quantization_config");
  const bool has_quant = q != config.end() && !q->is_null();
  hf::WeightFormat f;
  if (dtype && *dtype != DType::kFP8E4M3) {
    f.dtype = *dtype;  // an explicit dtype ignores the checkpoint's quantization
    return f;
  }
  if (dtype || has_quant) {
    // fp8: requested explicitly (block from the config if it has one, else 128x128) or by the
    // config's quantization_config.
    f.dtype = DType::kBF16;
    if (has_quant) {
      auto block = Fp8BlockFromConfig(*q);
      if (!block.ok() && !dtype) return block.status();
      f.fp8 = block.ok() ? block.value() : hf::Fp8Block{};
    } else {
      f.fp8 = hf::Fp8Block{};
    }
  }
  return f;
}

}  // namespace

Result<ManifestPtr> ManifestFromHfConfig(const json& config, const HfManifestOptions& options) {
  if (!config.is_object()) return Status::InvalidArgument("config: expected a JSON object");
  if (options.tp < 1) {
    return Status::InvalidArgument("tp " + std::to_string(options.tp) + " must be >= 1");
  }
  if (options.rank < 0 || options.rank >= options.tp) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " out of range for tp " + std::to_string(options.tp) +
                                   " (0 <= rank < tp)");
  }
  auto mt = config.find("model_type");
  if (mt == config.end() || !mt->is_string()) {
    return Status::InvalidArgument("model_type: missing or not a string");
  }
  const std::string& model_type = mt->get_ref<const std::string&>();
  const bool llama = model_type == "llama", qwen2 = model_type == "qwen2";
  const bool deepseek = model_type == "deepseek_v3" || model_type == "kimi_k2";
  if (!llama && !qwen2 && !deepseek) {
    return Status::InvalidArgument("model_type: unknown '" + model_type +
                                   "' (llama|qwen2|deepseek_v3|kimi_k2)");
  }
  WTX_ASSIGN_OR_RETURN(format, ResolveFormat(config, options.dtype));
  hf::Builder builder(options.tp, options.rank, format);
  const hf::ConfigReader reader(config);
  if (deepseek) {
    WTX_RETURN_IF_ERROR(hf::BuildDeepseekV3Family(reader, &builder));
  } else {
    WTX_RETURN_IF_ERROR(hf::BuildLlamaFamily(reader, qwen2, &builder));
  }
  return std::move(builder).Finish();
}

Result<ManifestPtr> ManifestFromHfConfigFile(const std::string& path,
                                             const HfManifestOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IOError(path + ": read error");
  json config = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return Status::InvalidArgument(path + ": not valid JSON");
  auto m = ManifestFromHfConfig(config, options);
  if (!m.ok()) {
    return Status(m.status().code(), path + ": " + m.status().message());
  }
  return m;
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
