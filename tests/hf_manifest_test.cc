// Manifests generated from Hugging Face configs: published totals, vLLM layouts, exact source
// coverage over the ranks of a TP group, fingerprints, errors, and the `wtx manifest` CLI.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/hf_manifest.h"

namespace wtx {
namespace {

using nlohmann::json;

std::string ConfigPath(const std::string& model) {
  return std::string(WTX_CONFORMANCE_DIR) + "/models/" + model + "/config.json";
}

json LoadConfig(const std::string& model) {
  std::ifstream in(ConfigPath(model));
  REQUIRE(in.good());
  return json::parse(in);
}

ManifestPtr Generate(const json& config, const HfManifestOptions& o) {
  auto m = ManifestFromHfConfig(config, o);
  INFO(m.status().ToString());
  REQUIRE(m.ok());
  return *m;
}

ManifestPtr Generate(const json& config, int tp, int rank, std::optional<DType> dtype) {
  HfManifestOptions o;
  o.tp = tp;
  o.rank = rank;
  o.dtype = dtype;
  return Generate(config, o);
}

HfManifestOptions Ep(int tp, int ep, int rank, std::optional<DType> dtype = DType::kBF16,
                     ExpertPlacement placement = ExpertPlacement::kLinear) {
  HfManifestOptions o;
  o.tp = tp;
  o.ep = ep;
  o.rank = rank;
  o.dtype = dtype;
  o.expert_placement = placement;
  return o;
}

Status GenerateError(const json& config, const HfManifestOptions& o) {
  auto m = ManifestFromHfConfig(config, o);
  REQUIRE_FALSE(m.ok());
  return m.status();
}

ManifestPtr Generate(const std::string& model, int tp = 1, int rank = 0,
                     std::optional<DType> dtype = DType::kBF16) {
  return Generate(LoadConfig(model), tp, rank, dtype);
}

Status GenerateError(const json& config, int tp, int rank = 0,
                     std::optional<DType> dtype = DType::kBF16) {
  HfManifestOptions o;
  o.tp = tp;
  o.rank = rank;
  o.dtype = dtype;
  auto m = ManifestFromHfConfig(config, o);
  REQUIRE_FALSE(m.ok());
  return m.status();
}

const ParamSpec& Param(const Manifest& m, const std::string& name) {
  auto i = m.FindParam(name);
  INFO(name);
  REQUIRE(i.has_value());
  return m.params()[*i];
}

const ShardSpec& Shard(const Manifest& m, const std::string& param, const std::string& id) {
  const ParamSpec& p = Param(m, param);
  auto k = m.FindShard(*m.FindParam(param), id);
  INFO(param << " shard " << id);
  REQUIRE(k.has_value());
  return p.shards[*k];
}

const DerivedSpec& Derived(const Manifest& m, const std::string& name) {
  auto i = m.FindDerived(name);
  INFO(name);
  REQUIRE(i.has_value());
  return m.derived()[*i];
}

bool ModuleHas(const Manifest& m, const std::string& module, const std::string& param) {
  auto i = m.FindModule(module);
  if (!i) return false;
  for (const auto& p : m.modules()[*i].params) {
    if (p == param) return true;
  }
  return false;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool Contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// Interval argument for exact coverage over the ranks of a group: for each source, the distinct
// source boxes held by the ranks must be pairwise disjoint and their volumes must add up to the
// source's volume (so they partition it), and each distinct box must be held by exactly
// `expected(source)` ranks.
class CoverageCheck {
 public:
  void AddRank(const Manifest& m) {
    fingerprints_.insert(m.Fingerprint());
    for (const ParamSpec& p : m.params()) {
      for (const ShardSpec& s : p.shards) {
        if (s.padding) continue;  // no source
        Cover& c = covers_[s.source];
        if (c.boxes.empty()) {
          c.shape = s.source_shape;
        } else if (c.shape != s.source_shape && failure_.empty()) {
          failure_ = s.source + ": two source shapes";
        }
        bool found = false;
        for (auto& [box, n] : c.boxes) {
          if (box == s.source_box) {
            ++n;
            found = true;
            break;
          }
        }
        if (!found) c.boxes.emplace_back(s.source_box, 1);
      }
    }
  }

  // Returns the first violation, or "" when every source is covered as expected.
  std::string Check(const std::function<int(const std::string&)>& expected) const {
    if (!failure_.empty()) return failure_;
    for (const auto& [name, c] : covers_) {
      int64_t volume = 0;
      const int want = expected(name);
      for (size_t i = 0; i < c.boxes.size(); ++i) {
        volume += NumElements(c.boxes[i].first);
        if (c.boxes[i].second != want) {
          return name + ": box " + BoxToString(c.boxes[i].first) + " held by " +
                 std::to_string(c.boxes[i].second) + " ranks, expected " + std::to_string(want);
        }
        for (size_t j = 0; j < i; ++j) {
          if (Overlaps(c.boxes[i].first, c.boxes[j].first)) {
            return name + ": boxes " + BoxToString(c.boxes[i].first) + " and " +
                   BoxToString(c.boxes[j].first) + " overlap";
          }
        }
      }
      if (volume != NumElements(c.shape)) {
        return name + ": distinct boxes cover " + std::to_string(volume) + " of " +
               std::to_string(NumElements(c.shape)) + " elements";
      }
    }
    return "";
  }

  size_t distinct_fingerprints() const { return fingerprints_.size(); }
  size_t sources() const { return covers_.size(); }
  int64_t source_elements() const {
    int64_t n = 0;
    for (const auto& [name, c] : covers_) n += NumElements(c.shape);
    return n;
  }

 private:
  struct Cover {
    Shape shape;
    std::vector<std::pair<Box, int>> boxes;  // distinct source boxes, with how many ranks hold each
  };
  std::unordered_map<std::string, Cover> covers_;
  std::unordered_set<std::string> fingerprints_;
  std::string failure_;
};

// Per-element check for small models: counts how often each element of each source is held
// over all ranks.
std::string CheckElementCoverage(const std::vector<ManifestPtr>& ranks,
                                 const std::function<int(const std::string&)>& expected) {
  std::unordered_map<std::string, std::vector<int>> counts;
  for (const auto& m : ranks) {
    for (const ParamSpec& p : m->params()) {
      for (const ShardSpec& s : p.shards) {
        if (s.padding) continue;  // no source
        auto& c = counts[s.source];
        c.resize(NumElements(s.source_shape));
        ForEachFlatRun(s.source_shape, s.source_box, [&](int64_t begin, int64_t n) {
          for (int64_t i = begin; i < begin + n; ++i) ++c[i];
        });
      }
    }
  }
  for (const auto& [name, c] : counts) {
    const int want = expected(name);
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i] != want) {
        return name + "[" + std::to_string(i) + "] held " + std::to_string(c[i]) +
               " times, expected " + std::to_string(want);
      }
    }
  }
  return "";
}

// Expected coverage multiplicity of a llama / qwen2 source over a group of `tp` ranks.
std::function<int(const std::string&)> LlamaMultiplicity(int tp, int kv_heads) {
  return [=](const std::string& s) {
    if (EndsWith(s, "layernorm.weight") || s == "model.norm.weight") return tp;
    if ((Contains(s, ".k_proj.") || Contains(s, ".v_proj.")) && kv_heads < tp) {
      return tp / kv_heads;
    }
    return 1;
  };
}

// Expected coverage multiplicity of a deepseek_v3 / kimi_k2 source.
std::function<int(const std::string&)> DeepseekMultiplicity(int tp) {
  return [=](const std::string& s) {
    if (EndsWith(s, "layernorm.weight") || s == "model.norm.weight" ||
        EndsWith(s, ".mlp.gate.weight") || EndsWith(s, "e_score_correction_bias") ||
        Contains(s, ".q_a_proj.") || Contains(s, ".kv_a_proj_with_mqa.")) {
      return tp;
    }
    return 1;
  };
}

std::vector<ManifestPtr> AllRanks(const json& config, int tp, std::optional<DType> dtype) {
  std::vector<ManifestPtr> out;
  for (int r = 0; r < tp; ++r) out.push_back(Generate(config, tp, r, dtype));
  return out;
}

// Every rank of a (tp, ep) group.
std::vector<ManifestPtr> AllRanks(const json& config, HfManifestOptions o) {
  std::vector<ManifestPtr> out;
  for (int r = 0; r < o.GroupSize(); ++r) {
    o.rank = r;
    out.push_back(Generate(config, o));
  }
  return out;
}

// Expected coverage multiplicity of any family's source over a group of (tp, ep): tensors
// every rank loads whole once per rank; KV heads fewer than tp tp/kv times per replica;
// tp-sliced tensors once per replica (dp = group / tp replicas of the attention and dense
// layers); routed experts exactly once in the group with expert parallelism.
std::function<int(const std::string&)> Multiplicity(int tp, int ep, int kv_heads) {
  const int group = ep > 1 ? ep : tp;
  const int dp = group / tp;
  return [=](const std::string& s) {
    if (EndsWith(s, "layernorm.weight") || s == "model.norm.weight" ||
        EndsWith(s, ".gate.weight") || EndsWith(s, ".gate.weight_scale_inv") ||
        EndsWith(s, "shared_expert_gate.weight") || EndsWith(s, "e_score_correction_bias") ||
        EndsWith(s, "q_norm.weight") || EndsWith(s, "k_norm.weight") || Contains(s, ".q_a_proj.") ||
        Contains(s, ".kv_a_proj_with_mqa.")) {
      return group;
    }
    if (ep > 1 && Contains(s, ".experts.") && !Contains(s, "shared_experts")) return 1;
    if ((Contains(s, ".k_proj.") || Contains(s, ".v_proj.")) && kv_heads < tp) {
      return dp * tp / kv_heads;
    }
    return dp;
  };
}

// The source tensors named over all ranks, each with its element count.
int64_t DistinctSourceElements(const std::vector<ManifestPtr>& ranks) {
  std::unordered_map<std::string_view, int64_t> sources;
  for (const auto& m : ranks) {
    for (const ParamSpec& p : m->params()) {
      for (const ShardSpec& s : p.shards) {
        if (!s.padding) sources.emplace(s.source, NumElements(s.source_shape));
      }
    }
  }
  int64_t total = 0;
  for (const auto& [name, n] : sources) total += n;
  return total;
}

json WithFp8(json config, int block) {
  config["quantization_config"] = {{"quant_method", "fp8"},
                                   {"fmt", "e4m3"},
                                   {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {block, block}}};
  return config;
}

}  // namespace

// ---- Published totals (bf16, no scales, no MTP layer) ----

TEST_CASE("Llama31_8B_TotalMatchesPublished") {
  auto m = Generate("llama-3.1-8b");
  CHECK(m->TotalElements() == 8030261248);
  const ManifestSummary s = Summarize(*m);
  CHECK(s.params == 8030261248);
  CHECK(s.bytes == 2 * 8030261248);
  CHECK(s.tensors == 1 + 32 * 6 + 2);
  CHECK(s.shards == 1 + 32 * (1 + 3 + 1 + 1 + 2 + 1) + 2);
}

