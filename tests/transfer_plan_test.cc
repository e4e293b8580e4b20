// Transfer plans (wtx/transfer_plan.h): every element each engine rank needs is planned once,
// from a trainer rank that holds it; refusals name the spec, source, box and rank; the JSON form
// round-trips; a plan refuses another manifest or another rank.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/transfer_plan.h"

namespace wtx {
namespace {

using nlohmann::json;

json LoadConfig(const std::string& model) {
  std::ifstream in(std::string(WTX_CONFORMANCE_DIR) + "/models/" + model + "/config.json");
  REQUIRE(in.good());
  return json::parse(in);
}

std::vector<ManifestPtr> Engine(const json& config, int tp, int ep = 1) {
  HfManifestOptions o;
  o.tp = tp;
  o.ep = ep;
  std::vector<ManifestPtr> out;
  for (int r = 0; r < o.GroupSize(); ++r) {
    o.rank = r;
    auto m = ManifestFromHfConfig(config, o);
    REQUIRE(m.ok());
    out.push_back(*m);
  }
  return out;
}

// The plan's pieces, for each engine rank and source, are disjoint, each held whole by its
// trainer rank, and together exactly the source boxes the rank's shards need; the plan's bytes
// are the engine ranks' live bytes (less vocabulary padding).
void CheckPlanTilesEveryEngineRank(const TransferPlan& plan, const TrainerSharding& trainer,
                                   const std::vector<ManifestPtr>& engine) {
  REQUIRE(plan.engine_ranks == static_cast<int>(engine.size()));
  REQUIRE(plan.trainer_ranks == trainer.ranks());
  std::map<std::pair<int, std::string>, std::vector<Box>> got;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const PlannedPiece& p = plan.pieces[i];
    const PlannedSource& s = plan.sources[p.source];
    const Box box = plan.BoxOf(i);
    REQUIRE(BoxInsideShape(box, s.shape));
    REQUIRE_FALSE(BoxIsEmpty(box));
    bool held = false;
    trainer.ForEachHolder(s.name, s.shape, box, [&](int r, const Box& b) {
      held = held || (r == p.trainer && BoxContains(b, box));
    });
    INFO("piece " << i << " " << s.name << " " << BoxToString(box) << " from " << p.trainer);
    CHECK(held);
    got[{p.engine, s.name}].push_back(box);
  }
  int64_t live_bytes = 0;
  for (size_t n = 0; n < engine.size(); ++n) {
    std::map<std::string, std::vector<Box>> need;
    for (const ParamSpec& p : engine[n]->params()) {
      for (const ShardSpec& s : p.shards) {
        const int64_t bytes = NumElements(s.box) * static_cast<int64_t>(DTypeSize(p.dtype));
        if (s.padding) continue;
        live_bytes += bytes;
        need[s.source].push_back(s.source_box);
      }
    }
    for (const auto& [source, boxes] : need) {
      const std::vector<Box>& pieces = got[{static_cast<int>(n), source}];
      INFO("engine rank " << n << " source " << source);
      int64_t needed = 0, planned = 0;
      for (const Box& b : boxes) needed += NumElements(b);
      for (size_t i = 0; i < pieces.size(); ++i) {
        planned += NumElements(pieces[i]);
        bool inside = false;
        for (const Box& b : boxes) inside = inside || BoxContains(b, pieces[i]);
        CHECK(inside);
        for (size_t j = 0; j < i; ++j) CHECK_FALSE(Overlaps(pieces[i], pieces[j]));
      }
      CHECK(planned == needed);
    }
    size_t planned_sources = 0;
    for (const auto& [key, v] : got) planned_sources += key.first == static_cast<int>(n);
    CHECK(planned_sources == need.size());
  }
  CHECK(plan.TotalBytes() == live_bytes);
}

TransferPlan Plan(const std::string& spec, const json& config,
                  const std::vector<ManifestPtr>& engine, std::unique_ptr<TrainerSharding>* out) {
  auto t = ParseTrainerSpec(spec, &config);
  REQUIRE(t.ok());
  auto plan = PlanTransfer(**t, engine);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CheckPlanTilesEveryEngineRank(*plan, **t, engine);
  *out = std::move(t).value();
  return std::move(plan).value();
}

TEST_CASE("FsdpTrainerIntoTensorParallelEngineCoversEveryNeededElementOnce", "[plan]") {
  std::unique_ptr<TrainerSharding> t;
  for (const char* model : {"tiny-llama", "tiny-qwen3-moe", "tiny-deepseek", "tiny-qwen2"}) {
    INFO(model);
    const json config = LoadConfig(model);
    for (int k : {1, 2, 3, 4, 7}) {
      const TransferPlan plan = Plan("fsdp:" + std::to_string(k), config, Engine(config, 2), &t);
      CHECK(plan.trainer_spec == "fsdp:" + std::to_string(k));
    }
  }
}

TEST_CASE("TensorParallelTrainerIntoWiderEngineSendsEachReplicatedTensorOncePerRank", "[plan]") {
  const json config = LoadConfig("tiny-llama");
  std::unique_ptr<TrainerSharding> t;
  const auto engine = Engine(config, 4);
  const TransferPlan plan = Plan("tp:2", config, engine, &t);
  // A replicated norm goes to every engine rank once, its senders rotating with the rank.
  std::map<int, int> sender_of;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const PlannedPiece& p = plan.pieces[i];
    if (plan.sources[p.source].name != "model.norm.weight") continue;
    CHECK(sender_of.emplace(p.engine, p.trainer).second);
  }
  CHECK(sender_of == std::map<int, int>{{0, 0}, {1, 1}, {2, 0}, {3, 1}});
  // A column-parallel tensor: engine rank r needs half of trainer rank r / 2's rows.
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const PlannedPiece& p = plan.pieces[i];
    if (plan.sources[p.source].name != "model.layers.0.mlp.gate_proj.weight") continue;
    CHECK(p.trainer == p.engine / 2);
  }
}

