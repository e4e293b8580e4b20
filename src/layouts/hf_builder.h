// Internal machinery shared by the Hugging Face manifest generators (src/layouts/hf_*.cc): typed
// reads of config.json fields, and a Builder that lays out one rank's parameters, shards, modules
// and derived states the way vLLM does (fused linears, stacked experts, TP slices, fp8 block
// scales).
//
// Thread-safety: a Builder is a single-threaded accumulator; ConfigReader is read-only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/box.h"
#include "wtx/dtype.h"
#include "wtx/hf_manifest.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx::hf {

// Reads typed fields of a config.json object. Errors are kInvalidArgument naming the field.
class ConfigReader {
 public:
  explicit ConfigReader(const nlohmann::json& j) : j_(j) {}

  // A required integer > 0.
  Result<int64_t> PositiveInt(const char* key) const;
  // A positive count of at most `max` (layers, experts): beyond it kInvalidArgument naming the
  // key, before anything is sized from it.
  Result<int64_t> PositiveCount(const char* key, int64_t max) const;
  // An integer >= min; absent or null gives `dflt`.
  Result<int64_t> IntOr(const char* key, int64_t dflt, int64_t min) const;
  // An integer > 0; absent or null gives nullopt.
  Result<std::optional<int64_t>> OptionalPositiveInt(const char* key) const;
  // A boolean; absent or null gives `dflt`.
  Result<bool> BoolOr(const char* key, bool dflt) const;
  // A string; absent or null gives `dflt`.
  Result<std::string> StringOr(const char* key, std::string dflt) const;
  // An array of integers >= 0; absent or null gives an empty list.
  Result<std::vector<int64_t>> IntListOr(const char* key) const;

  // The keys of kLayoutKeys (hf_builder.cc: the config keys that change the parameters vLLM
  // builds for some model family) that this config sets to something other than "off" (null,
  // false, 0, an empty list) and that the family never read: refused by ManifestFromHfConfig
  // instead of silently dropped.
  std::vector<std::string> UnreadLayoutKeys() const;

 private:
  nlohmann::json::const_iterator Find(const char* key) const;

  const nlohmann::json& j_;
  mutable std::set<std::string, std::less<>> read_;  // every key a family looked up
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
  // vLLM's Fp8Config.ignored_layers (quantization_config.ignored_layers, or
  // modules_to_not_convert when that is empty): layer prefixes kept in `dtype`, no scales.
  std::vector<std::string> ignored_layers;
  std::string_view ignored_field;  // the config key they came from, for errors