TEST_CASE("Qwen25_05B_TotalMatchesPublishedWithTiedEmbeddings") {
  auto m = Generate("qwen2.5-0.5b");
  CHECK(m->TotalElements() == 494032768);
  CHECK_FALSE(m->FindParam("lm_head.weight").has_value());
  CHECK(ModuleHas(*m, "lm_head", "model.norm.weight"));
}

TEST_CASE("DeepseekV3_TotalMatchesPublished") {
  auto m = Generate("deepseek-v3");
  CHECK(m->TotalElements() == 671026419200);
}

TEST_CASE("KimiK2_TotalIsComputedAtTp1") {
  // 61 layers (1 dense), 384 routed experts, 64 MLA heads, vocab 163840.
  auto m = Generate("kimi-k2");
  CHECK(m->TotalElements() == 1026408232448);
}

// ---- Layouts ----

TEST_CASE("Llama31_8B_Tp2Rank1_FusedQkvGateUpAndVocabSlices") {
  auto m = Generate("llama-3.1-8b", 2, 1);
  const std::string qkv = "model.layers.5.self_attn.qkv_proj.weight";
  CHECK(Param(*m, qkv).shape == Shape{3072, 4096});
  CHECK(Param(*m, qkv).dtype == DType::kBF16);
  const ShardSpec& q = Shard(*m, qkv, "q");
  CHECK(q.source == "model.layers.5.self_attn.q_proj.weight");
  CHECK(q.source_shape == Shape{4096, 4096});
  CHECK(q.box == Box{{0, 2048}, {0, 4096}});
  CHECK(q.source_box == Box{{2048, 4096}, {0, 4096}});
  const ShardSpec& k = Shard(*m, qkv, "k");
  CHECK(k.source == "model.layers.5.self_attn.k_proj.weight");
  CHECK(k.source_shape == Shape{1024, 4096});
  CHECK(k.box == Box{{2048, 2560}, {0, 4096}});
  CHECK(k.source_box == Box{{512, 1024}, {0, 4096}});
  const ShardSpec& v = Shard(*m, qkv, "v");
  CHECK(v.box == Box{{2560, 3072}, {0, 4096}});
  CHECK(v.source_box == Box{{512, 1024}, {0, 4096}});

  const ShardSpec& o = Shard(*m, "model.layers.5.self_attn.o_proj.weight", "0");
  CHECK(Param(*m, "model.layers.5.self_attn.o_proj.weight").shape == Shape{4096, 2048});
  CHECK(o.source == "model.layers.5.self_attn.o_proj.weight");
  CHECK(o.source_box == Box{{0, 4096}, {2048, 4096}});

  const std::string gu = "model.layers.5.mlp.gate_up_proj.weight";
  CHECK(Param(*m, gu).shape == Shape{14336, 4096});
  CHECK(Shard(*m, gu, "0").source == "model.layers.5.mlp.gate_proj.weight");
  CHECK(Shard(*m, gu, "0").source_box == Box{{7168, 14336}, {0, 4096}});
  CHECK(Shard(*m, gu, "1").source == "model.layers.5.mlp.up_proj.weight");
  CHECK(Shard(*m, gu, "1").box == Box{{7168, 14336}, {0, 4096}});
  CHECK(Shard(*m, "model.layers.5.mlp.down_proj.weight", "0").source_box ==
        Box{{0, 4096}, {7168, 14336}});

  CHECK(Param(*m, "model.embed_tokens.weight").shape == Shape{64128, 4096});
  CHECK(Shard(*m, "model.embed_tokens.weight", "0").source_box == Box{{64128, 128256}, {0, 4096}});
  CHECK(Shard(*m, "lm_head.weight", "0").source_box == Box{{64128, 128256}, {0, 4096}});
  CHECK(Param(*m, "model.norm.weight").shape == Shape{4096});

  CHECK(ModuleHas(*m, "model.layers.5.self_attn", "model.layers.5.input_layernorm.weight"));
  CHECK(ModuleHas(*m, "model.layers.5.self_attn", qkv));
  CHECK(ModuleHas(*m, "model.layers.5.mlp", "model.layers.5.post_attention_layernorm.weight"));
  CHECK(ModuleHas(*m, "model.layers.5.mlp", gu));
  CHECK(ModuleHas(*m, "model.embed_tokens", "model.embed_tokens.weight"));
  CHECK(ModuleHas(*m, "lm_head", "lm_head.weight"));
  CHECK(ModuleHas(*m, "lm_head", "model.norm.weight"));
  CHECK(m->modules().size() == 2 + 2 * 32);
  CHECK(m->derived().empty());
}

TEST_CASE("Llama31_8B_Tp16_ReplicatesKvHeadsAcrossRankPairs") {
  const json config = LoadConfig("llama-3.1-8b");
  for (int rank : {2, 3}) {
    auto m = Generate(config, 16, rank, DType::kBF16);
    const std::string qkv = "model.layers.0.self_attn.qkv_proj.weight";
    // 2 q heads + 1 k head + 1 v head of 128 rows; ranks 2 and 3 both hold KV head 1.
    CHECK(Param(*m, qkv).shape == Shape{512, 4096});
    CHECK(Shard(*m, qkv, "q").source_box == Box{{rank * 256, rank * 256 + 256}, {0, 4096}});
    CHECK(Shard(*m, qkv, "k").source_box == Box{{128, 256}, {0, 4096}});
    CHECK(Shard(*m, qkv, "v").source_box == Box{{128, 256}, {0, 4096}});
  }
}

TEST_CASE("Qwen25_05B_QkvBiasShardsFollowTheWeight") {
  auto m = Generate("qwen2.5-0.5b", 2, 1);
  const std::string bias = "model.layers.0.self_attn.qkv_proj.bias";
  CHECK(Param(*m, bias).shape == Shape{448 + 64 + 64});
  CHECK(Shard(*m, bias, "q").source == "model.layers.0.self_attn.q_proj.bias");
  CHECK(Shard(*m, bias, "q").source_box == Box{{448, 896}});
  CHECK(Shard(*m, bias, "k").source == "model.layers.0.self_attn.k_proj.bias");
  CHECK(Shard(*m, bias, "k").box == Box{{448, 512}});
  CHECK(Shard(*m, bias, "k").source_box == Box{{64, 128}});
  CHECK(Shard(*m, bias, "v").box == Box{{512, 576}});
  CHECK_FALSE(m->FindParam("model.layers.0.self_attn.o_proj.bias").has_value());
  CHECK_FALSE(m->FindParam("lm_head.weight").has_value());
  CHECK(ModuleHas(*m, "model.layers.0.self_attn", bias));
}

TEST_CASE("DeepseekV3_Fp8Tp8Rank1_MlaMoeScalesAndDerived") {
  auto m = Generate(LoadConfig("deepseek-v3"), 8, 1, std::nullopt);
  const std::string a = "model.layers.3.self_attn";
  // Replicated fused down-projections, fp8 with per-part scale blocks (12 + ceil(576/128)).
  const std::string qkv_a = a + ".fused_qkv_a_proj.weight";
  CHECK(Param(*m, qkv_a).dtype == DType::kFP8E4M3);
  CHECK(Param(*m, qkv_a).shape == Shape{2112, 7168});
  CHECK(Shard(*m, qkv_a, "0").source == a + ".q_a_proj.weight");
  CHECK(Shard(*m, qkv_a, "1").source == a + ".kv_a_proj_with_mqa.weight");
  CHECK(Shard(*m, qkv_a, "1").box == Box{{1536, 2112}, {0, 7168}});
  CHECK(Shard(*m, qkv_a, "1").source_box == Box{{0, 576}, {0, 7168}});
  const std::string qkv_a_s = a + ".fused_qkv_a_proj.weight_scale_inv";
  CHECK(Param(*m, qkv_a_s).dtype == DType::kF32);
  CHECK(Param(*m, qkv_a_s).shape == Shape{17, 56});
  CHECK(Shard(*m, qkv_a_s, "0").source == a + ".q_a_proj.weight_scale_inv");
  CHECK(Shard(*m, qkv_a_s, "0").box == Box{{0, 12}, {0, 56}});
  CHECK(Shard(*m, qkv_a_s, "1").box == Box{{12, 17}, {0, 56}});
  CHECK(Shard(*m, qkv_a_s, "1").source_shape == Shape{5, 56});
  CHECK(Param(*m, a + ".q_a_layernorm.weight").shape == Shape{1536});
  CHECK(Param(*m, a + ".kv_a_layernorm.weight").shape == Shape{512});
  // Column-parallel q_b_proj / kv_b_proj, row-parallel o_proj.
  CHECK(Param(*m, a + ".q_b_proj.weight").shape == Shape{3072, 1536});
  CHECK(Shard(*m, a + ".q_b_proj.weight", "0").source_box == Box{{3072, 6144}, {0, 1536}});
  CHECK(Param(*m, a + ".q_b_proj.weight_scale_inv").shape == Shape{24, 12});
  CHECK(Shard(*m, a + ".q_b_proj.weight_scale_inv", "0").source_box == Box{{24, 48}, {0, 12}});
  CHECK(Param(*m, a + ".kv_b_proj.weight").shape == Shape{4096, 512});
  CHECK(Shard(*m, a + ".kv_b_proj.weight", "0").source_box == Box{{4096, 8192}, {0, 512}});
  CHECK(Param(*m, a + ".o_proj.weight").shape == Shape{7168, 2048});
  CHECK(Shard(*m, a + ".o_proj.weight", "0").source_box == Box{{0, 7168}, {2048, 4096}});
  CHECK(Shard(*m, a + ".o_proj.weight_scale_inv", "0").source_box == Box{{0, 56}, {16, 32}});
  // MLA derived state reads kv_b_proj and (fp8) its scales.
  const DerivedSpec& uk = Derived(*m, a + ".W_UK_T");
  CHECK(uk.phase == Phase::kAttention);
  CHECK(uk.sources ==
        std::vector<std::string>{a + ".kv_b_proj.weight", a + ".kv_b_proj.weight_scale_inv"});
  CHECK(Derived(*m, a + ".W_UV").sources == uk.sources);
  const DerivedSpec& as = Derived(*m, a + ".fp8_scales");
  CHECK(as.phase == Phase::kKernel);
  CHECK(as.sources.size() == 4);
  CHECK(as.sources.front() == qkv_a_s);

  // MoE layer 3: router, stacked experts, shared experts.
  const std::string mlp = "model.layers.3.mlp";
  CHECK(Param(*m, mlp + ".gate.weight").shape == Shape{256, 7168});
  CHECK(Param(*m, mlp + ".gate.weight").dtype == DType::kBF16);
  CHECK(Param(*m, mlp + ".gate.e_score_correction_bias").dtype == DType::kF32);
  const std::string w13 = mlp + ".experts.w13_weight";
  CHECK(Param(*m, w13).shape == Shape{256, 512, 7168});
  CHECK(Param(*m, w13).dtype == DType::kFP8E4M3);
  CHECK(Param(*m, w13).shards.size() == 512);
  CHECK(Shard(*m, w13, "e5.w1").source == mlp + ".experts.5.gate_proj.weight");
  CHECK(Shard(*m, w13, "e5.w1").box == Box{{5, 6}, {0, 256}, {0, 7168}});
  CHECK(Shard(*m, w13, "e5.w3").source == mlp + ".experts.5.up_proj.weight");
  CHECK(Shard(*m, w13, "e5.w3").box == Box{{5, 6}, {256, 512}, {0, 7168}});
  CHECK(Shard(*m, w13, "e5.w3").source_box == Box{{256, 512}, {0, 7168}});
  const std::string w2 = mlp + ".experts.w2_weight";
  CHECK(Param(*m, w2).shape == Shape{256, 7168, 256});
  CHECK(Shard(*m, w2, "e255.w2").source == mlp + ".experts.255.down_proj.weight");
  CHECK(Shard(*m, w2, "e255.w2").box == Box{{255, 256}, {0, 7168}, {0, 256}});
  CHECK(Shard(*m, w2, "e255.w2").source_box == Box{{0, 7168}, {256, 512}});
  CHECK(Param(*m, mlp + ".experts.w13_weight_scale_inv").shape == Shape{256, 4, 56});
  CHECK(Shard(*m, mlp + ".experts.w13_weight_scale_inv", "e5.w3").box ==
        Box{{5, 6}, {2, 4}, {0, 56}});
  CHECK(Shard(*m, mlp + ".experts.w13_weight_scale_inv", "e5.w3").source_box ==
        Box{{2, 4}, {0, 56}});
  CHECK(Param(*m, mlp + ".experts.w2_weight_scale_inv").shape == Shape{256, 56, 2});
  CHECK(Param(*m, mlp + ".shared_experts.gate_up_proj.weight").shape == Shape{512, 7168});
  CHECK(Shard(*m, mlp + ".shared_experts.gate_up_proj.weight", "1").source ==
        mlp + ".shared_experts.up_proj.weight");
  CHECK(Param(*m, mlp + ".shared_experts.down_proj.weight").shape == Shape{7168, 256});
  CHECK(Derived(*m, mlp + ".fp8_scales").sources.size() == 4);
  CHECK(ModuleHas(*m, mlp, "model.layers.3.post_attention_layernorm.weight"));
  CHECK(ModuleHas(*m, mlp, w13));

  // Dense layers below first_k_dense_replace; unquantized embeddings, norms, lm_head.
  CHECK(Param(*m, "model.layers.2.mlp.gate_up_proj.weight").shape == Shape{4608, 7168});
  CHECK_FALSE(m->FindParam("model.layers.2.mlp.experts.w13_weight").has_value());
  CHECK(Param(*m, "model.embed_tokens.weight").dtype == DType::kBF16);
  CHECK(Param(*m, "lm_head.weight").dtype == DType::kBF16);
  CHECK(Param(*m, "model.layers.3.input_layernorm.weight").dtype == DType::kBF16);
  CHECK_FALSE(m->FindParam("lm_head.weight_scale_inv").has_value());
  // The multi-token-prediction layer (index 61) is excluded.
  CHECK(m->FindParam("model.layers.60.input_layernorm.weight").has_value());
  CHECK_FALSE(m->FindParam("model.layers.61.input_layernorm.weight").has_value());
}