TEST_CASE("ExpertParallelTrainerIntoExpertParallelEngine", "[plan]") {
  std::unique_ptr<TrainerSharding> t;
  for (const char* model : {"tiny-qwen3-moe", "tiny-mixtral", "tiny-deepseek"}) {
    INFO(model);
    const json config = LoadConfig(model);
    Plan("ep:2", config, Engine(config, 1, 4), &t);
    Plan("tp:2,ep:4", config, Engine(config, 2, 2), &t);
    Plan("fsdp:3", config, Engine(config, 2, 4), &t);
  }
}

TEST_CASE("ElementNoTrainerRankHoldsIsRefusedNamingSourceBoxAndEngineRank", "[plan]") {
  const json config = LoadConfig("tiny-llama");
  const auto engine = Engine(config, 2);
  std::vector<std::map<std::string, std::vector<Box>, std::less<>>> holdings(2);
  for (const ParamSpec& p : engine[0]->params()) {
    for (const ShardSpec& s : p.shards) {
      if (s.padding) continue;
      // Rank 0 holds rows [0, 1) of every source, rank 1 the rest, except of the lm_head.
      Box top = WholeBox(s.source_shape), rest = WholeBox(s.source_shape);
      top[0] = {0, 1};
      rest[0].begin = 1;
      holdings[0][s.source] = {top};
      if (s.source != "lm_head.weight" && rest[0].extent() > 0) holdings[1][s.source] = {rest};
    }
  }
  auto t = ExplicitSharding(holdings);
  REQUIRE(t.ok());
  auto plan = PlanTransfer(**t, engine);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message().find("no trainer rank of 'explicit:2' holds source "
                                     "'lm_head.weight' box [[1, ") != std::string::npos);
  CHECK(plan.status().message().find("(needed by engine rank 0)") != std::string::npos);
}

TEST_CASE("ExplicitBoxesOutsideOverlappingOrUnknownAreRefusedNamingRankSourceAndBox", "[plan]") {
  const json config = LoadConfig("tiny-llama");
  const auto engine = Engine(config, 2);
  const std::string src = "model.norm.weight";
  const Shape shape = *engine[0]->SourceShape(src);
  auto refused = [&](std::vector<std::map<std::string, std::vector<Box>, std::less<>>> h) {
    auto t = ExplicitSharding(std::move(h));
    REQUIRE(t.ok());
    auto plan = PlanTransfer(**t, engine);
    REQUIRE_FALSE(plan.ok());
    return plan.status().message();
  };
  const Box outside{{0, shape[0] + 1}};
  CHECK(refused({{}, {{src, {outside}}}}) ==
        "explicit:2: trainer rank 1 source 'model.norm.weight' box " + BoxToString(outside) +
            ": outside the source (shape " + ShapeToString(shape) + ")");
  CHECK(refused({{{src, {{{0, 4}}, {{2, 6}}}}}})
            .find("trainer rank 0 source "
                  "'model.norm.weight' box [[2, 6]] overlaps "
                  "its box [[0, 4]]") != std::string::npos);
  CHECK(refused({{{"nope.weight", {{{0, 4}}}}}})
            .find("source 'nope.weight' box [[0, 4]]: no "
                  "engine rank holds this source") != std::string::npos);
}

