#include "src/layouts/hf_builder.h"

#include "wtx/limits.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace wtx::hf {

using nlohmann::json;

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status FieldError(const char* key, const std::string& what) {
  return Status::InvalidArgument(std::string(key) + ": " + what);
}

}  // namespace

namespace {

// Config keys that change the parameters vLLM builds for at least one model family (experts and
// their placement in layers, MLA ranks and head dimensions, biases, explicit head sizes, the
// router's correction bias). A family that models a key reads it; one that does not must not
// meet it set (docs/manifest.md, "Config keys").
constexpr std::string_view kLayoutKeys[] = {
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "n_shared_experts",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
    "first_k_dense_replace",
    "moe_layer_freq",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "attention_bias",
    "mlp_bias",
    "head_dim",
    "topk_method",
};

// null, false, 0, "", [] and {}: the key says "none of it".
bool IsOff(const json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v == 0;
  if (v.is_string() || v.is_array() || v.is_object()) return v.empty();
  return false;
}

}  // namespace

json::const_iterator ConfigReader::Find(const char* key) const {
  read_.insert(key);
  return j_.find(key);
}

std::vector<std::string> ConfigReader::UnreadLayoutKeys() const {
  std::vector<std::string> out;
  if (!j_.is_object()) return out;
  for (std::string_view key : kLayoutKeys) {
    auto it = j_.find(key);
    if (it == j_.end() || IsOff(*it) || read_.count(key)) continue;
    out.push_back(std::string(key) + " (" + it->dump() + ")");
  }
  return out;
}

Result<int64_t> ConfigReader::PositiveInt(const char* key) const {
  auto it = Find(key);
  if (it == j_.end() || it->is_null()) return FieldError(key, "missing (a positive integer)");
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return FieldError(key, "expected a positive integer, got " + it->dump());
  }
  return it->get<int64_t>();
}

Result<int64_t> ConfigReader::PositiveCount(const char* key, int64_t max) const {
  WTX_ASSIGN_OR_RETURN(n, PositiveInt(key));
  if (n > max) {
    return FieldError(key, std::to_string(n) + " is more than wtx accepts (at most " +
                               std::to_string(max) + ", include/wtx/limits.h)");
  }
  return n;
}

Result<int64_t> ConfigReader::IntOr(const char* key, int64_t dflt, int64_t min) const {
  auto it = Find(key);
  if (it == j_.end() || it->is_null()) return dflt;
  if (!it->is_number_integer() || it->get<int64_t>() < min) {
    return FieldError(key, "expected an integer >= " + std::to_string(min) + ", got " + it->dump());
  }
  return it->get<int64_t>();
}