TEST_CASE("DeepseekV3_DtypeOverrideIgnoresQuantization") {
  auto m = Generate(LoadConfig("deepseek-v3"), 8, 0, DType::kBF16);
  CHECK(Param(*m, "model.layers.0.self_attn.fused_qkv_a_proj.weight").dtype == DType::kBF16);
  CHECK_FALSE(
      m->FindParam("model.layers.0.self_attn.fused_qkv_a_proj.weight_scale_inv").has_value());
  CHECK(Derived(*m, "model.layers.0.self_attn.W_UK_T").sources ==
        std::vector<std::string>{"model.layers.0.self_attn.kv_b_proj.weight"});
  CHECK_FALSE(m->FindDerived("model.layers.0.self_attn.fp8_scales").has_value());
  auto f32 = Generate(LoadConfig("deepseek-v3"), 8, 0, DType::kF32);
  CHECK(Param(*f32, "model.layers.3.mlp.experts.w2_weight").dtype == DType::kF32);
}

TEST_CASE("ToJsonRoundTripsThroughParseManifest") {
  for (const char* model : {"tiny-llama", "tiny-qwen2", "tiny-deepseek"}) {
    auto m = Generate(model, 2, 1);
    auto parsed = ParseManifest(m->ToJson());
    INFO(model << ": " << parsed.status().ToString());
    REQUIRE(parsed.ok());
    CHECK((*parsed)->Fingerprint() == m->Fingerprint());
    CHECK((*parsed)->TotalShards() == m->TotalShards());
  }
}

// ---- Coverage over the ranks of a TP group, and fingerprints ----

TEST_CASE("Llama31_8B_SourcesCoveredExactlyOnceAtEveryTp") {
  const json config = LoadConfig("llama-3.1-8b");
  for (int tp : {1, 2, 4, 8, 16, 32}) {
    CoverageCheck cover;
    for (int r = 0; r < tp; ++r) cover.AddRank(*Generate(config, tp, r, DType::kBF16));
    INFO("tp " << tp);
    CHECK(cover.Check(LlamaMultiplicity(tp, 8)) == "");
    CHECK(cover.distinct_fingerprints() == 1);
    CHECK(cover.source_elements() == 8030261248);
    CHECK(cover.sources() == 1 + 32 * 9 + 2);
  }
}

TEST_CASE("Qwen25_05B_SourcesCoveredExactlyOnceAtEveryValidTp") {
  const json config = LoadConfig("qwen2.5-0.5b");
  for (int tp : {1, 2}) {
    CoverageCheck cover;
    for (int r = 0; r < tp; ++r) cover.AddRank(*Generate(config, tp, r, DType::kBF16));
    INFO("tp " << tp);
    CHECK(cover.Check(LlamaMultiplicity(tp, 2)) == "");
    CHECK(cover.distinct_fingerprints() == 1);
    CHECK(cover.source_elements() == 494032768);
  }
}

TEST_CASE("TinyModels_EveryElementCoveredAsExpected") {
  const json llama = LoadConfig("tiny-llama");
  const json qwen = LoadConfig("tiny-qwen2");
  const json deepseek = LoadConfig("tiny-deepseek");
  for (int tp : {1, 2, 4}) {
    INFO("tp " << tp);
    auto l = AllRanks(llama, tp, DType::kBF16);
    CHECK(CheckElementCoverage(l, LlamaMultiplicity(tp, 2)) == "");
    auto q = AllRanks(qwen, tp, DType::kBF16);
    CHECK(CheckElementCoverage(q, LlamaMultiplicity(tp, 2)) == "");
    auto d = AllRanks(deepseek, tp, DType::kBF16);
    CHECK(CheckElementCoverage(d, DeepseekMultiplicity(tp)) == "");
    // fp8 with 8x8 blocks: weights and their scale blocks.
    auto d8 = AllRanks(WithFp8(deepseek, 8), tp, std::nullopt);
    CHECK(CheckElementCoverage(d8, DeepseekMultiplicity(tp)) == "");
    REQUIRE(d8[0]->FindParam("model.layers.1.mlp.experts.w13_weight_scale_inv").has_value());
    for (const auto& ranks : {l, q, d, d8}) {
      for (const auto& m : ranks) CHECK(m->Fingerprint() == ranks[0]->Fingerprint());
    }
  }
}

TEST_CASE("DeepseekV3_Fp8Tp8_SourcesAndScalesCoveredExactlyOnce") {
  const json config = LoadConfig("deepseek-v3");
  CoverageCheck cover;
  for (int r = 0; r < 8; ++r) cover.AddRank(*Generate(config, 8, r, std::nullopt));
  CHECK(cover.Check(DeepseekMultiplicity(8)) == "");
  CHECK(cover.distinct_fingerprints() == 1);
}

TEST_CASE("FingerprintDiffersAcrossTpAndDtype") {
  const json config = LoadConfig("tiny-llama");
  auto tp1 = Generate(config, 1, 0, DType::kBF16);
  auto tp2 = Generate(config, 2, 0, DType::kBF16);
  auto f32 = Generate(config, 2, 0, DType::kF32);
  CHECK(tp1->Fingerprint() != tp2->Fingerprint());
  CHECK(tp2->Fingerprint() != f32->Fingerprint());
  // Default dtype without a quantization config is bf16.
  CHECK(Generate(config, 2, 1, std::nullopt)->Fingerprint() == tp2->Fingerprint());
}

TEST_CASE("KimiK2_Tp8_Builds") {
  const json config = LoadConfig("kimi-k2");
  auto r0 = Generate(config, 8, 0, std::nullopt);
  auto r7 = Generate(config, 8, 7, std::nullopt);
  CHECK(r0->Fingerprint() == r7->Fingerprint());
  CHECK(r0->TotalShards() > 100000);
  const std::string w13 = "model.layers.60.mlp.experts.w13_weight";
  CHECK(Param(*r7, w13).shape == Shape{384, 512, 7168});
  CHECK(Shard(*r7, w13, "e383.w3").source_box == Box{{1792, 2048}, {0, 7168}});
  // Every source tensor once: the bf16 checkpoint total.
  auto bf16 = Generate(config, 8, 3, DType::kBF16);
  std::unordered_map<std::string_view, int64_t> sources;
  for (const ParamSpec& p : bf16->params()) {
    for (const ShardSpec& s : p.shards) sources.emplace(s.source, NumElements(s.source_shape));
  }
  int64_t total = 0;
  for (const auto& [name, n] : sources) total += n;
  CHECK(total == 1026408232448);
}

// ---- Errors ----

TEST_CASE("UnknownModelTypeIsAnError") {
  json config = LoadConfig("tiny-llama");
  config["model_type"] = "gpt2";
  const Status s = GenerateError(config, 1);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK(s.message() ==
        "model_type: unknown 'gpt2' "
        "(llama|mistral|qwen2|qwen3|qwen3_moe|mixtral|deepseek_v3|kimi_k2)");
  config.erase("model_type");
  CHECK(Contains(GenerateError(config, 1).message(), "model_type"));
}

TEST_CASE("TpNotDividingHeadsIsAnError") {
  CHECK(GenerateError(LoadConfig("llama-3.1-8b"), 3).message() ==
        "tp 3 does not divide num_attention_heads 32");
  CHECK(GenerateError(LoadConfig("deepseek-v3"), 3).message() ==
        "tp 3 does not divide num_attention_heads 128");
  // qwen2.5-0.5b has 14 heads, but tp 7 would spread its 2 KV heads unevenly, and 14 does not
  // divide its MLP.
  const json qwen = LoadConfig("qwen2.5-0.5b");
  CHECK(Contains(GenerateError(qwen, 7).message(), "num_key_value_heads 2 does not divide tp 7"));
  CHECK(GenerateError(qwen, 14).message() == "tp 14 does not divide intermediate_size 4864");
  CHECK(Contains(GenerateError(qwen, 4).message(), "tp 4 does not divide num_attention_heads 14"));
}

