#include "src/layouts/hf_builder.h"

#include <utility>

namespace wtx::hf {

using nlohmann::json;

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status FieldError(const char* key, const std::string& what) {
  return Status::InvalidArgument(std::string(key) + ": " + what);
}

}  // namespace

Result<int64_t> ConfigReader::PositiveInt(const char* key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return FieldError(key, "missing (a positive integer)");
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return FieldError(key, "expected a positive integer, got " + it->dump());
  }
  return it->get<int64_t>();
}

Result<int64_t> ConfigReader::IntOr(const char* key, int64_t dflt, int64_t min) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return dflt;
  if (!it->is_number_integer() || it->get<int64_t>() < min) {
    return FieldError(key, "expected an integer >= " + std::to_string(min) + ", got " + it->dump());
  }
  return it->get<int64_t>();
}

Result<std::optional<int64_t>> ConfigReader::OptionalPositiveInt(const char* key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return FieldError(key, "expected a positive integer or null, got " + it->dump());
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

Result<bool> ConfigReader::BoolOr(const char* key, bool dflt) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return FieldError(key, "expected a boolean, got " + it->dump());
  return it->get<bool>();
}

Result<std::string> ConfigReader::StringOr(const char* key, std::string dflt) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return dflt;
  if (!it->is_string()) return FieldError(key, "expected a string, got " + it->dump());
  return it->get<std::string>();
}

Status CheckTpDivides(int tp, int64_t value, std::string_view field) {
  if (value % tp == 0) return Status::OK();
  return Status::InvalidArgument("tp " + std::to_string(tp) + " does not divide " +
                                 std::string(field) + " " + std::to_string(value));
}

Builder::Builder(int tp, int rank, WeightFormat format) : tp_(tp), rank_(rank), format_(format) {}

