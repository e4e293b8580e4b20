// The CLI end to end: `wtx sim` output and exit codes, and the journal readers on what a
// simulation left behind.
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "wtx/transfer_plan.h"

using nlohmann::json;
using wtx::testing::TempDir;

namespace {

using Run = wtx::testing::CommandResult;
Run Sh(const std::string& cmd, bool merge_stderr = true) {
  return wtx::testing::RunCommand(cmd, merge_stderr);
}

std::string Wtx() { return WTX_BINARY; }

std::string Write(const TempDir& d, const std::string& name, const json& j) {
  std::string p = d.sub(name);
  std::ofstream(p) << j.dump();
  return p;
}

json Scenario(json steps, int ranks = 2) {
  return {{"ranks", ranks},
          {"model",
           {{"manifest_file", std::string(WTX_CONFORMANCE_DIR) + "/models/tiny-manifest.json"}}},
          {"kernel_identity", "k"},
          {"steps", std::move(steps)}};
}

json Load() {
  return json::parse(R"([{"op": "begin", "tx": "t1", "kind": "full"},
    {"op": "write", "param": "*", "fill": {"seed": 1}},
    {"op": "refresh", "derived": "*"}, {"op": "commit", "tx": "t1"}])");
}

json SimJson(const TempDir& d, const json& sc, const std::string& extra = "") {
  Run r = Sh(Wtx() + " sim " + Write(d, "s.json", sc) + " " + extra, false);
  REQUIRE(r.code == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("InvalidScenarioExitsTwoNamingStepAndField") {
  TempDir d;
  json s = Scenario(Load());
  s["steps"][1]["fill"] = {{"sead", 1}};
  Run r = Sh(Wtx() + " sim " + Write(d, "bad.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("steps[1].fill"));
  s = Scenario(Load());
  s["steps"][0]["kind"] = "sparse";
  r = Sh(Wtx() + " sim " + Write(d, "bad2.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("steps[0].kind"));
  s = Scenario(Load());
  s["steps"][3]["crash"] = {{"who", 0}, {"at", "before_decision_logged"}};
  r = Sh(Wtx() + " sim " + Write(d, "bad3.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("steps[3].crash.at"));
  s = Scenario(Load());
  s["steps"][1]["rank"] = 7;
  r = Sh(Wtx() + " sim " + Write(d, "bad4.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("steps[1].rank"));
  r = Sh(Wtx() + " sim " + d.sub("missing.json"));
  CHECK(r.code == 2);
  std::ofstream(d.sub("garbage.json")) << "{";
  CHECK(Sh(Wtx() + " sim " + d.sub("garbage.json")).code == 2);
  // An invalid manifest names the manifest field.
  s = Scenario(Load());
  s["model"] = {{"manifest", {{"params", {{{"name", "x"}, {"dtype", "f64"}, {"shape", {1}}}}}}}};
  r = Sh(Wtx() + " sim " + Write(d, "bad5.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("params[0].dtype"));
}

TEST_CASE("SameBytesGiveTheSameVersionAcrossTransactions") {
  TempDir d;
  // load + delta patch of lm_head == a full write whose lm_head takes the patch's values.
  json steps = Load();
  steps.push_back({{"op", "begin"},
                   {"tx", "t2"},
                   {"kind", "delta"},
                   {"base", "$t1"},
                   {"sources", {"lm_head.weight"}}});
  steps.push_back({{"op", "patch"},
                   {"source", "lm_head.weight"},
                   {"indices", {5, 9}},
                   {"fill", {{"seed", 7}}}});
  steps.push_back({{"op", "commit"}, {"tx", "t2"}});
  steps.push_back({{"op", "begin"}, {"tx", "t3"}, {"kind", "full"}});
  std::ifstream in(std::string(WTX_CONFORMANCE_DIR) + "/models/tiny-manifest.json");
  json man = json::parse(in);
  for (const auto& p : man["params"]) {
    json fill = {{"seed", 1}};
    if (p["name"] == "lm_head.weight") fill["override"] = {{"seed", 7}, {"indices", {5, 9}}};
    steps.push_back({{"op", "write"}, {"param", p["name"]}, {"fill", fill}});
  }
  steps.push_back({{"op", "refresh"}, {"derived", "*"}});
  steps.push_back({{"op", "commit"}, {"tx", "t3"}});
  json out = SimJson(d, Scenario(steps));
  const json& st = out["steps"];
  REQUIRE(st[6]["outcome"] == "committed");
  REQUIRE(st.back()["outcome"] == "committed");
  CHECK(st[6]["version"] == st.back()["version"]);
  CHECK(st[3]["version"] != st[6]["version"]);
  for (const auto& r : out["ranks"]) CHECK(r["version"] == st.back()["version"]);
}

TEST_CASE("VersionDoesNotDependOnWriteOrder") {
  TempDir d;
  std::ifstream in(std::string(WTX_CONFORMANCE_DIR) + "/models/tiny-manifest.json");
  json man = json::parse(in);
  json fwd = json::array({{{"op", "begin"}, {"tx", "t"}, {"kind", "full"}}});
  json rev = fwd;
  std::vector<json> writes;
  for (const auto& p : man["params"]) {
    writes.push_back({{"op", "write"}, {"param", p["name"]}, {"fill", {{"seed", 3}}}});
  }
  for (const auto& w : writes) fwd.push_back(w);
  for (auto it = writes.rbegin(); it != writes.rend(); ++it) rev.push_back(*it);
  // Split one parameter into row boxes in the reversed run.
  rev.erase(rev.begin() + 1);  // lm_head whole ...
  rev.push_back({{"op", "write"},
                 {"param", "lm_head.weight"},
                 {"box", {{20, 32}, {0, 16}}},
                 {"fill", {{"seed", 3}}}});
  rev.push_back({{"op", "write"},
                 {"param", "lm_head.weight"},
                 {"box", {{0, 20}, {0, 7}}},
                 {"fill", {{"seed", 3}}}});
  rev.push_back({{"op", "write"},
                 {"param", "lm_head.weight"},
                 {"box", {{0, 20}, {7, 16}}},
                 {"fill", {{"seed", 3}}}});
  for (json* s : {&fwd, &rev}) {
    s->push_back({{"op", "refresh"}, {"derived", "*"}});
    s->push_back({{"op", "commit"}, {"tx", "t"}});
  }
  json a = SimJson(d, Scenario(fwd));
  json b = SimJson(d, Scenario(rev));
  REQUIRE(a["steps"].back()["outcome"] == "committed");
  REQUIRE(b["steps"].back()["outcome"] == "committed");
  CHECK(a["steps"].back()["version"] == b["steps"].back()["version"]);
}

TEST_CASE("JournalCommandsShowTheHistoryOfASimulation") {
  TempDir d;
  json steps = Load();
  steps.push_back({{"op", "begin"}, {"tx", "t2"}, {"kind", "full"}});
  steps.push_back({{"op", "write"}, {"param", "norm.weight"}, {"fill", {{"seed", 2}}}});
  steps.push_back({{"op", "commit"}, {"tx", "t2"}});
  const std::string jd = d.sub("journals");
  json out = SimJson(d, Scenario(steps), "--journal-dir " + jd);
  Run log = Sh(Wtx() + " log " + jd + "/rank-0");
  REQUIRE(log.code == 0);
  CHECK_THAT(log.out, Catch::Contains("t1") && Catch::Contains("committed") &&
                          Catch::Contains("t2") && Catch::Contains("aborted") &&
                          Catch::Contains("E_COVERAGE_INCOMPLETE"));
  Run lj = Sh(Wtx() + " log " + jd + "/rank-1 --json", false);
  REQUIRE(lj.code == 0);
  json hist = json::parse(lj.out);
  REQUIRE(hist.size() == 2);
  CHECK(hist[0]["version"] == out["steps"][3]["version"]);
  CHECK(hist[0]["kind"] == "full");
  CHECK(hist[1]["outcome"] == "aborted");
  CHECK(hist[0]["coverage"]["bytes"].get<int64_t>() > 0);
  CHECK(hist[0]["timings_us"].contains("prepare"));
  Run clog = Sh(Wtx() + " log " + jd + "/coordinator --json", false);
  REQUIRE(clog.code == 0);
  CHECK(json::parse(clog.out)[1]["decision"] == "abort");
  Run show = Sh(Wtx() + " show " + jd + "/rank-0 t2 --json", false);
  REQUIRE(show.code == 0);
  json s = json::parse(show.out);
  CHECK(s["outcome"] == "aborted");
  CHECK(s["records"].size() >= 3);
  CHECK(Sh(Wtx() + " show " + jd + "/rank-0 nope").code != 0);
  Run status = Sh(Wtx() + " status " + jd + "/rank-0 --json", false);
  REQUIRE(status.code == 0);
  json st = json::parse(status.out);
  CHECK(st["dirty"] == true);
  CHECK(st["version"] == out["steps"][3]["version"]);
  CHECK(st["in_doubt"].is_null());
  CHECK(Sh(Wtx() + " check " + jd + "/rank-0").code == 0);
  CHECK(Sh(Wtx() + " check " + jd + "/coordinator").code == 0);
  Run replay = Sh(Wtx() + " replay " + jd + "/rank-1", false);
  CHECK(replay.code == 0);
  CHECK(json::parse(replay.out)["matches_stored_state"] == true);
  // Reusing a journal directory is refused.
  CHECK(Sh(Wtx() + " sim " + d.sub("s.json") + " --journal-dir " + jd).code == 2);
  CHECK(Sh(Wtx() + " log " + d.sub("nothing-here")).code != 0);
}

// ---------------------------------------------------------------------------------------------
// Issue 12.

TEST_CASE("ScenarioUnknownFieldExitsTwoNamingItsPath") {
  TempDir d;
  json s = Scenario(Load());
  s["steps"][1]["param"] = "layers.0.self_attn.qkv_proj.weight";
  s["steps"][1]["sahrd"] = "k";  // misspelt: must not silently write every shard
  Run r = Sh(Wtx() + " sim " + Write(d, "bad.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("steps[1].sahrd: unknown field"));
  CHECK_THAT(r.out, Catch::Contains("did you mean 'shard'"));
  s = Scenario(Load());
  s["rankz"] = 2;
  r = Sh(Wtx() + " sim " + Write(d, "bad2.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("rankz: unknown field"));
  s = Scenario(Load());
  s["model"]["manifest_fil"] = "x";
  r = Sh(Wtx() + " sim " + Write(d, "bad3.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("model.manifest_fil: unknown field"));
  s = Scenario(Load());
  s["steps"][3]["crash"] = {{"who", "coordinator"}, {"at", "after_decision_logged"}, {"when", 1}};
  r = Sh(Wtx() + " sim " + Write(d, "bad4.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("steps[3].crash.when: unknown field"));
  s = Scenario(Load());
  s["steps"][1]["fill"] = {{"seed", 1}, {"override", {{"seed", 2}, {"indices", {1}}, {"x", 0}}}};
  r = Sh(Wtx() + " sim " + Write(d, "bad5.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("steps[1].fill.override.x: unknown field"));
  s = Scenario(Load());
  s["steps"][2]["rank"] = 0;
  s["steps"][2]["derivd"] = "*";
  r = Sh(Wtx() + " sim " + Write(d, "bad6.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("steps[2].derivd: unknown field"));
  // A manifest inside a scenario is strict too.
  s = Scenario(Load());
  s["model"] = {
      {"manifest",
       {{"params",
         {{{"name", "w"}, {"dtype", "f32"}, {"shape", {4}}, {"shrads", json::array()}}}}}}};
  r = Sh(Wtx() + " sim " + Write(d, "bad7.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("params[0].shrads: unknown field"));
}

TEST_CASE("ShippedScenariosStillParse") {
  // Every scenario the project ships (tests, examples, conformance) is valid under the strict
  // rules: `wtx sim` runs it (exit 0), whatever its steps' outcomes.
  for (const char* dir :
       {WTX_SOURCE_DIR "/tests/scenarios", WTX_SOURCE_DIR "/examples",
        WTX_CONFORMANCE_DIR "/scenarios", WTX_SOURCE_DIR "/tests/net/scenarios"}) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string p = e.path().string();
      if (e.path().extension() != ".json" || p.find(".expect.json") != std::string::npos) continue;
      std::ifstream in(p);
      json j = json::parse(in, nullptr, false);
      if (!j.is_object() || !j.contains("steps")) continue;  // a manifest, not a scenario
      INFO(p);
      CHECK(Sh(Wtx() + " sim " + p + " > /dev/null").code == 0);
    }
  }
}

TEST_CASE("ScenarioWithZeroExtentParameterExitsTwo") {
  TempDir d;
  json s = Scenario(Load());
  s["model"] = {{"manifest",
                 {{"params",
                   {{{"name", "w"}, {"dtype", "f32"}, {"shape", {4}}},
                    {{"name", "empty"}, {"dtype", "f32"}, {"shape", {0, 4}}}}}}}};
  Run r = Sh(Wtx() + " sim " + Write(d, "zero.json", s));
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("'empty'") && Catch::Contains("zero"));
}

TEST_CASE("StatusOfARankMidTransactionIsDirtyAndNotServing") {
  TempDir d;
  // A full commit, then a transaction that wrote bytes (its WRITE records still batched) and
  // one that wrote nothing yet: from BEGIN to the decision the journal says dirty.
  for (bool wrote : {true, false}) {
    json steps = Load();
    steps.push_back({{"op", "begin"},
                     {"tx", "t2"},
                     {"kind", "delta"},
                     {"base", "$t1"},
                     {"sources", {"lm_head.weight"}}});
    if (wrote) {
      steps.push_back({{"op", "patch"},
                       {"source", "lm_head.weight"},
                       {"indices", {1}},
                       {"fill", {{"seed", 2}}}});
    }
    const std::string jd = d.sub(wrote ? "wrote" : "begun");
    SimJson(d, Scenario(steps), "--journal-dir " + jd);
    Run status = Sh(Wtx() + " status " + jd + "/rank-0 --json", false);
    REQUIRE(status.code == 0);
    json st = json::parse(status.out);
    CHECK(st["active_tx"] == "t2");
    CHECK(st["dirty"] == true);
    CHECK(st["serving"] == false);
    // The materialized state says the same, and replay agrees with it.
    Run replay = Sh(Wtx() + " replay " + jd + "/rank-1", false);
    REQUIRE(replay.code == 0);
    json rp = json::parse(replay.out);
    CHECK(rp["matches_stored_state"] == true);
    CHECK(rp["state"]["dirty"] == true);
  }
}

TEST_CASE("JournalNamesEveryMissingShardOfAVote") {
  TempDir d;
  // tp 2, a full transaction that writes only the embedding: every other shard is missing.
  json sc = {
      {"ranks", 2},
      {"model",
       {{"hf_config", std::string(WTX_CONFORMANCE_DIR) + "/models/tiny-deepseek/config.json"},
        {"tp", 2}}},
      {"kernel_identity", "k"},
      {"steps", json::parse(R"([{"op": "begin", "tx": "t1", "kind": "full"},
               {"op": "write", "param": "model.embed_tokens.weight", "fill": {"seed": 1}},
               {"op": "commit", "tx": "t1"}])")}};
  const std::string jd = d.sub("journals");
  json out = SimJson(d, sc, "--journal-dir " + jd);
  const json& step = out["steps"][2];
  REQUIRE(step["error"] == "E_VOTE_NO");
  for (int r = 0; r < 2; ++r) {
    json vote;
    for (const auto& v : step["votes"]) {
      if (v["rank"] == r) vote = v;
    }
    REQUIRE(vote.is_object());
    std::set<std::pair<std::string, std::string>> voted, journaled;
    for (const auto& m : vote["missing"]) {
      voted.insert({m["param"].get<std::string>(), m["shard"].get<std::string>()});
    }
    CHECK(voted.size() > 64);
    CHECK(voted.count({"lm_head.weight", "0"}) == 1);
    Run show = Sh(Wtx() + " show " + jd + "/rank-" + std::to_string(r) + " t1 --json", false);
    REQUIRE(show.code == 0);
    const json shown = json::parse(show.out);
    for (const auto& rec : shown["records"]) {
      if (rec["type"] != "PREPARED") continue;
      for (const auto& g : rec["missing"]) {
        for (const auto& s : g["shards"]) {
          journaled.insert({g["param"].get<std::string>(), s.get<std::string>()});
        }
      }
    }
    CHECK(journaled == voted);
  }
}

TEST_CASE("HostPortFlagsThatAreNotHostPortExitTwoNamingTheFlag") {
  TempDir d;
  std::ofstream(d.sub("secret")) << "0123456789abcdef0123456789abcdef";
  std::filesystem::permissions(
      d.sub("secret"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const std::string common = " --secret-file " + d.sub("secret");
  Run r = Sh(Wtx() + " coordinator --listen 127.0.0.1:99999 --ranks 1 --journal " + d.sub("c") +
             common);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("--listen: bad port"));
  r = Sh(Wtx() + " rank --connect nohostport --rank 0 --journal " + d.sub("r") + common +
         " --manifest " + std::string(WTX_CONFORMANCE_DIR) + "/models/tiny-manifest.json");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("--connect: expected HOST:PORT"));
  r = Sh(Wtx() + " rank --connect 127.0.0.1:1 --control 127.0.0.1:70000 --rank 0 --journal " +
         d.sub("r") + common + " --manifest " + std::string(WTX_CONFORMANCE_DIR) +
         "/models/tiny-manifest.json");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("--control: bad port"));
  CHECK_FALSE(std::filesystem::exists(d.sub("c")));
}

TEST_CASE("CoordinatorStoppedDuringItsStartupWaitDoesNotReportMissingRanks") {
  TempDir d;
  std::ofstream(d.sub("secret")) << "0123456789abcdef0123456789abcdef";
  std::filesystem::permissions(
      d.sub("secret"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  Run r =
      Sh("(" + Wtx() + " coordinator --listen 127.0.0.1:0 --ranks 2 --startup-wait-ms 60000" +
         " --journal " + d.sub("c") + " --secret-file " + d.sub("secret") + " 2>" + d.sub("err") +
         " >/dev/null & p=$!; sleep 0.3; kill -TERM $p; wait $p); cat " + d.sub("err"));
  CHECK(r.code == 0);
  CHECK(r.out.find("not every rank connected") == std::string::npos);
}

// Issue 36, 1.1: the placement vLLM applies, said on stderr and in --summary --json.
TEST_CASE("ManifestSaysWhichExpertPlacementItAppliedAndWhy") {
  const std::string cfg = std::string(WTX_CONFORMANCE_DIR) + "/models/qwen3-30b-a3b/config.json";
  auto r = Sh(Wtx() + " manifest --hf-config " + cfg +
              " --tp 2 --ep 2 --rank 0 --expert-placement round_robin");
  INFO(r.out.substr(0, 2000));
  REQUIRE(r.code == 0);
  CHECK(r.out.find("linear applied") != std::string::npos);
  // Rank 0 holds experts 0..63 (linear), as vLLM gives it.
  CHECK(r.out.find("\"model.layers.0.mlp.experts.63.gate_proj.weight\"") != std::string::npos);
  CHECK(r.out.find("\"model.layers.0.mlp.experts.64.gate_proj.weight\"") == std::string::npos);
  auto j = Sh(Wtx() + " manifest --hf-config " + cfg +
                  " --tp 2 --ep 2 --rank 0 --expert-placement round_robin --summary --json",
              /*merge_stderr=*/false);
  REQUIRE(j.code == 0);
  const auto summary = json::parse(j.out);
  CHECK(summary["expert_placement"]["applied"] == "linear");
  CHECK(summary["expert_placement"]["requested"] == "round_robin");
}

TEST_CASE("PlanOfKimiK2ForAnFsdpTrainerSendsEachLiveByteOnce") {
  const std::string cfg = std::string(WTX_CONFORMANCE_DIR) + "/models/kimi-k2/config.json";
  auto r = Sh(Wtx() + " plan --hf-config " + cfg + " --tp 8 --ep 64 --trainer fsdp:64");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("pieces         9,646,016 over 139,583 source tensors") != std::string::npos);
  CHECK(r.out.find("engine live bytes fed by sources 1,199,191,734,272: equal") !=
        std::string::npos);
}

TEST_CASE("PlanJsonReadsBackAndBadTrainerSpecsExitTwoNamingTheFlag") {
  const std::string cfg = std::string(WTX_CONFORMANCE_DIR) + "/models/tiny-llama/config.json";
  TempDir d;
  auto r = Sh(Wtx() + " plan --hf-config " + cfg + " --tp 4 --trainer tp:2 --json --out " +
                  d.sub("plan.json"),
              false);
  REQUIRE(r.code == 0);
  const json printed = json::parse(r.out);
  std::ifstream in(d.sub("plan.json"));
  CHECK(json::parse(in) == printed);
  auto plan = wtx::PlanFromJson(printed);
  REQUIRE(plan.ok());
  CHECK(plan->trainer_ranks == 2);
  CHECK(plan->engine_ranks == 4);
  for (const char* bad : {"tp:3", "fsdp:0", "zero:2", "fsdp:2,ep:2"}) {
    auto b = Sh(Wtx() + " plan --hf-config " + cfg + " --tp 2 --trainer " + bad);
    INFO(bad << ": " << b.out);
    CHECK(b.code == 2);
    CHECK(b.out.find("wtx plan: --trainer: trainer spec '" + std::string(bad) + "'") !=
          std::string::npos);
  }
}