  // vLLM's exact-prefix match: is the module `prefix` listed?
  bool Lists(std::string_view prefix) const;
  // vLLM's experts branch: does a listed name containing "experts" contain `prefix`?
  bool ListsExperts(std::string_view prefix) const;
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
// "tp 16 exceeds num_experts 8 (...)" when tp > experts, which vLLM's Qwen3-MoE and DeepSeek
// MoE blocks refuse.
Status CheckTpAtMostExperts(int tp, int64_t experts, std::string_view field);

// vLLM's pad_vocab_size: the vocabulary rounded up to a multiple of 64.
constexpr int64_t kVocabPadding = 64;
inline int64_t PadVocab(int64_t vocab) {
  return (vocab + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
}

// Where one rank sits: its tensor-parallel slice and, with expert parallelism (ep > 1), its
// expert-parallel rank. vLLM's expert-parallel group is the dp x tp world (ep = dp * tp), so
// ep_rank = rank and tp_rank = rank % tp.
struct Parallelism {
  int tp = 1;
  int tp_rank = 0;
  int ep = 1;  // 1: experts are tp-sliced on their intermediate dimension
  int ep_rank = 0;
  ExpertPlacement placement = ExpertPlacement::kLinear;
};

// Checkpoint names of a routed expert's three projections (after "<prefix>.experts.<e>").
struct ExpertNames {
  const char* gate = ".gate_proj";  // w1
  const char* up = ".up_proj";      // w3
  const char* down = ".down_proj";  // w2
};

// The routed experts of one MoE layer.
struct ExpertsSpec {
  int64_t experts = 0;
  std::string_view experts_field;  // config field of the expert count, for errors
  int64_t hidden = 0;
  int64_t intermediate = 0;
  std::string_view intermediate_field;
  ExpertNames names;
  // The router `gate` is a quantized linear in the fp8 layout (vLLM builds Qwen3-MoE's router
  // with the model's quant_config; Mixtral's and DeepSeek's with none).
  bool quantized_router = false;
};

class Builder {
 public:
  Builder(Parallelism par, WeightFormat format);

  int tp() const { return par_.tp; }
  int rank() const { return par_.tp_rank; }  // the tensor-parallel rank
  int ep() const { return par_.ep; }
  const WeightFormat& format() const { return format_; }
  // True once AddExperts has been called.
  bool has_experts() const { return has_experts_; }

  // This rank's slice of `extent` split evenly over the group.
  // REQUIRES: tp() divides extent
  Range TpSlice(int64_t extent) const;

  // Starts a module; the parameters added afterwards belong to it until the next BeginModule.
  void BeginModule(std::string name);

  // A parameter loaded whole on every rank, its source being its own name.
  void AddReplicated(std::string name, Shape shape, DType dtype);

  // "tp 3 does not divide vocab_size 250 padded to 256 (...)" unless tp divides PadVocab(vocab).
  Status CheckVocab(int64_t vocab) const;
  // A vocab-parallel embedding or lm_head as vLLM's VocabParallelEmbedding: [PadVocab(vocab)/tp,
  // hidden] rows; shard "0" holds this rank's rows of the [vocab, hidden] source, and, when the
  // vocabulary is padded, shard "pad" (no source) the padding rows after them on every rank
  // (empty on ranks without padding, so that all ranks have the same shard ids).
  // REQUIRES: CheckVocab(vocab).ok()
  void AddVocabParallel(std::string name, int64_t vocab, int64_t hidden);

  // A linear layer `prefix` ("model.layers.0.self_attn.qkv_proj"): `prefix.weight` stacks the
  // row slices of `parts` in order, over the input columns `in_slice` of `in`. With `bias`, also
  // `prefix.bias` (parts' biases, same rows). With an fp8 format and `quantized`, the weight is
  // fp8_e4m3 and `prefix.weight_scale_inv` (f32) holds each part's scale blocks, stacked the
  // same way, unless the layer is skipped (see QuantizesLinear). Fails when an fp8 block does not
  // align with a slice.
  Status AddLinear(std::string_view prefix, std::span<const LinearPart> parts, int64_t in,
                   Range in_slice, bool bias, bool quantized);

  // Errors for experts this group cannot lay out: ep not dividing the expert count, or (without
  // expert parallelism) tp not dividing the intermediate size. Names the fields.
  Status CheckExperts(const ExpertsSpec& spec, int64_t layers) const;
  // Routed experts of an MoE layer `prefix` ("model.layers.3.mlp"), stacked as vLLM's FusedMoE:
  // `prefix.experts.w13_weight` [E_local, 2*I', H] (shards eK.w1 = gate, eK.w3 = up) and
  // `prefix.experts.w2_weight` [E_local, H, I'] (eK.w2 = down), plus their `*_weight_scale_inv`
  // with an fp8 format. Without expert parallelism E_local = E and I' = I/tp; with it the MoE
  // layer is not tensor-sliced (I' = I) and the rank holds E/ep whole experts (linear: a
  // contiguous block; round-robin: ep_rank, ep_rank + ep, ...). Shard ids name the local slot K
  // (the same ids on every rank); the source names the global expert.
  // REQUIRES: CheckExperts(spec).ok()
  Status AddExperts(std::string_view prefix, const ExpertsSpec& spec);
  // The router `<module>.gate` [E, H]: a replicated weight, or with an fp8 format and
  // spec.quantized_router a replicated fp8 linear with its block scales (unless skipped).
  Status AddRouter(std::string_view module, const ExpertsSpec& spec);

  // vLLM's is_layer_skipped for the linear `prefix` fed by `parts`: with an fp8 format, is it
  // quantized? A fused layer (several parts) is skipped when every part's checkpoint module is
  // listed and quantized when none is; some but not all is an error naming the layer and the
  // parts, which vLLM refuses too. False without an fp8 format.
  Result<bool> QuantizesLinear(std::string_view prefix, std::span<const LinearPart> parts) const;
  // The same for the FusedMoE layer `experts_prefix` ("model.layers.3.mlp.experts"): skipped
  // when a listed name containing "experts" contains the prefix (any one expert listed keeps the
  // whole layer's experts unquantized, as vLLM).
  bool QuantizesExperts(std::string_view experts_prefix) const;

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

  Parallelism par_;
  WeightFormat format_;
  bool has_experts_ = false;
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

// The opening module "model.embed_tokens": the vocab-parallel `model.embed_tokens.weight`.
void AddEmbedding(Builder* b, int64_t vocab, int64_t hidden);

// The closing module "lm_head": the replicated final norm `model.norm.weight` and, unless the
// embedding is tied, the vocab-parallel `lm_head.weight`.
void AddLmHead(Builder* b, int64_t hidden, int64_t vocab, bool tied, DType dtype);

// The per-layer preamble every family shares. "model.layers.N".
std::string LayerPrefix(int64_t layer);
// Opens the attention module `model.layers.N.self_attn` with the layer's replicated
// `model.layers.N.input_layernorm.weight` [hidden]; returns the module name.
std::string BeginAttentionModule(Builder* b, int64_t layer, int64_t hidden);
// Opens the MLP module `model.layers.N.<name>` ("mlp", "block_sparse_moe") with the layer's
// replicated `model.layers.N.post_attention_layernorm.weight` [hidden]; returns the module name.
std::string BeginMlpModule(Builder* b, int64_t layer, int64_t hidden, std::string_view name);

// Which decoder layers are MoE: `moe` and `dense` tell whether at least one layer of
// [0, layers) is of that kind (a family reads the fields of a kind only when some layer has it).
struct LayerKinds {
  bool dense = false;
  bool moe = false;
};
LayerKinds ClassifyLayers(int64_t layers, const std::function<bool(int64_t layer)>& is_moe);

// The decoder skeleton of every family: checks the (padded) vocabulary against tp, then lays
// out the embedding, `layer(N)` for N in [0, layers) (which opens its own modules, normally
// with BeginAttentionModule and BeginMlpModule), then the final norm and lm_head.
Status AddDecoderLayers(Builder* b, int64_t hidden, int64_t layers, int64_t vocab, bool tied,
                        const std::function<Status(int64_t layer)>& layer);

// Grouped-query attention as vLLM's LlamaAttention (llama, mistral, qwen2, qwen3, qwen3_moe,
// mixtral): fused qkv_proj, o_proj, and Qwen3's per-head q_norm / k_norm.
struct GqaAttention {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  bool qkv_bias = false;
  bool o_bias = false;
  bool qk_norm = false;
};
// Reads hidden_size, num_attention_heads, num_key_value_heads (default: heads) and head_dim
// (default: hidden / heads), and checks them against tp (KV heads replicated when fewer than
// tp). Biases and norms are left false for the family to set.
Result<GqaAttention> ReadGqaAttention(const ConfigReader& c, int tp);
// The module `model.layers.N.self_attn`: input_layernorm, qkv_proj (q, k, v), o_proj,
// q_norm / k_norm [head_dim] when qk_norm, and the fp8 scales' derived state.
Status AddGqaAttention(Builder* b, const GqaAttention& a, int64_t layer);

// The sparse MoE module `model.layers.N.<name>` ("mlp", "block_sparse_moe") of decoder layer
// N: post_attention_layernorm, the replicated router `<module>.gate.weight` [E, H], the routed
// experts, and the fp8 scales' derived state.
// REQUIRES: b->CheckExperts(spec).ok()
// `extra(module)`, when given, adds more parameters to the module (a shared expert) before its
// derived state.
Status AddRoutedMoeModule(Builder* b, int64_t layer, std::string_view name, const ExpertsSpec& spec,
                          const std::function<Status(const std::string& module)>& extra = {});

// The frame of a llama-shaped decoder: attention, layer count, vocabulary, tied embeddings.
struct DecoderFrame {
  GqaAttention attn;
  int64_t layers = 0;
  int64_t vocab = 0;
  bool tied = false;
};
// Reads ReadGqaAttention's fields, num_hidden_layers, vocab_size and tie_word_embeddings.
Result<DecoderFrame> ReadDecoderFrame(const ConfigReader& c, const Builder& b);
// AddDecoderLayers with, per layer, the GQA attention and `mlp(layer)` (which opens its own
// module).
Status AddDecoder(Builder* b, const DecoderFrame& f,
                  const std::function<Status(int64_t layer)>& mlp);
// The dense MLP module `model.layers.N.mlp` of a llama-shaped decoder: post_attention_layernorm
// and the gated MLP (with biases when `bias`), plus the fp8 scales' derived state.
Status AddDenseMlpModule(Builder* b, int64_t layer, int64_t hidden, int64_t intermediate,
                         bool bias);

}  // namespace wtx::hf