Result<std::optional<int64_t>> ConfigReader::OptionalPositiveInt(const char* key) const {
  auto it = Find(key);
  if (it == j_.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return FieldError(key, "expected a positive integer or null, got " + it->dump());
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

Result<bool> ConfigReader::BoolOr(const char* key, bool dflt) const {
  auto it = Find(key);
  if (it == j_.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return FieldError(key, "expected a boolean, got " + it->dump());
  return it->get<bool>();
}

Result<std::string> ConfigReader::StringOr(const char* key, std::string dflt) const {
  auto it = Find(key);
  if (it == j_.end() || it->is_null()) return dflt;
  if (!it->is_string()) return FieldError(key, "expected a string, got " + it->dump());
  return it->get<std::string>();
}

Result<std::vector<int64_t>> ConfigReader::IntListOr(const char* key) const {
  auto it = Find(key);
  std::vector<int64_t> out;
  if (it == j_.end() || it->is_null()) return out;
  if (!it->is_array()) return FieldError(key, "expected an array of integers, got " + it->dump());
  for (const auto& e : *it) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0) {
      return FieldError(key, "expected integers >= 0, got " + e.dump());
    }
    out.push_back(e.get<int64_t>());
  }
  return out;
}

Status CheckTpAtMostExperts(int tp, int64_t experts, std::string_view field) {
  if (tp <= experts) return Status::OK();
  return Status::InvalidArgument("tp " + std::to_string(tp) + " exceeds " + std::string(field) +
                                 " " + std::to_string(experts) +
                                 " (vLLM refuses more tensor-parallel ranks than experts)");
}

Status CheckTpDivides(int tp, int64_t value, std::string_view field) {
  if (value % tp == 0) return Status::OK();
  return Status::InvalidArgument("tp " + std::to_string(tp) + " does not divide " +
                                 std::string(field) + " " + std::to_string(value));
}

Builder::Builder(Parallelism par, WeightFormat format) : par_(par), format_(format) {}

Range Builder::TpSlice(int64_t extent) const {
  const int64_t per = extent / par_.tp;
  return {par_.tp_rank * per, (par_.tp_rank + 1) * per};
}

void Builder::BeginModule(std::string name) {
  modules_.push_back({std::move(name), {}});
  module_scales_.clear();
}

ParamSpec& Builder::NewParam(std::string name, DType dtype, Shape shape) {
  if (!modules_.empty()) modules_.back().params.push_back(name);
  ParamSpec& p = params_.emplace_back();
  p.name = std::move(name);
  p.dtype = dtype;
  p.shape = std::move(shape);
  return p;
}

void Builder::AddReplicated(std::string name, Shape shape, DType dtype) {
  ShardSpec s;
  s.id = "0";
  s.source = name;
  s.source_shape = shape;
  s.box = WholeBox(shape);
  s.source_box = s.box;
  ParamSpec& p = NewParam(std::move(name), dtype, std::move(shape));
  p.shards.push_back(std::move(s));
}

Status Builder::CheckVocab(int64_t vocab) const {
  const int64_t padded = PadVocab(vocab);
  if (padded % par_.tp == 0) return Status::OK();
  std::string m =
      "tp " + std::to_string(par_.tp) + " does not divide vocab_size " + std::to_string(vocab);
  if (padded != vocab) {
    m += " padded to " + std::to_string(padded) + " (vLLM pads the vocabulary to a multiple of " +
         std::to_string(kVocabPadding) + ")";
  }
  return Status::InvalidArgument(m);
}

void Builder::AddVocabParallel(std::string name, int64_t vocab, int64_t hidden) {
  const int64_t padded = PadVocab(vocab);
  const int64_t per = padded / par_.tp;
  // vLLM's shard of the padded vocabulary: rows [start, start + per), of which those below
  // vocab come from the checkpoint and the rest are padding (zero-filled by its loader).
  const int64_t start = std::min<int64_t>(par_.tp_rank * per, vocab);
  const int64_t real = std::min<int64_t>(par_.tp_rank * per + per, vocab) - start;
  ParamSpec& p = NewParam(name, format_.dtype, {per, hidden});
  ShardSpec s;
  s.id = "0";
  if (real > 0) {
    s.source = std::move(name);
    s.source_shape = {vocab, hidden};
    s.box = {{0, real}, {0, hidden}};
    s.source_box = {{start, start + real}, {0, hidden}};
  } else {
    // A rank whose rows all lie past the vocabulary (129 rows padded to 192 at tp 4: rank 3)
    // loads nothing, as vLLM's loader: its shard "0" is an empty padding shard (the shard ids,
    // hence the fingerprint, stay those of the other ranks) and "pad" is every row.
    s.padding = true;
    s.box = {{0, 0}, {0, hidden}};
  }
  p.shards.push_back(std::move(s));
  if (padded != vocab) {
    ShardSpec& pad = p.shards.emplace_back();
    pad.id = "pad";
    pad.padding = true;
    pad.box = {{real, per}, {0, hidden}};
  }
}

Result<Range> Builder::BlockSlice(Range slice, int64_t extent, int64_t block,
                                  std::string_view source, std::string_view dim) const {
  if (slice.begin % block != 0 || (slice.end % block != 0 && slice.end != extent)) {
    return Status::InvalidArgument(
        "quantization_config.weight_block_size: fp8 block " + std::to_string(block) +
        " does not align with " + std::string(dim) + " [" + std::to_string(slice.begin) + ", " +
        std::to_string(slice.end) + ") of " + std::string(source) + " held by rank " +
        std::to_string(par_.tp_rank) + " of tp " + std::to_string(par_.tp) +
        " (choose a tp whose slices are whole blocks, or a dtype to ignore quantization)");
  }
  return Range{slice.begin / block, CeilDiv(slice.end, block)};
}

bool WeightFormat::Lists(std::string_view prefix) const {
  return std::find(ignored_layers.begin(), ignored_layers.end(), prefix) != ignored_layers.end();
}

bool WeightFormat::ListsExperts(std::string_view prefix) const {
  for (const std::string& l : ignored_layers) {
    if (l.find("experts") != std::string::npos && l.find(prefix) != std::string::npos) return true;
  }
  return false;
}

Result<bool> Builder::QuantizesLinear(std::string_view prefix,
                                      std::span<const LinearPart> parts) const {
  if (!format_.fp8) return false;
  // REQUIRES: parts is not empty (every linear has at least one part)
  assert(!parts.empty() && "a linear layer is fed by at least one checkpoint module");
  // vLLM's is_layer_skipped: a fused layer (qkv_proj, gate_up_proj, fused_qkv_a_proj) is
  // looked up by its checkpoint parts only, each listed exactly (its fused name does not
  // count); any other layer whose name contains "experts" (shared_experts.down_proj) takes the
  // experts branch (skipped when a listed name containing "experts" contains its name); every
  // other layer is skipped when listed exactly.
  const bool fused = parts.size() > 1 || parts.front().source != prefix;
  if (!fused) {
    const bool skipped = prefix.find("experts") != std::string_view::npos
                             ? format_.ListsExperts(prefix)
                             : format_.Lists(prefix);
    return !skipped;
  }
  size_t listed = 0;
  for (const LinearPart& p : parts) listed += format_.Lists(p.source) ? 1 : 0;
  if (listed == 0) return true;
  if (listed == parts.size()) return false;
  std::string in, out;
  for (const LinearPart& p : parts) {
    std::string& to = format_.Lists(p.source) ? in : out;
    if (!to.empty()) to += ", ";
    to += p.source;
  }
  return Status::InvalidArgument("quantization_config." + std::string(format_.ignored_field) +
                                 ": lists some but not all parts of the fused layer " +
                                 std::string(prefix) + " (listed: " + in + "; not listed: " + out +
                                 "); vLLM requires all parts of a fused layer to have "
                                 "the same precision");
}

bool Builder::QuantizesExperts(std::string_view experts_prefix) const {
  return format_.fp8 && !format_.ListsExperts(experts_prefix);
}

Status Builder::AddRouter(std::string_view module, const ExpertsSpec& spec) {
  const std::string gate = std::string(module) + ".gate";
  if (spec.quantized_router && format_.fp8) {
    const LinearPart part[] = {{"0", gate, spec.experts, {0, spec.experts}}};
    return AddLinear(gate, part, spec.hidden, {0, spec.hidden}, false, /*quantized=*/true);
  }
  AddReplicated(gate + ".weight", {spec.experts, spec.hidden}, format_.dtype);
  return Status::OK();
}

Status Builder::AddLinear(std::string_view prefix, std::span<const LinearPart> parts, int64_t in,
                          Range in_slice, bool bias, bool quantized) {
  bool fp8 = false;
  if (quantized) {
    WTX_ASSIGN_OR_RETURN(q, QuantizesLinear(prefix, parts));
    fp8 = q;
  }
  int64_t rows = 0;
  for (const LinearPart& p : parts) rows += p.row_slice.extent();
  const int64_t cols = in_slice.extent();

  // Scale blocks first, so that a misaligned slice fails before anything is added.
  std::vector<Range> row_blocks;
  Range col_blocks;
  if (fp8) {
    const Fp8Block& blk = *format_.fp8;
    row_blocks.reserve(parts.size());
    for (const LinearPart& p : parts) {
      WTX_ASSIGN_OR_RETURN(rb, BlockSlice(p.row_slice, p.rows, blk.n, p.source, "rows"));
      row_blocks.push_back(rb);
    }
    WTX_ASSIGN_OR_RETURN(cb, BlockSlice(in_slice, in, blk.k, parts.front().source, "columns"));
    col_blocks = cb;
  }

  std::string name(prefix);
  name += ".weight";
  {
    ParamSpec& w = NewParam(name, fp8 ? DType::kFP8E4M3 : format_.dtype, {rows, cols});
    w.shards.reserve(parts.size());
    int64_t off = 0;
    for (const LinearPart& p : parts) {
      ShardSpec& s = w.shards.emplace_back();
      s.id = p.id;
      s.source.reserve(p.source.size() + 7);
      s.source = p.source;
      s.source += ".weight";
      s.source_shape = {p.rows, in};
      s.box = {{off, off + p.row_slice.extent()}, {0, cols}};
      s.source_box = {p.row_slice, in_slice};
      off += p.row_slice.extent();
    }
  }
  if (bias) {
    name.replace(name.size() - 6, 6, "bias");
    ParamSpec& b = NewParam(name, format_.dtype, {rows});
    b.shards.reserve(parts.size());
    int64_t off = 0;
    for (const LinearPart& p : parts) {
      ShardSpec& s = b.shards.emplace_back();
      s.id = p.id;
      s.source = p.source;
      s.source += ".bias";
      s.source_shape = {p.rows};
      s.box = {{off, off + p.row_slice.extent()}};
      s.source_box = {p.row_slice};
      off += p.row_slice.extent();
    }
  }
  if (fp8) {
    const Fp8Block& blk = *format_.fp8;
    int64_t scale_rows = 0;
    for (const Range& r : row_blocks) scale_rows += r.extent();
    name = prefix;
    name += ".weight_scale_inv";
    module_scales_.push_back(name);
    ParamSpec& sc = NewParam(std::move(name), DType::kF32, {scale_rows, col_blocks.extent()});
    sc.shards.reserve(parts.size());
    int64_t off = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const LinearPart& p = parts[i];
      ShardSpec& s = sc.shards.emplace_back();
      s.id = p.id;
      s.source = p.source;
      s.source += ".weight_scale_inv";
      s.source_shape = {CeilDiv(p.rows, blk.n), CeilDiv(in, blk.k)};
      s.box = {{off, off + row_blocks[i].extent()}, {0, col_blocks.extent()}};
      s.source_box = {row_blocks[i], col_blocks};
      off += row_blocks[i].extent();
    }
  }
  return Status::OK();
}