Range Builder::TpSlice(int64_t extent) const {
  const int64_t per = extent / tp_;
  return {rank_ * per, (rank_ + 1) * per};
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

void Builder::AddVocabParallel(std::string name, int64_t vocab, int64_t hidden) {
  const Range rows = TpSlice(vocab);
  ShardSpec s;
  s.id = "0";
  s.source = name;
  s.source_shape = {vocab, hidden};
  s.box = {{0, rows.extent()}, {0, hidden}};
  s.source_box = {rows, {0, hidden}};
  ParamSpec& p = NewParam(std::move(name), format_.dtype, {rows.extent(), hidden});
  p.shards.push_back(std::move(s));
}

Result<Range> Builder::BlockSlice(Range slice, int64_t extent, int64_t block,
                                  std::string_view source, std::string_view dim) const {
  if (slice.begin % block != 0 || (slice.end % block != 0 && slice.end != extent)) {
    return Status::InvalidArgument(
        "quantization_config.weight_block_size: fp8 block " + std::to_string(block) +
        " does not align with " + std::string(dim) + " [" + std::to_string(slice.begin) + ", " +
        std::to_string(slice.end) + ") of " + std::string(source) + " held by rank " +
        std::to_string(rank_) + " of tp " + std::to_string(tp_) +
        " (choose a tp whose slices are whole blocks, or a dtype to ignore quantization)");
  }
  return Range{slice.begin / block, CeilDiv(slice.end, block)};
}

Status Builder::AddLinear(std::string_view prefix, std::span<const LinearPart> parts, int64_t in,
                          Range in_slice, bool bias, bool quantized) {
  const bool fp8 = quantized && format_.fp8.has_value();
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

// The three checkpoint projections of one routed expert, in stacked-param order.
struct ExpertProj {
  const char* suffix;  // ".w1"
  const char* source;  // ".gate_proj"
};
constexpr ExpertProj kW1{".w1", ".gate_proj"};
constexpr ExpertProj kW3{".w3", ".up_proj"};
constexpr ExpertProj kW2{".w2", ".down_proj"};

// Shard of expert `e` of a stacked parameter: live box [[e, e+1], rows, cols].
void AddExpertShard(ParamSpec* p, std::string_view experts_prefix, int64_t e,
                    const ExpertProj& proj, std::string_view tensor, Shape source_shape, Range rows,
                    Range cols, Range src_rows, Range src_cols) {
  ShardSpec& s = p->shards.emplace_back();
  s.id = "e";
  AppendInt(&s.id, e);
  s.id += proj.suffix;
  s.source.reserve(experts_prefix.size() + 40);
  s.source = experts_prefix;
  AppendInt(&s.source, e);
  s.source += proj.source;
  s.source += tensor;
  s.source_shape = std::move(source_shape);
  s.box = {{e, e + 1}, rows, cols};
  s.source_box = {src_rows, src_cols};
}

}  // namespace

Status Builder::AddExperts(std::string_view prefix, int64_t experts, int64_t hidden,
                           int64_t intermediate) {
  const Range islice = TpSlice(intermediate);
  const int64_t it = islice.extent();
  const bool fp8 = format_.fp8.has_value();
  std::string ep(prefix);
  ep += ".experts.";  // checkpoint prefix of expert e: ep + e

  Range ib_rows, ib_cols;  // scale blocks of the intermediate slice as rows (w13) / cols (w2)
  if (fp8) {
    const Fp8Block& blk = *format_.fp8;
    std::string first = ep + "0.gate_proj.weight";
    WTX_ASSIGN_OR_RETURN(r, BlockSlice(islice, intermediate, blk.n, first, "rows"));
    first = ep + "0.down_proj.weight";
    WTX_ASSIGN_OR_RETURN(c, BlockSlice(islice, intermediate, blk.k, first, "columns"));
    ib_rows = r;
    ib_cols = c;
  }

  {
    ParamSpec& w13 = NewParam(ep + "w13_weight", fp8 ? DType::kFP8E4M3 : format_.dtype,
                              {experts, 2 * it, hidden});
    w13.shards.reserve(2 * experts);
    for (int64_t e = 0; e < experts; ++e) {
      AddExpertShard(&w13, ep, e, kW1, ".weight", {intermediate, hidden}, {0, it}, {0, hidden},
                     islice, {0, hidden});
      AddExpertShard(&w13, ep, e, kW3, ".weight", {intermediate, hidden}, {it, 2 * it}, {0, hidden},
                     islice, {0, hidden});
    }
  }
  {
    ParamSpec& w2 =
        NewParam(ep + "w2_weight", fp8 ? DType::kFP8E4M3 : format_.dtype, {experts, hidden, it});
    w2.shards.reserve(experts);
    for (int64_t e = 0; e < experts; ++e) {
      AddExpertShard(&w2, ep, e, kW2, ".weight", {hidden, intermediate}, {0, hidden}, {0, it},
                     {0, hidden}, islice);
    }
  }
  if (fp8) {
    const Fp8Block& blk = *format_.fp8;
    const int64_t ib = ib_rows.extent();
    const int64_t hk = CeilDiv(hidden, blk.k);  // hidden as input columns of w1/w3
    const int64_t hn = CeilDiv(hidden, blk.n);  // hidden as output rows of w2
    {
      std::string name = ep + "w13_weight_scale_inv";
      module_scales_.push_back(name);
      ParamSpec& s13 = NewParam(std::move(name), DType::kF32, {experts, 2 * ib, hk});
      s13.shards.reserve(2 * experts);
      const Shape src{CeilDiv(intermediate, blk.n), hk};
      for (int64_t e = 0; e < experts; ++e) {
        AddExpertShard(&s13, ep, e, kW1, ".weight_scale_inv", src, {0, ib}, {0, hk}, ib_rows,
                       {0, hk});
        AddExpertShard(&s13, ep, e, kW3, ".weight_scale_inv", src, {ib, 2 * ib}, {0, hk}, ib_rows,
                       {0, hk});
      }
    }
    {
      std::string name = ep + "w2_weight_scale_inv";
      module_scales_.push_back(name);
      ParamSpec& s2 = NewParam(std::move(name), DType::kF32, {experts, hn, ib_cols.extent()});
      s2.shards.reserve(experts);
      const Shape src{hn, CeilDiv(intermediate, blk.k)};
      for (int64_t e = 0; e < experts; ++e) {
        AddExpertShard(&s2, ep, e, kW2, ".weight_scale_inv", src, {0, hn}, {0, ib_cols.extent()},
                       {0, hn}, ib_cols);
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

void AddLmHead(Builder* b, int64_t hidden, int64_t vocab, bool tied, DType dtype) {
  b->BeginModule("lm_head");
  b->AddReplicated("model.norm.weight", {hidden}, dtype);
  if (!tied) b->AddVocabParallel("lm_head.weight", vocab, hidden);
}

Result<ManifestPtr> Builder::Finish() && {
  return Manifest::Build(std::move(params_), std::move(modules_), std::move(derived_));
}

}  // namespace wtx::hf
