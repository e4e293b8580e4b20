// Manifest parsing, validation and fingerprint rules.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "wtx/manifest.h"

using nlohmann::json;
using namespace wtx;

namespace {

json TinyQkv() {
  return json::parse(R"({
    "params": [
      { "name": "qkv", "dtype": "bf16", "shape": [48, 16],
        "shards": [
          { "id": "q", "source": "q_proj", "source_shape": [32, 16],
            "box": [[0, 32], [0, 16]], "source_box": [[0, 32], [0, 16]] },
          { "id": "k", "source": "k_proj", "source_shape": [8, 16],
            "box": [[32, 40], [0, 16]], "source_box": [[0, 8], [0, 16]] },
          { "id": "v", "source": "v_proj", "source_shape": [8, 16],
            "box": [[40, 48], [0, 16]], "source_box": [[0, 8], [0, 16]] } ] },
      { "name": "norm", "dtype": "f32", "shape": [16] }
    ],
    "modules": [ { "name": "layer0", "params": ["qkv", "norm"] } ],
    "derived": [ { "name": "W_UK_T", "sources": ["qkv"], "phase": "attention" } ]
  })");
}

std::string ErrorOf(const json& j) {
  auto r = ParseManifest(j);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

}  // namespace

TEST_CASE("ValidManifestParsesWithDefaultShard") {
  auto m = ParseManifest(TinyQkv());
  REQUIRE(m.ok());
  const Manifest& man = *m.value();
  REQUIRE(man.params().size() == 2);
  const ParamSpec& norm = man.params()[1];
  REQUIRE(norm.shards.size() == 1);
  CHECK(norm.shards[0].id == "0");
  CHECK(norm.shards[0].source == "norm");
  CHECK(man.HoldsSource("k_proj"));
  CHECK_FALSE(man.HoldsSource("nope"));
  CHECK(man.Fingerprint().size() == 32);
}

TEST_CASE("ShardBoxOutsideShapeIsRejectedNamingTheField") {
  json j = TinyQkv();
  j["params"][0]["shards"][2]["box"] = json::parse("[[40, 49], [0, 16]]");
  j["params"][0]["shards"][2]["source_box"] = json::parse("[[0, 9], [0, 16]]");
  CHECK_THAT(ErrorOf(j), Catch::Contains("params[0].shards[2].box"));
}

TEST_CASE("OverlappingShardsAreRejected") {
  json j = TinyQkv();
  j["params"][0]["shards"][1]["box"] = json::parse("[[30, 38], [0, 16]]");
  CHECK_THAT(ErrorOf(j), Catch::Contains("overlap"));
}

TEST_CASE("ShardsThatDoNotCoverTheParameterAreRejected") {
  json j = TinyQkv();
  j["params"][0]["shape"] = json::parse("[56, 16]");
  CHECK_THAT(ErrorOf(j), Catch::Contains("cover 768 of 896"));
}

TEST_CASE("BoxAndSourceBoxExtentsMustMatch") {
  json j = TinyQkv();
  j["params"][0]["shards"][1]["source_box"] = json::parse("[[0, 7], [0, 16]]");
  CHECK_THAT(ErrorOf(j), Catch::Contains("params[0].shards[1].box"));
}

TEST_CASE("ExtraLeadingDimensionsMustHaveExtentOne") {
  json j = json::parse(R"({"params": [{"name": "w13", "dtype": "bf16", "shape": [2, 4, 4],
    "shards": [
      {"id": "e0", "source": "e0.w", "source_shape": [4, 4], "box": [[0, 2], [0, 4], [0, 4]],
       "source_box": [[0, 4], [0, 4]]}]}]})");
  CHECK_THAT(ErrorOf(j), Catch::Contains("extent 1"));
  j["params"][0]["shards"][0]["box"] = json::parse("[[0, 1], [0, 4], [0, 4]]");
  j["params"][0]["shards"].push_back(json::parse(R"({"id": "e1", "source": "e1.w",
      "source_shape": [4, 4], "box": [[1, 2], [0, 4], [0, 4]], "source_box": [[0, 4], [0, 4]]})"));
  CHECK(ParseManifest(j).ok());
}

TEST_CASE("SourceWithTwoShapesIsRejected") {
  json j = TinyQkv();
  j["params"][0]["shards"][2]["source"] = "k_proj";
  j["params"][0]["shards"][2]["source_shape"] = json::parse("[9, 16]");
  CHECK_THAT(ErrorOf(j), Catch::Contains("source_shape"));
}

TEST_CASE("UnknownNamesInModulesAndDerivedAreRejected") {
  json j = TinyQkv();
  j["modules"][0]["params"].push_back("ghost");
  CHECK_THAT(ErrorOf(j), Catch::Contains("modules[0].params"));
  j = TinyQkv();
  j["derived"][0]["sources"] = json::array({"ghost"});
  CHECK_THAT(ErrorOf(j), Catch::Contains("derived[0].sources"));
  j = TinyQkv();
  j["derived"][0]["phase"] = "later";
  CHECK_THAT(ErrorOf(j), Catch::Contains("derived[0].phase"));
}