TEST_CASE("MalformedTrainerSpecsAreRefusedNamingTheSpec", "[plan]") {
  const json config = LoadConfig("tiny-llama");
  auto msg = [&](const std::string& spec, bool with_config = true) {
    auto t = ParseTrainerSpec(spec, with_config ? &config : nullptr);
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().code() == ErrorCode::kInvalidArgument);
    return t.status().message();
  };
  CHECK(msg("fsdp:0") == "trainer spec 'fsdp:0': 'fsdp:0' needs a degree in [1, 4096]");
  CHECK(msg("fsdp") == "trainer spec 'fsdp': 'fsdp' is not KIND:DEGREE (fsdp|tp|ep)");
  CHECK(msg("zero:2") == "trainer spec 'zero:2': unknown kind 'zero' (fsdp|tp|ep)");
  CHECK(msg("tp:2,tp:2") == "trainer spec 'tp:2,tp:2': 'tp' given twice");
  CHECK(msg("fsdp:2,tp:2") == "trainer spec 'fsdp:2,tp:2': fsdp does not combine with tp or ep");
  CHECK(msg("tp:2", false).find("config.json") != std::string::npos);
  CHECK(msg("tp:3").find("trainer spec 'tp:3': tp 3 does not divide") == 0);
  CHECK(msg("fsdp:2x").find("needs a degree") != std::string::npos);
  CHECK(msg("").find("empty") != std::string::npos);
}

TEST_CASE("PlanJsonRoundTripsAndMalformedPlansAreRefusedNamingTheField", "[plan]") {
  const json config = LoadConfig("tiny-qwen3-moe");
  const auto engine = Engine(config, 2);
  std::unique_ptr<TrainerSharding> t;
  const TransferPlan plan = Plan("fsdp:2", config, engine, &t);
  const json j = plan.ToJson();
  // The text written without a document in between (wtx plan --json, Python's to_json) parses
  // to exactly the same JSON.
  CHECK(json::parse(plan.ToJsonText()) == j);
  auto back = PlanFromJson(j);
  REQUIRE(back.ok());
  CHECK(back->ToJson() == j);
  CHECK(back->TotalBytes() == plan.TotalBytes());
  auto refused = [&](json bad) {
    auto p = PlanFromJson(bad);
    REQUIRE_FALSE(p.ok());
    return p.status().message();
  };
  json bad = j;
  bad["pieces"][3][0] = 2;
  CHECK(refused(bad) == "pieces[3]: trainer rank out of range");
  bad = j;
  bad["pieces"][1][3] = json::array({json::array({0, 1 << 30})});
  CHECK(refused(bad).find("pieces[1]: box [[0, 1073741824]] of source '") == 0);
  bad = j;
  bad["format"] = "v0";
  CHECK(refused(bad).find("format: 'v0'") == 0);
  bad = j;
  bad["engines"].erase(1);
  CHECK(refused(bad).find("engines: expected an array of engine_ranks (2)") == 0);
  bad = j;
  bad["bytes"] = 1;
  CHECK(refused(bad).find("bytes: 1, but the pieces hold ") == 0);
  bad = j;
  bad["pices"] = 1;
  CHECK(refused(bad).find("pices: unknown field") == 0);
}

TEST_CASE("PlanForAnotherRankOrAnotherManifestIsRefused", "[plan]") {
  const json config = LoadConfig("tiny-llama");
  const auto engine = Engine(config, 2);
  std::unique_ptr<TrainerSharding> t;
  const TransferPlan plan = Plan("fsdp:2", config, engine, &t);
  CHECK(CheckPlanForEngine(plan, 0, *engine[0]).ok());
  CHECK(CheckPlanForEngine(plan, 1, *engine[1]).ok());
  Status wrong_rank = CheckPlanForEngine(plan, 0, *engine[1]);
  CHECK(wrong_rank.message().find("engine rank 0 holds other source boxes than the plan's "
                                  "rank 0") != std::string::npos);
  CHECK(CheckPlanForEngine(plan, 2, *engine[0]).message().find("engine rank 2 is not one") !=
        std::string::npos);
  const auto other = Engine(LoadConfig("tiny-qwen2"), 2);
  CHECK(CheckPlanForEngine(plan, 0, *other[0])
            .message()
            .find("made for a manifest of "
                  "fingerprint") != std::string::npos);
}

TEST_CASE("SubtractBoxLeavesDisjointBoxesHoldingTheRest", "[plan]") {
  const Box a{{0, 10}, {0, 6}};
  for (const Box& b :
       {Box{{2, 5}, {1, 3}}, Box{{0, 10}, {0, 6}}, Box{{8, 20}, {4, 9}}, Box{{11, 12}, {0, 6}}}) {
    std::vector<Box> out;
    SubtractBox(a, b, &out);
    int64_t n = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      n += NumElements(out[i]);
      CHECK(BoxContains(a, out[i]));
      CHECK_FALSE(Overlaps(out[i], b));
      for (size_t j = 0; j < i; ++j) CHECK_FALSE(Overlaps(out[i], out[j]));
    }
    CHECK(n == NumElements(a) - NumElements(Intersect(a, b)));
  }
}

}  // namespace
}  // namespace wtx