TEST_CASE("BadOptionsAndFieldsAreErrors") {
  const json llama = LoadConfig("tiny-llama");
  CHECK(Contains(GenerateError(llama, 2, 2).message(), "rank 2 out of range for tp 2"));
  CHECK(Contains(GenerateError(llama, 2, -1).message(), "rank -1"));
  CHECK(Contains(GenerateError(llama, 0).message(), "tp 0"));
  json missing = llama;
  missing.erase("hidden_size");
  CHECK(Contains(GenerateError(missing, 1).message(), "hidden_size: missing"));
  json wrong = llama;
  wrong["num_hidden_layers"] = "two";
  CHECK(Contains(GenerateError(wrong, 1).message(), "num_hidden_layers: expected"));
  CHECK_FALSE(ManifestFromHfConfig(json::array(), {}).ok());
  auto file = ManifestFromHfConfigFile("/nonexistent/config.json", {});
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().code() == ErrorCode::kNotFound);
}

TEST_CASE("Fp8BlockMisalignedWithTpSliceIsAnError") {
  // intermediate_size 18432 / 32 = 576 rows per rank: 4.5 blocks of 128 rows.
  const json config = LoadConfig("deepseek-v3");
  const Status s = GenerateError(config, 32, 0, std::nullopt);
  CHECK(Contains(s.message(), "quantization_config.weight_block_size"));
  // Ignoring the quantization config, tp 32 is a valid layout.
  CHECK(Generate(config, 32, 31, DType::kBF16)->TotalElements() > 0);
}

TEST_CASE("UnsupportedQuantizationIsAnErrorUnlessDtypeIsGiven") {
  json config = LoadConfig("tiny-llama");
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  CHECK(Contains(GenerateError(config, 1, 0, std::nullopt).message(),
                 "quantization_config.quant_method: unsupported 'awq'"));
  CHECK(Generate(config, 1, 0, DType::kBF16)->TotalElements() > 0);
  config["quantization_config"] = {{"quant_method", "fp8"}};
  CHECK(Contains(GenerateError(config, 1, 0, std::nullopt).message(),
                 "quantization_config.weight_block_size"));
}

// ---- Qwen3, Qwen3-MoE, Mistral, Mixtral ----

TEST_CASE("NewFamilies_TotalsMatchPublished") {
  CHECK(Generate("qwen3-8b")->TotalElements() == 8190735360);
  auto q4 = Generate("qwen3-4b");
  CHECK(q4->TotalElements() == 4022468096);
  CHECK_FALSE(q4->FindParam("lm_head.weight").has_value());  // tied embeddings
  CHECK(Generate("qwen3-30b-a3b")->TotalElements() == 30532122624);
  CHECK(Generate("mistral-7b")->TotalElements() == 7241732096);
  CHECK(Generate("mixtral-8x7b")->TotalElements() == 46702792704);
}

TEST_CASE("Qwen3_8B_Tp2_QkNormsOfHeadDimAndFusedQkv") {
  auto m = Generate("qwen3-8b", 2, 1);
  const std::string a = "model.layers.7.self_attn";
  CHECK(Param(*m, a + ".q_norm.weight").shape == Shape{128});
  CHECK(Param(*m, a + ".k_norm.weight").shape == Shape{128});
  CHECK(Shard(*m, a + ".q_norm.weight", "0").source == a + ".q_norm.weight");
  CHECK(ModuleHas(*m, a, a + ".k_norm.weight"));
  // 16 q heads + 4 k + 4 v heads of 128 rows; no biases without attention_bias.
  CHECK(Param(*m, a + ".qkv_proj.weight").shape == Shape{3072, 4096});
  CHECK(Shard(*m, a + ".qkv_proj.weight", "k").source_box == Box{{512, 1024}, {0, 4096}});
  CHECK_FALSE(m->FindParam(a + ".qkv_proj.bias").has_value());
  CHECK(Param(*m, "model.layers.7.mlp.gate_up_proj.weight").shape == Shape{12288, 4096});
}

TEST_CASE("Qwen3_HeadDimFromConfigDiffersFromHiddenOverHeads") {
  // Qwen3-4B: hidden 2560 / 32 heads = 80, but head_dim is 128.
  auto m = Generate("qwen3-4b");
  CHECK(Param(*m, "model.layers.0.self_attn.qkv_proj.weight").shape ==
        Shape{(32 + 8 + 8) * 128, 2560});
  CHECK(Param(*m, "model.layers.0.self_attn.o_proj.weight").shape == Shape{2560, 32 * 128});
  CHECK(Param(*m, "model.layers.0.self_attn.q_norm.weight").shape == Shape{128});
}

TEST_CASE("Qwen3Moe_30B_Tp4_RouterReplicatedExpertsStackedNoSharedExpert") {
  auto m = Generate("qwen3-30b-a3b", 4, 2);
  const std::string mlp = "model.layers.11.mlp";
  CHECK(Param(*m, mlp + ".gate.weight").shape == Shape{128, 2048});
  CHECK(Shard(*m, mlp + ".gate.weight", "0").source_box == Box{{0, 128}, {0, 2048}});
  const std::string w13 = mlp + ".experts.w13_weight";
  CHECK(Param(*m, w13).shape == Shape{128, 384, 2048});
  CHECK(Shard(*m, w13, "e5.w1").source == mlp + ".experts.5.gate_proj.weight");
  CHECK(Shard(*m, w13, "e5.w3").source == mlp + ".experts.5.up_proj.weight");
  CHECK(Shard(*m, w13, "e5.w3").source_box == Box{{384, 576}, {0, 2048}});
  CHECK(Param(*m, mlp + ".experts.w2_weight").shape == Shape{128, 2048, 192});
  CHECK(Shard(*m, mlp + ".experts.w2_weight", "e127.w2").source ==
        mlp + ".experts.127.down_proj.weight");
  CHECK_FALSE(m->FindParam(mlp + ".shared_experts.gate_up_proj.weight").has_value());
  CHECK_FALSE(m->FindParam(mlp + ".gate_up_proj.weight").has_value());
  CHECK(Param(*m, "model.layers.11.self_attn.q_norm.weight").shape == Shape{128});
  CHECK(ModuleHas(*m, mlp, w13));
}

TEST_CASE("Qwen3Moe_SparseStepAndMlpOnlyLayersChooseTheMoeLayers") {
  json c = LoadConfig("tiny-qwen3-moe");  // 3 layers, decoder_sparse_step 2: layer 1 is MoE
  auto m = Generate(c, 1, 0, DType::kBF16);
  CHECK(Param(*m, "model.layers.0.mlp.gate_up_proj.weight").shape == Shape{256, 64});
  CHECK(Param(*m, "model.layers.1.mlp.experts.w13_weight").shape == Shape{8, 64, 64});
  CHECK(Param(*m, "model.layers.1.mlp.gate.weight").shape == Shape{8, 64});
  CHECK_FALSE(m->FindParam("model.layers.1.mlp.gate_up_proj.weight").has_value());
  CHECK(m->FindParam("model.layers.2.mlp.gate_up_proj.weight").has_value());
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = {0, 2};
  auto m2 = Generate(c, 1, 0, DType::kBF16);
  CHECK(m2->FindParam("model.layers.0.mlp.gate_up_proj.weight").has_value());
  CHECK(m2->FindParam("model.layers.1.mlp.experts.w2_weight").has_value());
  CHECK(m2->FindParam("model.layers.2.mlp.gate_up_proj.weight").has_value());
  c["mlp_only_layers"] = json::array();
  auto m3 = Generate(c, 1, 0, DType::kBF16);
  for (int l = 0; l < 3; ++l) {
    CHECK(
        m3->FindParam("model.layers." + std::to_string(l) + ".mlp.experts.w13_weight").has_value());
  }
}

TEST_CASE("Mistral7B_IsTheLlamaLayout") {
  auto m = Generate("mistral-7b", 4, 3);
  auto llama_like = LoadConfig("mistral-7b");
  llama_like["model_type"] = "llama";
  CHECK(Generate(llama_like, 4, 3, DType::kBF16)->Fingerprint() == m->Fingerprint());
  CHECK(Param(*m, "model.layers.31.self_attn.qkv_proj.weight").shape == Shape{1536, 4096});
  CHECK(Shard(*m, "model.embed_tokens.weight", "0").source_box == Box{{24000, 32000}, {0, 4096}});
}

TEST_CASE("Mixtral8x7B_Tp2_BlockSparseMoeWithW1W2W3Sources") {
  auto m = Generate("mixtral-8x7b", 2, 1);
  const std::string moe = "model.layers.4.block_sparse_moe";
  CHECK(Param(*m, moe + ".gate.weight").shape == Shape{8, 4096});
  const std::string w13 = moe + ".experts.w13_weight";
  CHECK(Param(*m, w13).shape == Shape{8, 14336, 4096});
  CHECK(Shard(*m, w13, "e3.w1").source == moe + ".experts.3.w1.weight");
  CHECK(Shard(*m, w13, "e3.w1").source_box == Box{{7168, 14336}, {0, 4096}});
  CHECK(Shard(*m, w13, "e3.w3").source == moe + ".experts.3.w3.weight");
  CHECK(Shard(*m, w13, "e3.w3").box == Box{{3, 4}, {7168, 14336}, {0, 4096}});
  const std::string w2 = moe + ".experts.w2_weight";
  CHECK(Param(*m, w2).shape == Shape{8, 4096, 7168});
  CHECK(Shard(*m, w2, "e7.w2").source == moe + ".experts.7.w2.weight");
  CHECK(Shard(*m, w2, "e7.w2").source_box == Box{{0, 4096}, {7168, 14336}});
  CHECK(ModuleHas(*m, moe, "model.layers.4.post_attention_layernorm.weight"));
  CHECK(ModuleHas(*m, moe, w13));
  CHECK_FALSE(m->FindModule("model.layers.4.mlp").has_value());
}

// ---- dtype from the config ----

TEST_CASE("DtypeFromTorchDtypeWhenNotGiven") {
  const json mixtral = LoadConfig("tiny-mixtral");  // torch_dtype float16
  auto f16 = Generate(mixtral, 1, 0, std::nullopt);
  for (const ParamSpec& p : f16->params()) {
    INFO(p.name);
    CHECK(p.dtype == DType::kF16);
  }
  CHECK(Generate(mixtral, 1, 0, DType::kBF16)->params()[0].dtype == DType::kBF16);
  json c = mixtral;
  c["torch_dtype"] = "bfloat16";
  CHECK(Generate(c, 1, 0, std::nullopt)->params()[0].dtype == DType::kBF16);
  // vLLM's dtype=auto downcasts float32 checkpoints; absent reads as float32.
  c["torch_dtype"] = "float32";
  CHECK(Generate(c, 1, 0, std::nullopt)->params()[0].dtype == DType::kBF16);
  c.erase("torch_dtype");
  CHECK(Generate(c, 1, 0, std::nullopt)->params()[0].dtype == DType::kBF16);
  c["dtype"] = "float16";  // the newer transformers name
  CHECK(Generate(c, 1, 0, std::nullopt)->params()[0].dtype == DType::kF16);
  c["torch_dtype"] = "int8";
  CHECK(Contains(GenerateError(c, 1, 0, std::nullopt).message(), "torch_dtype: unsupported"));
  // fp8 configs: quantized linears fp8, the rest torch_dtype.
  json fp8 = WithFp8(LoadConfig("tiny-deepseek"), 8);
  fp8["torch_dtype"] = "float16";
  auto d = Generate(fp8, 1, 0, std::nullopt);
  CHECK(Param(*d, "model.embed_tokens.weight").dtype == DType::kF16);
  CHECK(Param(*d, "model.layers.1.mlp.experts.w13_weight").dtype == DType::kFP8E4M3);
}