TEST_CASE("DuplicateParameterAndShardIdsAreRejected") {
  json j = TinyQkv();
  j["params"].push_back(j["params"][1]);
  CHECK_THAT(ErrorOf(j), Catch::Contains("duplicate parameter"));
  j = TinyQkv();
  j["params"][0]["shards"][1]["id"] = "q";
  CHECK_THAT(ErrorOf(j), Catch::Contains("duplicate shard id"));
}

TEST_CASE("FingerprintIgnoresOrderAndSourceBoxesButNotShapes") {
  json a = TinyQkv();
  json b = TinyQkv();
  std::swap(b["params"][0], b["params"][1]);
  // Another rank's TP slice of the same sources.
  b["params"][1]["shards"][1]["source"] = "k_proj";
  auto ma = ParseManifest(a);
  auto mb = ParseManifest(b);
  REQUIRE(ma.ok());
  REQUIRE(mb.ok());
  CHECK(ma.value()->Fingerprint() == mb.value()->Fingerprint());
  json c = TinyQkv();
  c["params"][1]["shape"] = json::array({32});
  auto mc = ParseManifest(c);
  REQUIRE(mc.ok());
  CHECK(mc.value()->Fingerprint() != ma.value()->Fingerprint());
  json d = TinyQkv();
  d["params"][1]["dtype"] = "bf16";
  CHECK(ParseManifest(d).value()->Fingerprint() != ma.value()->Fingerprint());
}

TEST_CASE("SharedTinyManifestIsValid") {
  std::ifstream in(std::string(WTX_CONFORMANCE_DIR) + "/models/tiny-manifest.json");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  auto m = ParseManifestText(ss.str());
  REQUIRE(m.ok());
  CHECK(m.value()->derived().size() == 3);
  CHECK(m.value()->params().size() == 12);
}

TEST_CASE("MalformedJsonIsRejected") {
  CHECK_FALSE(ParseManifestText("{not json").ok());
  CHECK_THAT(ErrorOf(json::parse(R"({"params": [{"name": "x", "dtype": "f64", "shape": [1]}]})")),
             Catch::Contains("params[0].dtype"));
}

// Issue 12: zero-extent parameters are refused (one rule everywhere: docs/manifest.md).
TEST_CASE("ZeroExtentParameterIsRefusedNamingIt") {
  json j = TinyQkv();
  j["params"][1]["shape"] = json::parse("[0, 4]");
  std::string e = ErrorOf(j);
  CHECK_THAT(e, Catch::Contains("params[1].shape"));
  CHECK_THAT(e, Catch::Contains("'norm'"));
  CHECK_THAT(e, Catch::Contains("zero"));
  j["params"][1]["shape"] = json::parse("[4, 0]");
  CHECK_THAT(ErrorOf(j), Catch::Contains("params[1].shape"));
  // Through the C++ builder too (HF layouts build manifests this way).
  ParamSpec p;
  p.name = "empty";
  p.dtype = DType::kF32;
  p.shape = {3, 0};
  auto r = Manifest::Build({p}, {}, {});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("'empty'"));
  // A scalar (shape []) has one element and stays valid.
  j["params"][1]["shape"] = json::array();
  CHECK(ParseManifest(j).ok());
}

TEST_CASE("EmptyShardBoxIsRefused") {
  json j = TinyQkv();
  // q shrinks to nothing, k grows over its rows: volumes still add up, but q is empty.
  j["params"][0]["shards"][0]["box"] = json::parse("[[0, 0], [0, 16]]");
  j["params"][0]["shards"][0]["source_box"] = json::parse("[[0, 0], [0, 16]]");
  CHECK_THAT(ErrorOf(j), Catch::Contains("params[0].shards[0]"));
}

// Issue 12: unknown fields are refused with their path.
TEST_CASE("UnknownManifestFieldIsRefusedNamingItsPath") {
  json j = TinyQkv();
  j["params"][0]["shards"][1]["sorce"] = "k_proj";
  std::string e = ErrorOf(j);
  CHECK_THAT(e, Catch::Contains("params[0].shards[1].sorce: unknown field"));
  CHECK_THAT(e, Catch::Contains("did you mean 'source'"));
  j = TinyQkv();
  j["params"][1]["dytpe"] = "f32";
  CHECK_THAT(ErrorOf(j), Catch::Contains("params[1].dytpe: unknown field"));
  j = TinyQkv();
  j["modules"][0]["parms"] = json::array();
  CHECK_THAT(ErrorOf(j), Catch::Contains("modules[0].parms: unknown field"));
  j = TinyQkv();
  j["derived"][0]["phaze"] = "attention";
  CHECK_THAT(ErrorOf(j), Catch::Contains("derived[0].phaze: unknown field"));
  j = TinyQkv();
  j["deriveds"] = json::array();
  CHECK_THAT(ErrorOf(j), Catch::Contains("manifest.deriveds: unknown field"));
}

TEST_CASE("ManifestFingerprintFieldIsCheckedWhenPresent") {
  json j = TinyQkv();
  auto m = ParseManifest(j);
  REQUIRE(m.ok());
  j["fingerprint"] = m.value()->Fingerprint();  // as `wtx manifest` prints it
  CHECK(ParseManifest(j).ok());
  j["fingerprint"] = std::string(32, '0');
  CHECK_THAT(ErrorOf(j), Catch::Contains("manifest.fingerprint"));
}