namespace {

// Appends the decimal digits of v.
void AppendInt(std::string* s, int64_t v) { *s += std::to_string(v); }

// One routed expert's projection in a stacked parameter.
struct ExpertProj {
  const char* suffix;  // shard id suffix: ".w1"
  const char* source;  // checkpoint name after the expert id: ".gate_proj"
};

// Shard of local slot `slot` (global expert `e`) of a stacked parameter: live box
// [[slot, slot+1], rows, cols].
void AddExpertShard(ParamSpec* p, std::string_view experts_prefix, int64_t slot, int64_t e,
                    const ExpertProj& proj, std::string_view tensor, Shape source_shape, Range rows,
                    Range cols, Range src_rows, Range src_cols) {
  ShardSpec& s = p->shards.emplace_back();
  s.id = "e";
  AppendInt(&s.id, slot);
  s.id += proj.suffix;
  s.source.reserve(experts_prefix.size() + 40);
  s.source = experts_prefix;
  AppendInt(&s.source, e);
  s.source += proj.source;
  s.source += tensor;
  s.source_shape = std::move(source_shape);
  s.box = {{slot, slot + 1}, rows, cols};
  s.source_box = {src_rows, src_cols};
}

}  // namespace

Status Builder::CheckExperts(const ExpertsSpec& spec, int64_t layers) const {
  const std::string field(spec.experts_field);
  if (spec.experts > kMaxExperts) {
    return Status::InvalidArgument(field + ": " + std::to_string(spec.experts) +
                                   " is more than wtx accepts (at most " +
                                   std::to_string(kMaxExperts) + ", include/wtx/limits.h)");
  }
  if (spec.experts * layers > kMaxExpertLayers) {  // both bounded: no overflow
    return Status::InvalidArgument("num_hidden_layers x " + field + ": " + std::to_string(layers) +
                                   " x " + std::to_string(spec.experts) +
                                   " expert layers is more than wtx accepts (at most " +
                                   std::to_string(kMaxExpertLayers) + ", include/wtx/limits.h)");
  }
  if (par_.ep > 1) {
    if (spec.experts % par_.ep != 0) {
      return Status::InvalidArgument("ep " + std::to_string(par_.ep) + " does not divide " +
                                     std::string(spec.experts_field) + " " +
                                     std::to_string(spec.experts));
    }
    return Status::OK();
  }
  return CheckTpDivides(par_.tp, spec.intermediate, spec.intermediate_field);
}