// ---- Vocabulary padding ----

TEST_CASE("VocabPaddedToMultipleOf64_PaddingShardsHaveNoSource") {
  const json c = LoadConfig("tiny-qwen3-moe");  // vocab 250 -> 256
  {
    auto m = Generate(c, 1, 0, DType::kBF16);
    const std::string e = "model.embed_tokens.weight";
    CHECK(Param(*m, e).shape == Shape{256, 64});
    CHECK(Shard(*m, e, "0").box == Box{{0, 250}, {0, 64}});
    CHECK(Shard(*m, e, "0").source_shape == Shape{250, 64});
    const ShardSpec& pad = Shard(*m, e, "pad");
    CHECK(pad.padding);
    CHECK(pad.source.empty());
    CHECK(pad.box == Box{{250, 256}, {0, 64}});
    CHECK(Shard(*m, "lm_head.weight", "pad").box == Box{{250, 256}, {0, 64}});
    CHECK(m->ShardsOfSource(e).size() == 1);
    CHECK(m->ShardsOfSource("").empty());
  }
  // tp 4: 64 rows per rank; rank 3 holds source rows [192, 250) and 6 padding rows, the other
  // ranks an empty padding shard (same shard ids on every rank, so one fingerprint).
  auto ranks = AllRanks(c, 4, DType::kBF16);
  const std::string lm = "lm_head.weight";
  CHECK(Param(*ranks[3], lm).shape == Shape{64, 64});
  CHECK(Shard(*ranks[3], lm, "0").source_box == Box{{192, 250}, {0, 64}});
  CHECK(Shard(*ranks[3], lm, "pad").box == Box{{58, 64}, {0, 64}});
  CHECK(Shard(*ranks[1], lm, "0").source_box == Box{{64, 128}, {0, 64}});
  CHECK(Shard(*ranks[1], lm, "pad").box == Box{{64, 64}, {0, 64}});
  for (const auto& m : ranks) CHECK(m->Fingerprint() == ranks[0]->Fingerprint());
  CHECK(CheckElementCoverage(ranks, Multiplicity(4, 1, 2)) == "");
  // The padding layout round-trips through the manifest JSON.
  const json j = ranks[3]->ToJson();
  auto parsed = ParseManifest(j);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK((*parsed)->Fingerprint() == ranks[3]->Fingerprint());
  CHECK(Shard(**parsed, lm, "pad").padding);
  // A vocabulary already a multiple of 64 has no padding shard.
  CHECK_FALSE(Generate("tiny-llama", 2, 1)->FindShard(0, "pad").has_value());
}

TEST_CASE("RankWhoseVocabularyRowsAreAllPaddingIsAcceptedAsVllmDoes") {
  // 129 rows padded to 192 at tp 4: 48 rows per rank, rank 3's rows [144, 192) all past the
  // vocabulary. vLLM loads nothing there and zero-fills; the manifest says exactly that.
  json c = LoadConfig("tiny-llama");
  c["vocab_size"] = 129;
  auto ranks = AllRanks(c, 4, DType::kBF16);
  const std::string e = "model.embed_tokens.weight";
  CHECK(Param(*ranks[3], e).shape == Shape{48, 64});
  CHECK(Shard(*ranks[3], e, "0").padding);
  CHECK(Shard(*ranks[3], e, "pad").box == Box{{0, 48}, {0, 64}});
  CHECK(ranks[3]->ShardsOfSource(e).empty());
  CHECK(Shard(*ranks[2], e, "0").source_box == Box{{96, 129}, {0, 64}});
  for (const auto& m : ranks) CHECK(m->Fingerprint() == ranks[0]->Fingerprint());
  CHECK(CheckElementCoverage(ranks, Multiplicity(4, 1, 2)) == "");
}

TEST_CASE("TpNotDividingThePaddedVocabularyIsAnError") {
  json c = LoadConfig("tiny-qwen3-moe");
  c["num_attention_heads"] = 12;  // head_dim stays 32
  c["num_key_value_heads"] = 3;
  c["intermediate_size"] = 96;
  c["moe_intermediate_size"] = 48;
  CHECK(GenerateError(c, 3).message() ==
        "tp 3 does not divide vocab_size 250 padded to 256 (vLLM pads the vocabulary to a "
        "multiple of 64)");
  json odd = LoadConfig("tiny-llama");
  odd["vocab_size"] = 255;  // pads to 256: tp 2 and 4 divide it
  CHECK(Param(*Generate(odd, 4, 3, DType::kBF16), "lm_head.weight").shape == Shape{64, 64});
  CHECK(GenerateError(LoadConfig("llama-3.1-8b"), 6).message() ==
        "tp 6 does not divide num_attention_heads 32");
}

TEST_CASE("PaddingShardJsonIsValidated") {
  const json base = {{"params",
                      {{{"name", "w"},
                        {"dtype", "bf16"},
                        {"shape", {4, 2}},
                        {"shards",
                         {{{"id", "0"},
                           {"source", "w"},
                           {"source_shape", {3, 2}},
                           {"box", {{0, 3}, {0, 2}}},
                           {"source_box", {{0, 3}, {0, 2}}}},
                          {{"id", "pad"}, {"layout", "padding"}, {"box", {{3, 4}, {0, 2}}}}}}}}}};
  auto ok = ParseManifest(base);
  INFO(ok.status().ToString());
  REQUIRE(ok.ok());
  CHECK((*ok)->ShardsOfSource("w").size() == 1);
  json with_source = base;
  with_source["params"][0]["shards"][1]["source"] = "w";
  CHECK(Contains(ParseManifest(with_source).status().message(),
                 "params[0].shards[1].source: a padding shard has no source"));
  json outside = base;
  outside["params"][0]["shards"][1]["box"] = {{3, 5}, {0, 2}};
  CHECK_FALSE(ParseManifest(outside).ok());
  json gap = base;
  gap["params"][0]["shards"].erase(1);
  CHECK(Contains(ParseManifest(gap).status().message(), "cover 6 of 8 elements"));
}

// ---- Expert parallelism ----

TEST_CASE("DeepseekV3_Fp8Tp8Ep8_WholeExpertsPerRank") {
  auto m = Generate(LoadConfig("deepseek-v3"), Ep(8, 8, 1, std::nullopt));
  const std::string mlp = "model.layers.3.mlp";
  const std::string w13 = mlp + ".experts.w13_weight";
  CHECK(Param(*m, w13).shape == Shape{32, 4096, 7168});
  CHECK(Param(*m, w13).dtype == DType::kFP8E4M3);
  CHECK(Param(*m, mlp + ".experts.w2_weight").shape == Shape{32, 7168, 2048});
  CHECK(Param(*m, mlp + ".experts.w13_weight_scale_inv").shape == Shape{32, 32, 56});
  CHECK(Param(*m, mlp + ".experts.w2_weight_scale_inv").shape == Shape{32, 56, 16});
  // Rank 1 holds global experts 32..63 whole, in local slots 0..31.
  CHECK(Shard(*m, w13, "e0.w1").source == mlp + ".experts.32.gate_proj.weight");
  CHECK(Shard(*m, w13, "e0.w1").source_box == Box{{0, 2048}, {0, 7168}});
  CHECK(Shard(*m, w13, "e0.w3").box == Box{{0, 1}, {2048, 4096}, {0, 7168}});
  CHECK(Shard(*m, w13, "e31.w3").source == mlp + ".experts.63.up_proj.weight");
  CHECK_FALSE(m->FindShard(*m->FindParam(w13), "e32.w1").has_value());
  CHECK(Shard(*m, mlp + ".experts.w2_weight_scale_inv", "e5.w2").source ==
        mlp + ".experts.37.down_proj.weight_scale_inv");
  CHECK(Shard(*m, mlp + ".experts.w2_weight_scale_inv", "e5.w2").source_box ==
        Box{{0, 56}, {0, 16}});
  // Router and score bias replicated; shared experts and attention stay tp-sliced.
  CHECK(Param(*m, mlp + ".gate.weight").shape == Shape{256, 7168});
  CHECK(Param(*m, mlp + ".gate.e_score_correction_bias").shape == Shape{256});
  CHECK(Param(*m, mlp + ".shared_experts.gate_up_proj.weight").shape == Shape{512, 7168});
  CHECK(Param(*m, "model.layers.3.self_attn.q_b_proj.weight").shape == Shape{3072, 1536});
  CHECK(Param(*m, "model.layers.2.mlp.gate_up_proj.weight").shape == Shape{4608, 7168});
  CHECK(Generate(LoadConfig("deepseek-v3"), Ep(8, 8, 6, std::nullopt))->Fingerprint() ==
        m->Fingerprint());
}

TEST_CASE("Qwen3MoeSharedExpertIsBuiltAsVllmDoes") {
  // Issue 36, 1.3: shared_expert_intermediate_size > 0 adds mlp.shared_expert.{gate_up_proj,
  // down_proj} (TP-sliced) and the replicated mlp.shared_expert_gate.weight [1, H].
  json c = LoadConfig("tiny-qwen3-moe");
  c["shared_expert_intermediate_size"] = 96;
  auto ranks = AllRanks(c, 2, DType::kBF16);
  const std::string gu = "model.layers.1.mlp.shared_expert.gate_up_proj.weight";
  CHECK(Param(*ranks[1], gu).shape == Shape{96, 64});
  CHECK(Shard(*ranks[1], gu, "1").source == "model.layers.1.mlp.shared_expert.up_proj.weight");
  CHECK(Shard(*ranks[1], gu, "1").source_box == Box{{48, 96}, {0, 64}});
  CHECK(Param(*ranks[1], "model.layers.1.mlp.shared_expert.down_proj.weight").shape ==
        Shape{64, 48});
  CHECK(Param(*ranks[0], "model.layers.1.mlp.shared_expert_gate.weight").shape == Shape{1, 64});
  CHECK(CheckElementCoverage(ranks, Multiplicity(2, 1, 2)) == "");
  // In the MLP module (a partial update of the layer's MLP covers it).
  const auto& mods = ranks[0]->modules();
  const auto mlp = std::find_if(mods.begin(), mods.end(),
                                [](const ModuleSpec& m) { return m.name == "model.layers.1.mlp"; });
  REQUIRE(mlp != mods.end());
  CHECK(std::count(mlp->params.begin(), mlp->params.end(),
                   "model.layers.1.mlp.shared_expert_gate.weight") == 1);
  c["shared_expert_intermediate_size"] = 97;
  CHECK(GenerateError(c, 2).message().find("shared_expert_intermediate_size") != std::string::npos);
}

// tiny-qwen3-moe with an fp8 quantization_config of 16x16 blocks (aligned at tp 2).
json TinyQwen3MoeFp8(json quant_extra = json::object()) {
  json c = LoadConfig("tiny-qwen3-moe");
  json q = {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {16, 16}}};
  q.update(quant_extra);
  c["quantization_config"] = q;
  return c;
}

