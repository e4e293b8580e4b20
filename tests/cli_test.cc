// The CLI end to end: `wtx sim` output and exit codes, and the journal readers on what a
// simulation left behind.
#include <catch2/catch.hpp>
#include <array>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

using nlohmann::json;
using wtx::testing::TempDir;

namespace {

struct Run {
  int code;
  std::string out;
};

// Runs a shell command, capturing stdout (and stderr when merge_stderr).
Run Sh(const std::string& cmd, bool merge_stderr = true) {
  std::string full = cmd + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* f = popen(full.c_str(), "r");
  REQUIRE(f);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  int status = pclose(f);
  return {WEXITSTATUS(status), out};
}

std::string Wtx() { return WTX_BINARY; }

std::string Write(const TempDir& d, const std::string& name, const json& j) {
  std::string p = d.sub(name);
  std::ofstream(p) << j.dump();
  return p;
}

json Scenario(json steps, int ranks = 2) {
  return {{"ranks", ranks},
          {"model", {{"manifest_file", std::string(WTX_CONFORMANCE_DIR) + "/models/tiny-manifest.json"}}},
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
  steps.push_back({{"op", "begin"}, {"tx", "t2"}, {"kind", "delta"}, {"base", "$t1"},
                   {"sources", {"lm_head.weight"}}});
  steps.push_back({{"op", "patch"}, {"source", "lm_head.weight"}, {"indices", {5, 9}},
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
  rev.push_back({{"op", "write"}, {"param", "lm_head.weight"}, {"box", {{20, 32}, {0, 16}}}, {"fill", {{"seed", 3}}}});
  rev.push_back({{"op", "write"}, {"param", "lm_head.weight"}, {"box", {{0, 20}, {0, 7}}}, {"fill", {{"seed", 3}}}});
  rev.push_back({{"op", "write"}, {"param", "lm_head.weight"}, {"box", {{0, 20}, {7, 16}}}, {"fill", {{"seed", 3}}}});
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