Status Builder::AddExperts(std::string_view prefix, const ExpertsSpec& spec) {
  const int64_t hidden = spec.hidden, intermediate = spec.intermediate;
  const bool ep = par_.ep > 1;
  // With expert parallelism the MoE layer is not tensor-sliced (vLLM's moe tp = 1).
  const Range islice = ep ? Range{0, intermediate} : TpSlice(intermediate);
  const int64_t it = islice.extent();
  const int64_t local = ep ? spec.experts / par_.ep : spec.experts;
  std::vector<int64_t> global(local);  // global expert id of each local slot
  for (int64_t k = 0; k < local; ++k) {
    if (!ep) {
      global[k] = k;
    } else if (par_.placement == ExpertPlacement::kRoundRobin) {
      global[k] = par_.ep_rank + k * par_.ep;
    } else {
      global[k] = par_.ep_rank * local + k;
    }
  }
  std::string experts_prefix(prefix);
  experts_prefix += ".experts";  // vLLM's FusedMoE prefix
  const bool fp8 = QuantizesExperts(experts_prefix);
  const ExpertProj w1{".w1", spec.names.gate}, w3{".w3", spec.names.up}, w2{".w2", spec.names.down};
  std::string ep_prefix(prefix);
  ep_prefix += ".experts.";  // checkpoint prefix of expert e: ep_prefix + e

  Range ib_rows, ib_cols;  // scale blocks of the intermediate slice as rows (w13) / cols (w2)
  if (fp8) {
    const Fp8Block& blk = *format_.fp8;
    std::string first = ep_prefix + std::to_string(global[0]) + w1.source + ".weight";
    WTX_ASSIGN_OR_RETURN(r, BlockSlice(islice, intermediate, blk.n, first, "rows"));
    first = ep_prefix + std::to_string(global[0]) + w2.source + ".weight";
    WTX_ASSIGN_OR_RETURN(c, BlockSlice(islice, intermediate, blk.k, first, "columns"));
    ib_rows = r;
    ib_cols = c;
  }
  has_experts_ = true;

  {
    ParamSpec& w13 = NewParam(ep_prefix + "w13_weight", fp8 ? DType::kFP8E4M3 : format_.dtype,
                              {local, 2 * it, hidden});
    w13.shards.reserve(2 * local);
    for (int64_t k = 0; k < local; ++k) {
      AddExpertShard(&w13, ep_prefix, k, global[k], w1, ".weight", {intermediate, hidden}, {0, it},
                     {0, hidden}, islice, {0, hidden});
      AddExpertShard(&w13, ep_prefix, k, global[k], w3, ".weight", {intermediate, hidden},
                     {it, 2 * it}, {0, hidden}, islice, {0, hidden});
    }
  }
  {
    ParamSpec& w2p = NewParam(ep_prefix + "w2_weight", fp8 ? DType::kFP8E4M3 : format_.dtype,
                              {local, hidden, it});
    w2p.shards.reserve(local);
    for (int64_t k = 0; k < local; ++k) {
      AddExpertShard(&w2p, ep_prefix, k, global[k], w2, ".weight", {hidden, intermediate},
                     {0, hidden}, {0, it}, {0, hidden}, islice);
    }
  }
  if (fp8) {
    const Fp8Block& blk = *format_.fp8;
    const int64_t ib = ib_rows.extent();
    const int64_t hk = CeilDiv(hidden, blk.k);  // hidden as input columns of w1/w3
    const int64_t hn = CeilDiv(hidden, blk.n);  // hidden as output rows of w2
    {
      std::string name = ep_prefix + "w13_weight_scale_inv";
      module_scales_.push_back(name);
      ParamSpec& s13 = NewParam(std::move(name), DType::kF32, {local, 2 * ib, hk});
      s13.shards.reserve(2 * local);
      const Shape src{CeilDiv(intermediate, blk.n), hk};
      for (int64_t k = 0; k < local; ++k) {
        AddExpertShard(&s13, ep_prefix, k, global[k], w1, ".weight_scale_inv", src, {0, ib},
                       {0, hk}, ib_rows, {0, hk});
        AddExpertShard(&s13, ep_prefix, k, global[k], w3, ".weight_scale_inv", src, {ib, 2 * ib},
                       {0, hk}, ib_rows, {0, hk});
      }
    }
    {
      std::string name = ep_prefix + "w2_weight_scale_inv";
      module_scales_.push_back(name);
      ParamSpec& s2 = NewParam(std::move(name), DType::kF32, {local, hn, ib_cols.extent()});
      s2.shards.reserve(local);
      const Shape src{hn, CeilDiv(intermediate, blk.k)};
      for (int64_t k = 0; k < local; ++k) {
        AddExpertShard(&s2, ep_prefix, k, global[k], w2, ".weight_scale_inv", src, {0, hn},
                       {0, ib_cols.extent()}, {0, hn}, ib_cols);
      }
    }
  }
  return Status::OK();
}