TEST_CASE("Fp8RouterIsQuantizedWithScalesUnlessListed") {
  // Issue 36, 1.2: vLLM's Qwen3-MoE router is a ReplicatedLinear with the model's quant config.
  auto ranks = AllRanks(TinyQwen3MoeFp8(), 2, std::nullopt);
  const std::string gate = "model.layers.1.mlp.gate";
  CHECK(Param(*ranks[1], gate + ".weight").dtype == DType::kFP8E4M3);
  CHECK(Param(*ranks[1], gate + ".weight_scale_inv").shape == Shape{1, 4});  // ceil(8/16), 64/16
  const auto& scales = Derived(*ranks[0], "model.layers.1.mlp.fp8_scales").sources;
  CHECK(std::count(scales.begin(), scales.end(), gate + ".weight_scale_inv") == 1);
  CHECK(CheckElementCoverage(ranks, Multiplicity(2, 1, 2)) == "");

  auto listed =
      AllRanks(TinyQwen3MoeFp8({{"modules_to_not_convert", {gate, "lm_head"}}}), 2, std::nullopt);
  CHECK(Param(*listed[0], gate + ".weight").dtype == DType::kBF16);
  CHECK_FALSE(listed[0]->FindParam(gate + ".weight_scale_inv").has_value());
  CHECK(Param(*listed[0], "model.layers.1.mlp.experts.w13_weight").dtype == DType::kFP8E4M3);
  CHECK(CheckElementCoverage(listed, Multiplicity(2, 1, 2)) == "");
  // Mixtral's and DeepSeek's routers are built without a quant config: the model dtype.
  json mixtral = LoadConfig("tiny-mixtral");
  mixtral["quantization_config"] = TinyQwen3MoeFp8()["quantization_config"];
  const auto mm = Generate(mixtral, 1, 0, std::nullopt);
  CHECK(Param(*mm, "model.layers.0.block_sparse_moe.gate.weight").dtype ==
        Param(*mm, "model.embed_tokens.weight").dtype);
  CHECK_FALSE(mm->FindParam("model.layers.0.block_sparse_moe.gate.weight_scale_inv").has_value());
}

TEST_CASE("Fp8IgnoredLayersStayUnquantizedWithoutScales") {
  const std::string attn = "model.layers.0.self_attn";
  const json list = {attn + ".q_proj", attn + ".k_proj", attn + ".v_proj",
                     "model.layers.0.mlp.down_proj", "model.layers.0.input_layernorm"};
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    INFO(key);
    auto ranks = AllRanks(TinyQwen3MoeFp8({{key, list}}), 2, std::nullopt);
    const Manifest& m = *ranks[1];
    CHECK(Param(m, attn + ".qkv_proj.weight").dtype == DType::kBF16);
    CHECK_FALSE(m.FindParam(attn + ".qkv_proj.weight_scale_inv").has_value());
    CHECK(Param(m, attn + ".o_proj.weight").dtype == DType::kFP8E4M3);
    CHECK(Param(m, "model.layers.0.mlp.down_proj.weight").dtype == DType::kBF16);
    CHECK(Param(m, "model.layers.0.mlp.gate_up_proj.weight").dtype == DType::kFP8E4M3);
    // The module's scale refresh reads only the scales that exist.
    CHECK(Derived(m, attn + ".fp8_scales").sources ==
          std::vector<std::string>{attn + ".o_proj.weight_scale_inv"});
    // Another layer is quantized as before.
    CHECK(Param(m, "model.layers.2.self_attn.qkv_proj.weight").dtype == DType::kFP8E4M3);
    CHECK(CheckElementCoverage(ranks, Multiplicity(2, 1, 2)) == "");
  }
  // ignored_layers wins; an empty one falls back to modules_to_not_convert, as vLLM.
  auto m = Generate(TinyQwen3MoeFp8({{"ignored_layers", json::array()},
                                     {"modules_to_not_convert", {attn + ".o_proj"}}}),
                    1, 0, std::nullopt);
  CHECK(Param(*m, attn + ".o_proj.weight").dtype == DType::kBF16);
  m = Generate(TinyQwen3MoeFp8({{"ignored_layers", {attn + ".o_proj"}},
                                {"modules_to_not_convert", {"model.layers.0.mlp.down_proj"}}}),
               1, 0, std::nullopt);
  CHECK(Param(*m, attn + ".o_proj.weight").dtype == DType::kBF16);
  CHECK(Param(*m, "model.layers.0.mlp.down_proj.weight").dtype == DType::kFP8E4M3);
  // A name matches exactly, as vLLM's default (no substring match): "self_attn" skips nothing.
  m = Generate(TinyQwen3MoeFp8({{"ignored_layers", {"self_attn", "o_proj"}}}), 1, 0, std::nullopt);
  CHECK(Param(*m, attn + ".o_proj.weight").dtype == DType::kFP8E4M3);
  // Issue 45, 4: a fused layer is looked up by its checkpoint parts only (vLLM's
  // is_layer_skipped); its fused name listed skips nothing.
  m = Generate(TinyQwen3MoeFp8({{"ignored_layers", {attn + ".qkv_proj"}}}), 1, 0, std::nullopt);
  CHECK(Param(*m, attn + ".qkv_proj.weight").dtype == DType::kFP8E4M3);
  CHECK(m->FindParam(attn + ".qkv_proj.weight_scale_inv").has_value());
  m = Generate(TinyQwen3MoeFp8({{"ignored_layers", {"model.layers.0.mlp.gate_up_proj"}}}), 1, 0,
               std::nullopt);
  CHECK(Param(*m, "model.layers.0.mlp.gate_up_proj.weight").dtype == DType::kFP8E4M3);
}

TEST_CASE("Fp8ListedSharedExpertTakesVllmsExpertsBranch") {
  // Issue 45, 4: a layer whose name contains "experts" is skipped when a listed name containing
  // "experts" contains its name (vLLM's experts branch), here with a ".weight" suffix that an
  // exact match would miss.
  json c = LoadConfig("tiny-deepseek");
  const std::string down = "model.layers.1.mlp.shared_experts.down_proj";
  c["quantization_config"] = {{"quant_method", "fp8"},
                              {"weight_block_size", {8, 8}},
                              {"ignored_layers", {down + ".weight"}}};
  auto m = Generate(c, 1, 0, std::nullopt);
  CHECK(Param(*m, down + ".weight").dtype == DType::kBF16);
  CHECK_FALSE(m->FindParam(down + ".weight_scale_inv").has_value());
  // Its fused sibling is looked up by its parts (exactly): still fp8; the routed experts too.
  CHECK(Param(*m, "model.layers.1.mlp.shared_experts.gate_up_proj.weight").dtype ==
        DType::kFP8E4M3);
  CHECK(Param(*m, "model.layers.1.mlp.experts.w13_weight").dtype == DType::kFP8E4M3);
}

TEST_CASE("Fp8FusedLayerPartlyIgnoredIsRefusedNamingItsParts") {
  const std::string attn = "model.layers.2.self_attn";
  const std::string msg =
      GenerateError(
          TinyQwen3MoeFp8({{"modules_to_not_convert", {attn + ".q_proj", attn + ".v_proj"}}}), 1, 0,
          std::nullopt)
          .message();
  CHECK(msg.find("quantization_config.modules_to_not_convert") != std::string::npos);
  CHECK(msg.find(attn + ".qkv_proj") != std::string::npos);
  CHECK(msg.find("not listed: " + attn + ".k_proj") != std::string::npos);
  const std::string mlp =
      GenerateError(TinyQwen3MoeFp8({{"ignored_layers", {"model.layers.0.mlp.up_proj"}}}), 1, 0,
                    std::nullopt)
          .message();
  CHECK(mlp.find("quantization_config.ignored_layers") != std::string::npos);
  CHECK(mlp.find("model.layers.0.mlp.gate_up_proj") != std::string::npos);
}

TEST_CASE("Fp8AnyListedExpertKeepsTheLayersExpertsUnquantized") {
  // vLLM's FusedMoE check: a listed name containing "experts" that contains the layer's experts
  // prefix skips the whole stacked layer.
  auto ranks =
      AllRanks(TinyQwen3MoeFp8({{"ignored_layers", {"model.layers.1.mlp.experts.3.down_proj"}}}), 2,
               std::nullopt);
  const Manifest& m = *ranks[0];
  CHECK(Param(m, "model.layers.1.mlp.experts.w13_weight").dtype == DType::kBF16);
  CHECK(Param(m, "model.layers.1.mlp.experts.w2_weight").dtype == DType::kBF16);
  CHECK_FALSE(m.FindParam("model.layers.1.mlp.experts.w13_weight_scale_inv").has_value());
  CHECK(Param(m, "model.layers.1.mlp.gate.weight").dtype == DType::kFP8E4M3);
  CHECK(CheckElementCoverage(ranks, Multiplicity(2, 1, 2)) == "");
}

TEST_CASE("Fp8IgnoredKvBProjMakesItsAbsorbedCopiesReadOnlyTheWeight") {
  json c = LoadConfig("tiny-deepseek");
  c["quantization_config"] = {{"quant_method", "fp8"},
                              {"weight_block_size", {8, 8}},
                              {"ignored_layers", {"model.layers.1.self_attn.kv_b_proj"}}};
  auto m = Generate(c, 1, 0, std::nullopt);
  CHECK(Param(*m, "model.layers.1.self_attn.kv_b_proj.weight").dtype == DType::kBF16);
  CHECK(Derived(*m, "model.layers.1.self_attn.W_UK_T").sources ==
        std::vector<std::string>{"model.layers.1.self_attn.kv_b_proj.weight"});
  CHECK(Derived(*m, "model.layers.2.self_attn.W_UV").sources.size() == 2);
}

TEST_CASE("Fp8QuantizationConfigFieldsAreCheckedNamingThem") {
  CHECK(GenerateError(TinyQwen3MoeFp8({{"ignored_layers", "lm_head"}}), 1, 0, std::nullopt)
            .message()
            .find("quantization_config.ignored_layers: expected a list") != std::string::npos);
  CHECK(GenerateError(TinyQwen3MoeFp8({{"modules_to_not_convert", {"lm_head", 3}}}), 1, 0,
                      std::nullopt)
            .message()
            .find("quantization_config.modules_to_not_convert[1]") != std::string::npos);
  CHECK(GenerateError(TinyQwen3MoeFp8({{"activation_scheme", "static"}}), 1, 0, std::nullopt)
            .message()
            .find("quantization_config.activation_scheme") != std::string::npos);
}

