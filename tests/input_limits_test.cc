// Untrusted numbers (issue 12 items 7 and 8): sizes derived from manifests, scenarios and the
// control protocol never overflow, and every numeric field and CLI flag outside its documented
// range (wtx/limits.h, docs/cli.md) is refused with a message naming it, never truncated,
// wrapped or allowed to crash the process.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "src/conformance/scenario.h"
#include "src/util/checked_math.h"
#include "src/util/json_number.h"
#include "tests/test_util.h"
#include "wtx/limits.h"
#include "wtx/manifest.h"

using nlohmann::json;
using namespace wtx;
using wtx::testing::TempDir;

namespace {

using Run = wtx::testing::CommandResult;  // code: 128 + N when killed by signal N
Run Sh(const std::string& cmd) { return wtx::testing::RunCommand(cmd); }

std::string Wtx() { return std::string("'") + WTX_BINARY + "'"; }

std::string WriteFile(const TempDir& d, const std::string& name, const std::string& text) {
  const std::string p = d.sub(name);
  std::ofstream(p) << text;
  return p;
}

// A secret file a daemon accepts (long enough, private).
std::string Secret(const TempDir& d) {
  const std::string p = WriteFile(d, "secret", "0123456789abcdef0123456789abcdef");
  ::chmod(p.c_str(), 0600);
  return p;
}

json OneParam(const json& shape, const std::string& dtype = "bf16") {
  return {{"params", {{{"name", "w"}, {"dtype", dtype}, {"shape", shape}}}}};
}

json Scenario(const json& manifest, int ranks = 1) {
  return {{"ranks", ranks},
          {"model", {{"manifest", manifest}}},
          {"steps",
           {{{"op", "begin"}, {"tx", "t1"}, {"kind", "full"}},
            {{"op", "write"}, {"param", "*"}, {"fill", {{"seed", 1}}}},
            {{"op", "commit"}, {"tx", "t1"}}}}};
}

std::string ManifestError(const json& j) {
  auto r = ParseManifest(j);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Item 7: overflowing shapes.

TEST_CASE("CheckedArithmeticReportsOverflow") {
  int64_t out = 0;
  CHECK_FALSE(CheckedMul<int64_t>(int64_t{1} << 32, int64_t{1} << 32, &out));
  CHECK(CheckedMul<int64_t>(int64_t{1} << 31, int64_t{1} << 31, &out));
  CHECK(out == int64_t{1} << 62);
  CHECK_FALSE(CheckedAdd<int64_t>(INT64_MAX, 1, &out));
  CHECK_FALSE(CheckedProduct({int64_t{1} << 32, int64_t{1} << 32, int64_t{1} << 32}));
  CHECK_FALSE(CheckedProduct({4, -1}));
  CHECK(CheckedProduct({}).value() == 1);
  CHECK_FALSE(CheckedBytes(int64_t{1} << 62, 2));
  CHECK(CheckedBytes(int64_t{1} << 61, 2).value() == int64_t{1} << 62);
}

TEST_CASE("ElementCountsSaturateInsteadOfWrapping") {
  // 2^31 * 2^31 * 2^2 wraps to 0 in int64 arithmetic.
  CHECK(NumElements(Shape{int64_t{1} << 31, int64_t{1} << 31, 4}) == INT64_MAX);
  CHECK(NumElements(Box{{INT64_MIN, INT64_MAX}}) == INT64_MAX);
  CHECK(NumElements(Box{{0, int64_t{1} << 40}, {5, 5}}) == 0);
  CHECK(Range{INT64_MIN, INT64_MAX}.extent() == INT64_MAX);
}

TEST_CASE("ManifestWhoseByteSizeOverflowsIsRefusedNamingTheParameter") {
  // [2^31, 2^31] bf16: 2^63 bytes, which wrapped to 0 and was accepted.
  const std::string e = ManifestError(OneParam({int64_t{1} << 31, int64_t{1} << 31}));
  CHECK_THAT(e, Catch::Contains("params[0].shape"));
  CHECK_THAT(e, Catch::Contains("parameter 'w'"));
  CHECK_THAT(e, Catch::Contains("overflows"));
  // [2^32, 2^32, 2^32]: the element count itself overflows.
  CHECK_THAT(ManifestError(OneParam({int64_t{1} << 32, int64_t{1} << 32, int64_t{1} << 32}, "u8")),
             Catch::Contains("parameter 'w'"));
}

TEST_CASE("ManifestAboveTheTensorBoundIsRefused") {
  // 2^50 bytes fit in int64 but exceed kMaxTensorBytes (2^48).
  const std::string e = ManifestError(OneParam({int64_t{1} << 24, int64_t{1} << 24}, "f32"));
  CHECK_THAT(e, Catch::Contains("parameter 'w'"));
  CHECK_THAT(e, Catch::Contains(std::to_string(kMaxTensorBytes)));
  // Exactly at the bound is a valid manifest (nothing is allocated by parsing).
  CHECK(ParseManifest(OneParam({int64_t{1} << 24, int64_t{1} << 24}, "u8")).ok());
  // Too many dimensions.
  json many = json::array();
  for (size_t i = 0; i <= kMaxTensorDims; ++i) many.push_back(1);
  CHECK_THAT(ManifestError(OneParam(many)), Catch::Contains("dimensions"));
}

TEST_CASE("ManifestWhoseTotalSizeExceedsTheBoundIsRefused") {
  json m = {{"params", json::array()}};
  const int64_t n = kMaxManifestBytes / kMaxTensorBytes + 1;
  for (int64_t i = 0; i < n; ++i) {
    m["params"].push_back(
        {{"name", "w" + std::to_string(i)}, {"dtype", "u8"}, {"shape", {kMaxTensorBytes}}});
  }
  CHECK_THAT(ManifestError(m), Catch::Contains("brings the manifest above"));
}

TEST_CASE("SourceShapeWhoseSizeOverflowsIsRefused") {
  json m = OneParam({4});
  m["params"][0]["shards"] = {{{"id", "0"},
                               {"source", "s"},
                               {"source_shape", {int64_t{1} << 40, int64_t{1} << 40, 4}},
                               {"box", {{0, 4}}},
                               {"source_box", {{0, 1}, {0, 1}, {0, 4}}}}};
  const std::string e = ManifestError(m);
  CHECK_THAT(e, Catch::Contains("params[0].shards[0].source_shape"));
  CHECK_THAT(e, Catch::Contains("source 's'"));
}

TEST_CASE("SimRefusesAnOverflowingShapeWithExitTwo") {
  TempDir d;
  const std::string sc =
      WriteFile(d, "s.json", Scenario(OneParam({int64_t{1} << 31, int64_t{1} << 31})).dump());
  Run r = Sh(Wtx() + " sim " + sc);
  INFO(r.out);
  CHECK(r.code == 2);  // was 139 (SIGSEGV)
  CHECK_THAT(r.out, Catch::Contains("parameter 'w'"));
  CHECK_THAT(r.out, Catch::Contains("model.manifest"));
}

TEST_CASE("RankRefusesAnOverflowingManifest") {
  TempDir d;
  const std::string m = WriteFile(
      d, "m.json", OneParam({int64_t{1} << 32, int64_t{1} << 32, int64_t{1} << 32}).dump());
  Run r = Sh(Wtx() + " rank --connect 127.0.0.1:1 --rank 0 --journal " + d.sub("rank-0") +
             " --secret-file " + Secret(d) + " --manifest " + m);
  INFO(r.out);
  CHECK(r.code != 0);
  CHECK(r.code < 128);  // refused, not killed
  CHECK_THAT(r.out, Catch::Contains("parameter 'w'"));
}

TEST_CASE("PatchWithAbsurdPartCountIsRefused") {
  TempDir d;
  json sc = Scenario(OneParam({8}, "f32"));
  sc["steps"].push_back(
      {{"op", "begin"}, {"tx", "t2"}, {"kind", "delta"}, {"base", "$t1"}, {"sources", {"w"}}});
  sc["steps"].push_back({{"op", "patch"},
                         {"source", "w"},
                         {"indices", {1}},
                         {"fill", {{"seed", 2}}},
                         {"part", {0, 2000000000}}});
  sc["steps"].push_back({{"op", "commit"}, {"tx", "t2"}});
  Run r = Sh(Wtx() + " sim " + WriteFile(d, "s.json", sc.dump()));
  INFO(r.out);
  CHECK(r.code < 128);
  CHECK_THAT(r.out, Catch::Contains("E_BAD_WRITE"));
  CHECK_THAT(r.out, Catch::Contains(std::to_string(kMaxPatchParts)));
}

// ---------------------------------------------------------------------------------------------
// Item 8: numeric fields and flags.

TEST_CASE("JsonIntRefusesTruncationFractionsAndOutOfRange") {
  CHECK(JsonInt(json(5), "f", 0, 10).value() == 5);
  CHECK(JsonInt(json(-3), "f", -5, 10).value() == -3);
  auto big = JsonInt(json((uint64_t{1} << 32) + 1), "hello.rank", 0, 4095);
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(big.status().message(), Catch::Contains("hello.rank"));
  CHECK_THAT(big.status().message(), Catch::Contains("4294967297"));
  CHECK_FALSE(JsonInt(json(1.5), "f", 0, 10).ok());
  CHECK_FALSE(JsonInt(json("3"), "f", 0, 10).ok());
  CHECK_FALSE(JsonInt(json(UINT64_MAX), "f", INT64_MIN, INT64_MAX).ok());
  CHECK_FALSE(JsonInt(json(11), "f", 0, 10).ok());
  CHECK_FALSE(JsonUint(json(-1), "f").ok());
  CHECK(JsonUint(json(UINT64_MAX), "f").value() == UINT64_MAX);
  auto list = JsonIntList(json::parse("[0, 1099511627776]"), "wait_ranks.ranks", 0, 3);
  REQUIRE_FALSE(list.ok());
  CHECK_THAT(list.status().message(), Catch::Contains("wait_ranks.ranks[1]"));
}

TEST_CASE("ScenarioNumericFieldsAreRangeChecked") {
  const json m = OneParam({8}, "f32");
  auto error_of = [](const json& sc) {
    auto r = sim::ParseScenario(sc, "/nonexistent");
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  json sc = Scenario(m);
  sc["ranks"] = (uint64_t{1} << 32) + 1;  // was truncated to 1
  CHECK_THAT(error_of(sc), Catch::Contains("ranks"));
  sc["ranks"] = kMaxRanks + 1;
  CHECK_THAT(error_of(sc), Catch::Contains(std::to_string(kMaxRanks)));
  sc["ranks"] = 1.5;
  CHECK_THAT(error_of(sc), Catch::Contains("ranks"));
  sc = Scenario(m, 2);
  sc["steps"][1]["rank"] = (uint64_t{1} << 32) + 1;  // was rank 1
  CHECK_THAT(error_of(sc), Catch::Contains("steps[1].rank"));
  sc = Scenario(m, 2);
  sc["steps"].push_back({{"op", "crash"}, {"who", "99999999999"}});  // std::stoi threw
  CHECK_THAT(error_of(sc), Catch::Contains("steps[3].who"));
  sc = Scenario(m, 2);
  sc["steps"][2]["silent"] = {int64_t{1} << 40};
  CHECK_THAT(error_of(sc), Catch::Contains("steps[2].silent"));
  sc = Scenario(m, 2);
  sc["model"]["rank_manifests"] = {{"99999999999", m}};  // std::stoi threw
  CHECK_THAT(error_of(sc), Catch::Contains("model.rank_manifests.99999999999"));
  sc = Scenario(m);
  sc["rollback_budget_bytes"] = -1;
  CHECK_THAT(error_of(sc), Catch::Contains("rollback_budget_bytes"));
  sc = Scenario(m);
  sc["steps"][1]["fill"] = {{"seed", -1}};
  CHECK_THAT(error_of(sc), Catch::Contains("steps[1].fill.seed"));
}

TEST_CASE("CoordinatorRefusesAbsurdRankCountUpFront") {
  TempDir d;
  Run r = Sh("timeout 20 " + Wtx() + " coordinator --listen 127.0.0.1:0 --journal " +
             d.sub("coordinator") + " --secret-file " + Secret(d) + " --ranks 2147483647");
  INFO(r.out);
  CHECK(r.code == 2);  // refused by the parser, before any proxy is allocated
  CHECK_THAT(r.out, Catch::Contains("--ranks"));
  CHECK_THAT(r.out, Catch::Contains(std::to_string(kMaxRanks)));
}

TEST_CASE("NumericFlagsOutsideTheirRangeAreRefusedNamingTheFlag") {
  TempDir d;
  const std::string secret = Secret(d);
  const std::string coord = Wtx() + " coordinator --listen 127.0.0.1:0 --journal " +
                            d.sub("coordinator") + " --secret-file " + secret + " --ranks 1 ";
  const std::string rank = Wtx() + " rank --connect 127.0.0.1:1 --rank 0 --journal " +
                           d.sub("rank-0") + " --secret-file " + secret + " --manifest " +
                           WriteFile(d, "m.json", OneParam({8}).dump()) + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {coord + "--max-frame-bytes 0", "--max-frame-bytes"},
      {coord + "--max-frame-bytes 8589934592", "--max-frame-bytes"},
      {coord + "--prepare-timeout-ms -1", "--prepare-timeout-ms"},
      {coord + "--request-timeout-ms 0", "--request-timeout-ms"},
      {coord + "--startup-wait-ms -1", "--startup-wait-ms"},
      {coord + "--ranks 0", "--ranks"},
      {rank + "--backoff-max-ms -5", "--backoff-max-ms"},
      {rank + "--rollback-budget-bytes -1", "--rollback-budget-bytes"},
      {rank + "--landing-hash-threads 257", "--landing-hash-threads"},
      {rank + "--landing-hash-threads -1", "--landing-hash-threads"},
      {rank + "--max-frame-bytes 0", "--max-frame-bytes"},
      {rank + "--request-timeout-ms -1", "--request-timeout-ms"},
      {Wtx() + " rank --connect 127.0.0.1:1 --rank 4096 --journal x --secret-file " + secret +
           " --manifest m",
       "--rank"},
      {Wtx() + " check " + d.path() + " --expect-rank -1", "--expect-rank"},
      {Wtx() + " torture --iterations -1", "--iterations"},
      {Wtx() + " torture --iterations 0", "--iterations"},
      {Wtx() + " torture --transactions -1", "--transactions"},
      {Wtx() + " torture --seed -1", "--seed"},
      {Wtx() + " manifest --hf-config x --tp 0", "--tp"},
      {Wtx() + " manifest --hf-config x --rank -1", "--rank"},
      {Wtx() + " control 127.0.0.1:1 status --secret-file " + secret + " --timeout-ms -1",
       "--timeout-ms"},
      {Wtx() + " bench --coverage-tp 0", "--coverage-tp"},
  };
  for (const auto& [cmd, flag] : cases) {
    Run r = Sh("timeout 20 " + cmd);
    INFO(cmd << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains(flag));
  }
}
