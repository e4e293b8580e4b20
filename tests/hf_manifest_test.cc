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

ManifestPtr Generate(const json& config, int tp, int rank, std::optional<DType> dtype) {
  HfManifestOptions o;
  o.tp = tp;
  o.rank = rank;
  o.dtype = dtype;
  auto m = ManifestFromHfConfig(config, o);
  INFO(m.status().ToString());
  REQUIRE(m.ok());
  return *m;
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
  CHECK(s.message() == "model_type: unknown 'gpt2' (llama|qwen2|deepseek_v3|kimi_k2)");
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
  json odd_vocab = LoadConfig("tiny-llama");
  odd_vocab["vocab_size"] = 255;
  CHECK(GenerateError(odd_vocab, 2).message() == "tp 2 does not divide vocab_size 255");
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
  CHECK(file.status().code() == ErrorCode::kIOError);
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
  CHECK(Contains(unknown.err, "model_type: unknown 'gpt2' (llama|qwen2|deepseek_v3|kimi_k2)"));
  CliRun missing = RunWtx("manifest --hf-config /nonexistent/config.json");
  CHECK(missing.exit_code == 2);
}
#endif  // WTX_BINARY

}  // namespace wtx