TEST_CASE("LayoutKeyTheFamilyDoesNotModelIsRefusedNamingIt") {
  // Issue 36, 1.5: a key that changes vLLM's layout is never dropped silently.
  json llama = LoadConfig("tiny-llama");
  llama["num_experts"] = 8;
  const std::string m = GenerateError(llama, 1).message();
  CHECK(m.find("num_experts (8)") != std::string::npos);
  CHECK(m.find("model_type 'llama'") != std::string::npos);
  json mixtral = LoadConfig("tiny-mixtral");
  mixtral["q_lora_rank"] = 64;
  CHECK(GenerateError(mixtral, 1).message().find("q_lora_rank (64)") != std::string::npos);
  // Off values say "none of it": accepted.
  json off = LoadConfig("tiny-llama");
  off["num_experts"] = 0;
  off["n_shared_experts"] = nullptr;
  off["mlp_only_layers"] = json::array();
  CHECK(Generate(off, 1, 0, DType::kBF16)->params().size() ==
        Generate(LoadConfig("tiny-llama"), 1, 0, DType::kBF16)->params().size());
  // A key the family models is read, whatever its value.
  json biased = LoadConfig("tiny-llama");
  biased["mlp_bias"] = true;
  CHECK(Generate(biased, 1, 0, DType::kBF16)
            ->FindParam("model.layers.0.mlp.down_proj.bias")
            .has_value());
}

TEST_CASE("RoundRobinPlacementAppliesOnlyToModelsWithExpertGroupsAsVllm") {
  // Issue 36, 1.1: vLLM falls back to linear unless the model has expert groups (n_group > 1).
  const std::string w13 = "model.layers.0.block_sparse_moe.experts.w13_weight";
  json grouped = LoadConfig("mixtral-8x7b");
  grouped["n_group"] = 2;
  // (ep 4 over tp 1 is dp 4: all-to-all kernels, whose backend must route round-robin.)
  HfManifestOptions rr_options = Ep(1, 4, 1, DType::kBF16, ExpertPlacement::kRoundRobin);
  rr_options.all2all_backend = "deepep_low_latency";
  auto m = Generate(grouped, rr_options);
  CHECK(Param(*m, w13).shape == Shape{2, 2 * 14336, 4096});
  CHECK(Shard(*m, w13, "e0.w1").source == "model.layers.0.block_sparse_moe.experts.1.w1.weight");
  CHECK(Shard(*m, w13, "e1.w1").source == "model.layers.0.block_sparse_moe.experts.5.w1.weight");
  // Mixtral has no expert groups: round_robin requested, linear built (rank 1: experts 2, 3).
  auto fallback =
      Generate(LoadConfig("mixtral-8x7b"), Ep(1, 4, 1, DType::kBF16, ExpertPlacement::kRoundRobin));
  CHECK(Shard(*fallback, w13, "e0.w1").source ==
        "model.layers.0.block_sparse_moe.experts.2.w1.weight");
  std::string why;
  HfManifestOptions rr;
  rr.expert_placement = ExpertPlacement::kRoundRobin;
  CHECK(EffectiveExpertPlacement(LoadConfig("mixtral-8x7b"), rr, &why) == ExpertPlacement::kLinear);
  CHECK(why.find("n_group") != std::string::npos);
  json kimi_like = LoadConfig("kimi-k2");  // n_group 1: linear too
  CHECK(EffectiveExpertPlacement(kimi_like, rr) == ExpertPlacement::kLinear);
  CHECK(EffectiveExpertPlacement(LoadConfig("deepseek-v3"), rr) == ExpertPlacement::kRoundRobin);
  auto linear = Generate(LoadConfig("mixtral-8x7b"), Ep(1, 4, 1));
  CHECK(Shard(*linear, w13, "e1.w1").source ==
        "model.layers.0.block_sparse_moe.experts.3.w1.weight");
  CHECK(linear->Fingerprint() == m->Fingerprint());
  CHECK(ExpertPlacementFromName("round_robin") == ExpertPlacement::kRoundRobin);
  CHECK(ExpertPlacementName(ExpertPlacement::kLinear) == "linear");
  CHECK_FALSE(ExpertPlacementFromName("random").has_value());
}

TEST_CASE("EpOverDataParallelReplicas_AttentionTpSlicedByRankModTp") {
  // tp 2, ep 4: two data-parallel replicas of the attention, experts over all four ranks.
  const json c = LoadConfig("tiny-qwen3-moe");
  auto r3 = Generate(c, Ep(2, 4, 3));
  auto r1 = Generate(c, Ep(2, 4, 1));
  const std::string qkv = "model.layers.0.self_attn.qkv_proj.weight";
  CHECK(Shard(*r3, qkv, "q").source_box == Shard(*r1, qkv, "q").source_box);
  const std::string w13 = "model.layers.1.mlp.experts.w13_weight";
  CHECK(Param(*r3, w13).shape == Shape{2, 64, 64});
  CHECK(Shard(*r3, w13, "e0.w1").source == "model.layers.1.mlp.experts.6.gate_proj.weight");
  CHECK(Shard(*r1, w13, "e1.w1").source == "model.layers.1.mlp.experts.3.gate_proj.weight");
}

TEST_CASE("EveryFamily_EveryValidTpEp_CoversEverySourceElementExactlyOnce") {
  struct Model {
    std::string name;
    json config;
    int kv_heads;
    bool experts;
  };
  json qwen3 = LoadConfig("tiny-qwen3-moe");
  qwen3["model_type"] = "qwen3";
  // A dense Qwen3 has no experts (a qwen3 config that kept them would be refused, naming them).
  for (const char* k : {"num_experts", "moe_intermediate_size", "decoder_sparse_step",
                        "mlp_only_layers", "num_experts_per_tok", "norm_topk_prob"}) {
    qwen3.erase(k);
  }
  json mistral = LoadConfig("tiny-llama");
  mistral["model_type"] = "mistral";
  mistral["vocab_size"] = 200;  // padded to 256
  const std::vector<Model> models = {
      {"tiny-llama", LoadConfig("tiny-llama"), 2, false},
      {"tiny-qwen2", LoadConfig("tiny-qwen2"), 2, false},
      {"qwen3 (tiny)", qwen3, 2, false},
      {"mistral (tiny, padded vocab)", mistral, 2, false},
      {"tiny-qwen3-moe", LoadConfig("tiny-qwen3-moe"), 2, true},
      {"tiny-mixtral", LoadConfig("tiny-mixtral"), 2, true},
      {"tiny-deepseek", LoadConfig("tiny-deepseek"), 4, true},
      {"tiny-deepseek fp8 8x8", WithFp8(LoadConfig("tiny-deepseek"), 8), 4, true},
  };
  int groups = 0;
  for (const Model& model : models) {
    const std::optional<DType> dtype =
        model.config.contains("quantization_config") ? std::nullopt : std::optional(DType::kBF16);
    for (int tp : {1, 2, 4}) {
      for (int ep : {1, 2, 4, 8}) {
        if (ep > 1 && (!model.experts || ep % tp != 0)) continue;
        if (model.name == "tiny-mixtral" && ep > 4) continue;  // 4 experts
        for (auto placement : {ExpertPlacement::kLinear, ExpertPlacement::kRoundRobin}) {
          if (ep == 1 && placement == ExpertPlacement::kRoundRobin) continue;
          INFO(model.name << " tp " << tp << " ep " << ep << " " << ExpertPlacementName(placement));
          auto ranks = AllRanks(model.config, Ep(tp, ep, 0, dtype, placement));
          CHECK(CheckElementCoverage(ranks, Multiplicity(tp, ep, model.kv_heads)) == "");
          for (const auto& m : ranks) CHECK(m->Fingerprint() == ranks[0]->Fingerprint());
          ++groups;
        }
      }
    }
  }
  // 4 dense models x 3 tp; 8-expert models: 7 + 7 + 5 (tp 1, 2, 4) (tp, ep, placement)
  // groups each; tiny-mixtral (4 experts): 5 + 5 + 3.
  CHECK(groups == 4 * 3 + 3 * 19 + 13);
}

TEST_CASE("FullSizeMoe_EveryValidTpEp_IntervalCoverageAndCheckpointTotal") {
  struct Case {
    std::string model;
    int tp, ep;
    int kv_heads;
    int64_t total;
  };
  const std::vector<Case> cases = {
      {"qwen3-30b-a3b", 1, 1, 4, 30532122624}, {"qwen3-30b-a3b", 4, 1, 4, 30532122624},
      {"qwen3-30b-a3b", 8, 1, 4, 30532122624}, {"qwen3-30b-a3b", 4, 4, 4, 30532122624},
      {"qwen3-30b-a3b", 2, 8, 4, 30532122624}, {"qwen3-30b-a3b", 8, 16, 4, 30532122624},
      {"mixtral-8x7b", 2, 1, 8, 46702792704},  {"mixtral-8x7b", 8, 8, 8, 46702792704},
      {"mixtral-8x7b", 2, 4, 8, 46702792704},  {"deepseek-v3", 8, 8, 128, 671026419200},
      {"kimi-k2", 8, 16, 64, 1026408232448},
  };
  for (const Case& k : cases) {
    INFO(k.model << " tp " << k.tp << " ep " << k.ep);
    const json config = LoadConfig(k.model);
    CoverageCheck cover;
    std::vector<ManifestPtr> ranks;
    for (int r = 0; r < (k.ep > 1 ? k.ep : k.tp); ++r) {
      ranks.push_back(Generate(config, Ep(k.tp, k.ep, r)));
      cover.AddRank(*ranks.back());
    }
    CHECK(cover.Check(Multiplicity(k.tp, k.ep, k.kv_heads)) == "");
    CHECK(cover.distinct_fingerprints() == 1);
    CHECK(cover.source_elements() == k.total);
    CHECK(DistinctSourceElements(ranks) == k.total);
  }
  // fp8: weights and scale blocks of DeepSeek-V3 at tp 8 / ep 8.
  const json ds = LoadConfig("deepseek-v3");
  CoverageCheck fp8;
  for (int r = 0; r < 8; ++r) fp8.AddRank(*Generate(ds, Ep(8, 8, r, std::nullopt)));
  CHECK(fp8.Check(Multiplicity(8, 8, 128)) == "");
  CHECK(fp8.distinct_fingerprints() == 1);
}

TEST_CASE("FullSizeDense_NewFamiliesCoveredAtEveryTp") {
  for (const char* model : {"qwen3-8b", "mistral-7b"}) {
    const json config = LoadConfig(model);
    for (int tp : {1, 2, 4, 8}) {
      INFO(model << " tp " << tp);
      CoverageCheck cover;
      for (int r = 0; r < tp; ++r) cover.AddRank(*Generate(config, tp, r, DType::kBF16));
      CHECK(cover.Check(Multiplicity(tp, 1, 8)) == "");
      CHECK(cover.distinct_fingerprints() == 1);
    }
  }
}