void Builder::AddDerived(std::string name, std::vector<std::string> sources, Phase phase) {
  derived_.push_back({std::move(name), std::move(sources), phase});
}

void Builder::AddModuleScalesDerived(std::string name) {
  if (module_scales_.empty()) return;
  AddDerived(std::move(name), module_scales_, Phase::kKernel);
}

Status AddGatedMlp(Builder* b, std::string_view prefix, int64_t hidden, int64_t intermediate,
                   bool bias) {
  const std::string p(prefix);
  const Range islice = b->TpSlice(intermediate);
  const LinearPart gate_up[] = {{"0", p + ".gate_proj", intermediate, islice},
                                {"1", p + ".up_proj", intermediate, islice}};
  WTX_RETURN_IF_ERROR(
      b->AddLinear(p + ".gate_up_proj", gate_up, hidden, {0, hidden}, bias, /*quantized=*/true));
  const LinearPart down[] = {{"0", p + ".down_proj", hidden, {0, hidden}}};
  return b->AddLinear(p + ".down_proj", down, intermediate, islice, bias, /*quantized=*/true);
}

void AddEmbedding(Builder* b, int64_t vocab, int64_t hidden) {
  b->BeginModule("model.embed_tokens");
  b->AddVocabParallel("model.embed_tokens.weight", vocab, hidden);
}

