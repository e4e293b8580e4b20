// Internal machinery shared by the Hugging Face manifest generators (src/hf_*.cc): typed reads
// of config.json fields, and a Builder that lays out one TP rank's parameters, shards, modules
// and derived states the way vLLM does (fused linears, stacked experts, TP slices, fp8 block
// scales).
//
// Thread-safety: a Builder is a single-threaded accumulator; ConfigReader is read-only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/box.h"
#include "wtx/dtype.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx::hf {

// Reads typed fields of a config.json object. Errors are kInvalidArgument naming the field.
class ConfigReader {
 public:
  explicit ConfigReader(const nlohmann::json& j) : j_(j) {}

  // A required integer > 0.
  Result<int64_t> PositiveInt(const char* key) const;
  // An integer >= min; absent or null gives `dflt`.
  Result<int64_t> IntOr(const char* key, int64_t dflt, int64_t min) const;
  // An integer > 0; absent or null gives nullopt.
  Result<std::optional<int64_t>> OptionalPositiveInt(const char* key) const;
  // A boolean; absent or null gives `dflt`.
  Result<bool> BoolOr(const char* key, bool dflt) const;
  // A string; absent or null gives `dflt`.
  Result<std::string> StringOr(const char* key, std::string dflt) const;

 private:
  const nlohmann::json& j_;
};

// fp8 block quantization: one f32 scale per block_n x block_k tile of a weight.
struct Fp8Block {
  int64_t n = 128;  // output rows per block
  int64_t k = 128;  // input columns per block
};

// How the weights of a generated manifest are stored.
struct WeightFormat {
  DType dtype = DType::kBF16;   // embeddings, norms, router and unquantized linears
  std::optional<Fp8Block> fp8;  // set: quantized linears are fp8_e4m3 + f32 weight_scale_inv
};

// One checkpoint tensor feeding a block of output rows of a (fused) linear layer.
struct LinearPart {
  std::string_view id;  // shard id ("q", "0", ...)
  std::string source;   // checkpoint module name ("model.layers.0.self_attn.q_proj")
  int64_t rows = 0;     // full output rows of the checkpoint tensor
  Range row_slice;      // the rows this rank holds
};

// "tp 3 does not divide num_attention_heads 32" unless tp divides value.
Status CheckTpDivides(int tp, int64_t value, std::string_view field);

class Builder {
 public:
  Builder(int tp, int rank, WeightFormat format);

  int tp() const { return tp_; }
  int rank() const { return rank_; }
  const WeightFormat& format() const { return format_; }

  // This rank's slice of `extent` split evenly over the group.
  // REQUIRES: tp() divides extent
  Range TpSlice(int64_t extent) const;

  // Starts a module; the parameters added afterwards belong to it until the next BeginModule.
  void BeginModule(std::string name);

  // A parameter loaded whole on every rank, its source being its own name.
  void AddReplicated(std::string name, Shape shape, DType dtype);

  // A vocab-parallel embedding or lm_head: rows TpSlice(vocab) of the [vocab, hidden] source.
  // REQUIRES: tp() divides vocab
  void AddVocabParallel(std::string name, int64_t vocab, int64_t hidden);

  // A linear layer `prefix` ("model.layers.0.self_attn.qkv_proj"): `prefix.weight` stacks the
  // row slices of `parts` in order, over the input columns `in_slice` of `in`. With `bias`, also
  // `prefix.bias` (parts' biases, same rows). With an fp8 format and `quantized`, the weight is
  // fp8_e4m3 and `prefix.weight_scale_inv` (f32) holds each part's scale blocks, stacked the
  // same way. Fails when an fp8 block does not align with a slice.
  Status AddLinear(std::string_view prefix, std::span<const LinearPart> parts, int64_t in,
                   Range in_slice, bool bias, bool quantized);

  // Routed experts of an MoE layer `prefix` ("model.layers.3.mlp"), stacked as vLLM's FusedMoE
  // without expert parallelism: `prefix.experts.w13_weight` [E, 2*I/tp, H] (shards eE.w1 =
  // gate_proj, eE.w3 = up_proj) and `prefix.experts.w2_weight` [E, H, I/tp] (eE.w2 =
  // down_proj), plus their `*_weight_scale_inv` with an fp8 format.
  // REQUIRES: tp() divides intermediate
  Status AddExperts(std::string_view prefix, int64_t experts, int64_t hidden, int64_t intermediate);

  void AddDerived(std::string name, std::vector<std::string> sources, Phase phase);
  // With an fp8 format, adds derived state `name` (phase kernel) over the weight_scale_inv
  // parameters of the current module, if it has any.
  void AddModuleScalesDerived(std::string name);

  Result<ManifestPtr> Finish() &&;

 private:
  ParamSpec& NewParam(std::string name, DType dtype, Shape shape);
  // Source scale blocks of a weight slice: [begin / block, ceil(end / block)).
  Result<Range> BlockSlice(Range slice, int64_t extent, int64_t block, std::string_view source,
                           std::string_view dim) const;

  int tp_;
  int rank_;
  WeightFormat format_;
  std::vector<ParamSpec> params_;
  std::vector<ModuleSpec> modules_;
  std::vector<DerivedSpec> derived_;
  std::vector<std::string> module_scales_;  // scale params of the current module
};

// A gated MLP `prefix` ("model.layers.0.mlp"): column-parallel `prefix.gate_up_proj` (shards
// 0 = gate_proj, 1 = up_proj) and row-parallel `prefix.down_proj`, quantized with fp8.
// REQUIRES: b->tp() divides intermediate
Status AddGatedMlp(Builder* b, std::string_view prefix, int64_t hidden, int64_t intermediate,
                   bool bias);

// The closing module "lm_head": the replicated final norm `model.norm.weight` and, unless the
// embedding is tied, the vocab-parallel `lm_head.weight`.
void AddLmHead(Builder* b, int64_t hidden, int64_t vocab, bool tied, DType dtype);

}  // namespace wtx::hf