TEST_CASE("ExpertParallelBadInputNamesTheField") {
  const json mixtral = LoadConfig("tiny-mixtral");  // 4 experts
  CHECK(GenerateError(mixtral, Ep(1, 3, 0)).message() ==
        "ep 3 does not divide num_local_experts 4");
  CHECK(GenerateError(LoadConfig("deepseek-v3"), Ep(8, 24, 0)).message() ==
        "ep 24 does not divide n_routed_experts 256");
  CHECK(GenerateError(LoadConfig("qwen3-30b-a3b"), Ep(1, 3, 0)).message() ==
        "ep 3 does not divide num_experts 128");
  CHECK(GenerateError(LoadConfig("llama-3.1-8b"), Ep(2, 2, 0)).message() ==
        "ep 2: model_type 'llama' has no MoE layer (expert parallelism needs experts)");
  json dense = LoadConfig("tiny-qwen3-moe");
  dense["mlp_only_layers"] = {0, 1, 2};
  CHECK(Contains(GenerateError(dense, Ep(1, 2, 0)).message(), "ep 2: model_type 'qwen3_moe'"));
  CHECK(Contains(GenerateError(mixtral, Ep(4, 2, 0)).message(), "ep 2 is not a multiple of tp 4"));
  CHECK(GenerateError(mixtral, Ep(2, 4, 4)).message() ==
        "rank 4 out of range for tp 2, ep 4 (0 <= rank < ep)");
  CHECK(Contains(GenerateError(mixtral, Ep(1, 0, 0)).message(), "ep 0 must be >= 1"));
  json few = LoadConfig("tiny-qwen3-moe");
  few["num_experts"] = 2;
  CHECK(GenerateError(few, 4).message() ==
        "tp 4 exceeds num_experts 2 (vLLM refuses more tensor-parallel ranks than experts)");
}

TEST_CASE("NewFamiliesMissingFieldsAreNamed") {
  struct Case {
    const char* model;
    const char* field;
  };
  for (const Case& k :
       {Case{"tiny-qwen3-moe", "moe_intermediate_size"},
        Case{"tiny-qwen3-moe", "intermediate_size"}, Case{"tiny-qwen3-moe", "num_hidden_layers"},
        Case{"tiny-mixtral", "num_local_experts"}, Case{"tiny-mixtral", "intermediate_size"},
        Case{"qwen3-8b", "vocab_size"}, Case{"mistral-7b", "hidden_size"}}) {
    json c = LoadConfig(k.model);
    c.erase(k.field);
    INFO(k.model << " without " << k.field);
    CHECK(GenerateError(c, 1).message() == std::string(k.field) + ": missing (a positive integer)");
  }
  json bad = LoadConfig("tiny-qwen3-moe");
  bad["mlp_only_layers"] = "all";
  CHECK(Contains(GenerateError(bad, 1).message(), "mlp_only_layers: expected an array"));
}

// ---- The CLI ----

#ifdef WTX_BINARY
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliRun RunWtx(const std::string& args) {
  namespace fs = std::filesystem;
  static int n = 0;
  const fs::path dir = fs::temp_directory_path();
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(n++);
  const std::string out = (dir / ("wtx-hf-" + tag + ".out")).string();
  const std::string err = (dir / ("wtx-hf-" + tag + ".err")).string();
  const std::string cmd = std::string(WTX_BINARY) + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

}  // namespace

TEST_CASE("Cli_ManifestJsonMatchesTheApi") {
  CliRun r = RunWtx("manifest --hf-config " + ConfigPath("tiny-deepseek") + " --tp 2 --rank 1");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  auto parsed = ParseManifest(j);
  REQUIRE(parsed.ok());
  auto api = Generate(LoadConfig("tiny-deepseek"), 2, 1, std::nullopt);
  CHECK(j.at("fingerprint") == api->Fingerprint());
  CHECK((*parsed)->Fingerprint() == api->Fingerprint());
}

TEST_CASE("Cli_SummaryJsonReportsRankTotalAndCheckpoint") {
  CliRun r = RunWtx("manifest --hf-config " + ConfigPath("llama-3.1-8b") +
                    " --tp 8 --rank 0 --dtype bf16 --summary --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j.at("checkpoint").at("params") == 8030261248);
  const int64_t per_rank = j.at("per_rank").at("params");
  CHECK(j.at("total").at("params") == 8 * per_rank);
  CHECK(j.at("tp") == 8);
  CliRun text = RunWtx("manifest --hf-config " + ConfigPath("llama-3.1-8b") + " --summary");
  REQUIRE(text.exit_code == 0);
  CHECK(Contains(text.out, "8,030,261,248 params"));
}

TEST_CASE("Cli_ErrorsNameTheFieldAndExit2") {
  CliRun tp = RunWtx("manifest --hf-config " + ConfigPath("llama-3.1-8b") + " --tp 3");
  CHECK(tp.exit_code == 2);
  CHECK(Contains(tp.err, "--tp 3 does not divide num_attention_heads 32"));
  CliRun dtype = RunWtx("manifest --hf-config " + ConfigPath("tiny-llama") + " --dtype int4");
  CHECK(dtype.exit_code == 2);
  CHECK(Contains(dtype.err, "--dtype"));
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("wtx-gpt2-" + std::to_string(::getpid()) + ".json"))
                               .string();
  {
    std::ofstream f(path);
    f << R"({"model_type": "gpt2", "hidden_size": 768})";
  }
  CliRun unknown = RunWtx("manifest --hf-config " + path);
  std::filesystem::remove(path);
  CHECK(unknown.exit_code == 2);
  CHECK(Contains(unknown.err, "model_type: unknown 'gpt2' (llama|mistral|qwen2|qwen3|"));
  CliRun missing = RunWtx("manifest --hf-config /nonexistent/config.json");
  CHECK(missing.exit_code == 2);
}

// Runs `wtx args`, which must fail with exit 2 and `want` in its stderr.
void CheckCliFails(const std::string& args, const std::string& want) {
  CliRun r = RunWtx(args);
  INFO("wtx " << args << ": " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(Contains(r.err, want));
}

TEST_CASE("Cli_ExpertParallelManifestAndSummary") {
  CliRun r = RunWtx("manifest --hf-config " + ConfigPath("tiny-mixtral") +
                    " --tp 2 --ep 2 --rank 1 --expert-placement round_robin");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  auto api =
      Generate(LoadConfig("tiny-mixtral"), Ep(2, 2, 1, std::nullopt, ExpertPlacement::kRoundRobin));
  CHECK(j.at("fingerprint") == api->Fingerprint());
  auto parsed = ParseManifest(j);
  REQUIRE(parsed.ok());
  CHECK(Shard(**parsed, "model.layers.0.block_sparse_moe.experts.w13_weight", "e1.w1").source ==
        "model.layers.0.block_sparse_moe.experts.3.w1.weight");

  CliRun s = RunWtx("manifest --hf-config " + ConfigPath("deepseek-v3") +
                    " --tp 8 --ep 8 --rank 1 --dtype bf16 --summary --json");
  INFO(s.err);
  REQUIRE(s.exit_code == 0);
  const json sj = json::parse(s.out);
  CHECK(sj.at("ranks") == 8);
  CHECK(sj.at("ep") == 8);
  CHECK(sj.at("checkpoint").at("params") == 671026419200);  // gathered over the 8 ranks
  const int64_t per_rank = sj.at("per_rank").at("params");
  CHECK(sj.at("total").at("params") == 8 * per_rank);
  CliRun text = RunWtx("manifest --hf-config " + ConfigPath("tiny-qwen3-moe") +
                       " --tp 2 --ep 4 --rank 3 --summary");
  REQUIRE(text.exit_code == 0);
  CHECK(Contains(text.out, "tp 2, ep 4 (linear), rank 3"));
  CHECK(Contains(text.out, "all 4 ranks"));
}

TEST_CASE("Cli_ExpertParallelErrorsNameTheFlagAndExit2") {
  const std::string tiny = "manifest --hf-config " + ConfigPath("tiny-mixtral");
  CheckCliFails("manifest --hf-config " + ConfigPath("mixtral-8x7b") + " --ep 3",
                "--ep 3 does not divide num_local_experts 8");
  CheckCliFails("manifest --hf-config " + ConfigPath("qwen3-8b") + " --tp 2 --ep 2",
                "--ep 2: model_type 'qwen3' has no MoE layer");
  CheckCliFails(tiny + " --tp 4 --ep 2", "--ep 2 is not a multiple of tp 4");
  CheckCliFails(tiny + " --ep 2 --expert-placement zigzag", "--expert-placement: unknown 'zigzag'");
  CheckCliFails(tiny + " --ep 2 --rank 2", "--rank 2 out of range for tp 1, ep 2");
}

TEST_CASE("Cli_SimRefusesEpInconsistentWithTheScenarioRanks") {
  namespace fs = std::filesystem;
  struct Case {
    int ranks;
    const char* model;
    int tp, ep;
    const char* want;
  };
  const Case cases[] = {
      {3, "tiny-mixtral", 2, 2, "model.ep: ep 2 does not divide ranks 3"},
      {2, "tiny-mixtral", 2, 4, "model.ep: ep 4 does not divide ranks 2"},
      {2, "tiny-mixtral", 2, 3, "model.ep: ep 3 is not a multiple of tp 2"},
      {3, "tiny-mixtral", 1, 3, "model.ep"},  // 3 does not divide num_local_experts 4
      {2, "tiny-llama", 1, 2, "model.ep"},    // no experts
      {4, "tiny-qwen2", 3, 1, "model.tp: tp 3 does not divide ranks 4"},
      {8, "tiny-qwen2", 8, 1, "tp 8 does not divide num_attention_heads 4"},
  };
  for (const Case& k : cases) {
    const std::string path =
        (fs::temp_directory_path() / ("wtx-ep-" + std::to_string(::getpid()) + ".json")).string();
    {
      std::ofstream f(path);
      f << json{{"ranks", k.ranks},
                {"model", {{"hf_config", ConfigPath(k.model)}, {"tp", k.tp}, {"ep", k.ep}}},
                {"steps", json::array()}}
               .dump();
    }
    CheckCliFails("sim " + path, k.want);
    fs::remove(path);
  }
}
#endif  // WTX_BINARY

}  // namespace wtx

namespace wtx {

TEST_CASE("RoundRobinWithDataParallelExpertsFallsBackToLinearOnTheDefaultAll2AllBackend") {
  // Issue 45, 4: ep > tp (dp > 1) makes vLLM's MoE layers use all-to-all kernels; its default
  // backend has no round-robin routing tables, so vLLM places experts linearly.
  const nlohmann::json ds = LoadConfig("deepseek-v3");
  HfManifestOptions o;
  o.tp = 2;
  o.ep = 8;
  o.expert_placement = ExpertPlacement::kRoundRobin;
  std::string why;
  CHECK(EffectiveExpertPlacement(ds, o, &why) == ExpertPlacement::kLinear);
  CHECK(why.find("allgather_reducescatter") != std::string::npos);
  CHECK(why.find("dp 4") != std::string::npos);
  o.all2all_backend = "deepep_low_latency";
  CHECK(EffectiveExpertPlacement(ds, o, &why) == ExpertPlacement::kRoundRobin);
  o.all2all_backend = "allgather_reducescatter";
  o.ep = 2;  // ep == tp: no all-to-all kernels, round_robin kept
  CHECK(EffectiveExpertPlacement(ds, o, &why) == ExpertPlacement::kRoundRobin);
  // The manifest follows: rank 1 of ep 8 over tp 2 holds experts [32, 64) linearly.
  o.ep = 8;
  o.rank = 1;
  auto m = ManifestFromHfConfig(ds, o);
  REQUIRE(m.ok());
  CHECK(Shard(**m, "model.layers.3.mlp.experts.w13_weight", "e0.w1").source ==
        "model.layers.3.mlp.experts.32.gate_proj.weight");
}

}  // namespace wtx