void AddLmHead(Builder* b, int64_t hidden, int64_t vocab, bool tied, DType dtype) {
  b->BeginModule("lm_head");
  b->AddReplicated("model.norm.weight", {hidden}, dtype);
  if (!tied) b->AddVocabParallel("lm_head.weight", vocab, hidden);
}

std::string LayerPrefix(int64_t layer) { return "model.layers." + std::to_string(layer); }

namespace {

// Opens `model.layers.N.<name>` with the replicated norm `model.layers.N.<norm>.weight`.
std::string BeginLayerModule(Builder* b, int64_t layer, std::string_view name,
                             std::string_view norm, int64_t hidden) {
  const std::string lp = LayerPrefix(layer);
  std::string module = lp + "." + std::string(name);
  b->BeginModule(module);
  b->AddReplicated(lp + "." + std::string(norm) + ".weight", {hidden}, b->format().dtype);
  return module;
}

}  // namespace

std::string BeginAttentionModule(Builder* b, int64_t layer, int64_t hidden) {
  return BeginLayerModule(b, layer, "self_attn", "input_layernorm", hidden);
}

std::string BeginMlpModule(Builder* b, int64_t layer, int64_t hidden, std::string_view name) {
  return BeginLayerModule(b, layer, name, "post_attention_layernorm", hidden);
}

LayerKinds ClassifyLayers(int64_t layers, const std::function<bool(int64_t layer)>& is_moe) {
  LayerKinds kinds;
  for (int64_t l = 0; l < layers; ++l) (is_moe(l) ? kinds.moe : kinds.dense) = true;
  return kinds;
}

Status AddDecoderLayers(Builder* b, int64_t hidden, int64_t layers, int64_t vocab, bool tied,
                        const std::function<Status(int64_t layer)>& layer) {
  WTX_RETURN_IF_ERROR(b->CheckVocab(vocab));
  AddEmbedding(b, vocab, hidden);
  for (int64_t l = 0; l < layers; ++l) WTX_RETURN_IF_ERROR(layer(l));
  AddLmHead(b, hidden, vocab, tied, b->format().dtype);
  return Status::OK();
}

Result<GqaAttention> ReadGqaAttention(const ConfigReader& c, int tp) {
  GqaAttention a;
  WTX_ASSIGN_OR_RETURN(hidden, c.PositiveInt("hidden_size"));
  WTX_ASSIGN_OR_RETURN(heads, c.PositiveInt("num_attention_heads"));
  WTX_ASSIGN_OR_RETURN(kv_heads, c.IntOr("num_key_value_heads", heads, 1));
  WTX_ASSIGN_OR_RETURN(head_dim, c.OptionalPositiveInt("head_dim"));
  if (!head_dim && hidden % heads != 0) {
    return Status::InvalidArgument("head_dim: absent, and num_attention_heads " +
                                   std::to_string(heads) + " does not divide hidden_size " +
                                   std::to_string(hidden));
  }
  if (heads % kv_heads != 0) {
    return Status::InvalidArgument("num_key_value_heads: " + std::to_string(kv_heads) +
                                   " does not divide num_attention_heads " + std::to_string(heads));
  }
  WTX_RETURN_IF_ERROR(CheckTpDivides(tp, heads, "num_attention_heads"));
  if (kv_heads >= tp) {
    WTX_RETURN_IF_ERROR(CheckTpDivides(tp, kv_heads, "num_key_value_heads"));
  } else if (tp % kv_heads != 0) {
    return Status::InvalidArgument(
        "num_key_value_heads " + std::to_string(kv_heads) + " does not divide tp " +
        std::to_string(tp) + " (with fewer KV heads than tp, each head is replicated on tp / " +
        "num_key_value_heads ranks)");
  }
  a.hidden = hidden;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim ? *head_dim : hidden / heads;
  return a;
}

Status AddGqaAttention(Builder* b, const GqaAttention& a, int64_t layer) {
  const int tp = b->tp();
  const Range q_rows = b->TpSlice(a.heads * a.head_dim);
  Range kv_rows;
  if (a.kv_heads >= tp) {
    kv_rows = b->TpSlice(a.kv_heads * a.head_dim);
  } else {
    const int64_t head = static_cast<int64_t>(b->rank()) * a.kv_heads / tp;
    kv_rows = {head * a.head_dim, (head + 1) * a.head_dim};
  }
  const DType dtype = b->format().dtype;
  const std::string attn = BeginAttentionModule(b, layer, a.hidden);
  const LinearPart qkv[] = {{"q", attn + ".q_proj", a.heads * a.head_dim, q_rows},
                            {"k", attn + ".k_proj", a.kv_heads * a.head_dim, kv_rows},
                            {"v", attn + ".v_proj", a.kv_heads * a.head_dim, kv_rows}};
  WTX_RETURN_IF_ERROR(b->AddLinear(attn + ".qkv_proj", qkv, a.hidden, {0, a.hidden}, a.qkv_bias,
                                   /*quantized=*/true));
  const LinearPart o[] = {{"0", attn + ".o_proj", a.hidden, {0, a.hidden}}};
  WTX_RETURN_IF_ERROR(b->AddLinear(attn + ".o_proj", o, a.heads * a.head_dim, q_rows, a.o_bias,
                                   /*quantized=*/true));
  if (a.qk_norm) {
    b->AddReplicated(attn + ".q_norm.weight", {a.head_dim}, dtype);
    b->AddReplicated(attn + ".k_norm.weight", {a.head_dim}, dtype);
  }
  b->AddModuleScalesDerived(attn + ".fp8_scales");
  return Status::OK();
}

Status AddRoutedMoeModule(Builder* b, int64_t layer, std::string_view name, const ExpertsSpec& spec,
                          const std::function<Status(const std::string& module)>& extra) {
  const std::string module = BeginMlpModule(b, layer, spec.hidden, name);
  WTX_RETURN_IF_ERROR(b->AddRouter(module, spec));
  WTX_RETURN_IF_ERROR(b->AddExperts(module, spec));
  if (extra) WTX_RETURN_IF_ERROR(extra(module));
  b->AddModuleScalesDerived(module + ".fp8_scales");
  return Status::OK();
}

Result<DecoderFrame> ReadDecoderFrame(const ConfigReader& c, const Builder& b) {
  // The vocabulary is checked by AddDecoder, after the family's own fields.
  DecoderFrame f;
  WTX_ASSIGN_OR_RETURN(attn, ReadGqaAttention(c, b.tp()));
  WTX_ASSIGN_OR_RETURN(layers, c.PositiveCount("num_hidden_layers", kMaxLayers));
  WTX_ASSIGN_OR_RETURN(vocab, c.PositiveInt("vocab_size"));
  WTX_ASSIGN_OR_RETURN(tied, c.BoolOr("tie_word_embeddings", false));
  f.attn = attn;
  f.layers = layers;
  f.vocab = vocab;
  f.tied = tied;
  return f;
}

Status AddDecoder(Builder* b, const DecoderFrame& f,
                  const std::function<Status(int64_t layer)>& mlp) {
  return AddDecoderLayers(b, f.attn.hidden, f.layers, f.vocab, f.tied, [&](int64_t layer) {
    WTX_RETURN_IF_ERROR(AddGqaAttention(b, f.attn, layer));
    return mlp(layer);
  });
}

Status AddDenseMlpModule(Builder* b, int64_t layer, int64_t hidden, int64_t intermediate,
                         bool bias) {
  const std::string mlp = BeginMlpModule(b, layer, hidden, "mlp");
  WTX_RETURN_IF_ERROR(AddGatedMlp(b, mlp, hidden, intermediate, bias));
  b->AddModuleScalesDerived(mlp + ".fp8_scales");
  return Status::OK();
}

Result<ManifestPtr> Builder::Finish() && {
  return Manifest::Build(std::move(params_), std::move(modules_), std::move(derived_));
}

}  // namespace wtx::hf
