// Issue 12: what crosses the wire is bounded and strict. A vote names every missing
// {param, shard} and still fits in one frame for a Kimi-K2-sized rank; every object of the
// control protocol and of the codec refuses fields it does not know, naming them.
#include <catch2/catch.hpp>

#include "src/conformance/step_codec.h"
#include "src/manifest/box_json.h"
#include "src/net/channel.h"
#include "src/net/codec.h"
#include "src/net/control_codec.h"
#include "src/net/rank_service.h"
#include "tests/test_util.h"
#include "wtx/coordinator.h"
#include "wtx/participant.h"

namespace wtx {
namespace {

using nlohmann::json;

// 61 stacked-expert parameters of 2304 one-row shards each (~140k shards, as a Kimi-K2 rank's
// expert weights), named as vLLM names them.
ManifestPtr KimiSizedManifest() {
  std::vector<ParamSpec> params;
  for (int layer = 0; layer < 61; ++layer) {
    ParamSpec p;
    const std::string prefix = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    p.name = prefix + "w13_weight";
    p.dtype = DType::kBF16;
    p.shape = {2304, 2};
    for (int k = 0; k < 2304; ++k) {
      ShardSpec s;
      const char* proj = k % 2 == 0 ? "gate_proj" : "up_proj";
      s.id = std::to_string(k / 2) + "." + proj;
      s.source = prefix + std::to_string(k / 2) + "." + proj + ".weight";
      s.source_shape = {1, 2};
      s.box = {{k, k + 1}, {0, 2}};
      s.source_box = {{0, 1}, {0, 2}};
      p.shards.push_back(std::move(s));
    }
    params.push_back(std::move(p));
  }
  return Manifest::Build(std::move(params), {}, {}).value();
}

TEST_CASE("KimiSizedVoteNamesEveryMissingShardAndFitsInOneFrame", "[net]") {
  testing::TempDir d;
  ManifestPtr m = KimiSizedManifest();
  REQUIRE(m->TotalShards() == 61 * 2304);
  ParticipantOptions o;
  o.journal_dir = d.sub("rank-0");
  auto p = Participant::Open(o, m);
  REQUIRE(p.ok());
  BeginRequest req;
  req.tx = "t1";
  REQUIRE(p.value()->Begin(req).ok());
  auto vote = p.value()->Prepare("t1");  // nothing written: every shard is missing
  REQUIRE(vote.ok());
  CHECK(vote->missing.size() == m->TotalShards());
  CHECK(vote->missing_total == m->TotalShards());
  const std::vector<uint8_t> cbor = json::to_cbor(net::VoteToJson(vote.value()));
  CAPTURE(cbor.size());
  CHECK(cbor.size() < net::kDefaultMaxFrameBytes / 2);
  auto back = net::VoteFromJson(json::from_cbor(cbor));
  REQUIRE(back.ok());
  REQUIRE(back->missing.size() == m->TotalShards());
  CHECK(back->missing.back().param == "model.layers.60.mlp.experts.w13_weight");
  CHECK(back->missing.back().shard == "1151.up_proj");
}

TEST_CASE("CodecRefusesUnknownFieldsNamingThem", "[net]") {
  BeginRequest req;
  req.tx = "t1";
  json j = net::BeginRequestToJson(req);
  j["rolback"] = true;
  auto r = net::BeginRequestFromJson(j);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("begin request.rolback: unknown field"));
  CHECK_THAT(r.status().message(), Catch::Contains("did you mean 'rollback'"));

  Vote v;
  v.missing.push_back({"qkv", "k", {{0, 1}}, "k_proj", {}, 0, 1, 1});
  json jv = net::VoteToJson(v);
  jv["missing"][0]["shards"][0]["bxo"] = 1;
  auto rv = net::VoteFromJson(jv);
  REQUIRE_FALSE(rv.ok());
  CHECK_THAT(rv.status().message(), Catch::Contains("bxo: unknown field"));

  json st = net::RankStatusToJson(RankStatus{});
  st["servng"] = true;
  CHECK_FALSE(net::RankStatusFromJson(st).ok());
}

TEST_CASE("ControlRequestsWithUnknownFieldsAreRefused", "[net]") {
  Status s = net::CheckControlParams("commit", json{{"tx", "t1"}, {"txx", "t2"}});
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("commit.txx: unknown field"));
  CHECK(net::CheckControlParams("commit", json{{"tx", "t1"}}).ok());
  CHECK_FALSE(net::CheckControlParams("status", json{{"verbose", true}}).ok());
  CHECK_FALSE(net::CheckControlParams("wait_ranks", json{{"ranks", {0}}, {"timeout", 5}}).ok());

  auto st = sim::RankStepFromJson(
      json{{"op", "write"}, {"param", "qkv"}, {"sahrd", "k"}, {"fill", "zeros"}});
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.status().message(), Catch::Contains("step.sahrd: unknown field"));

  sim::Step step;
  step.op = "write";
  step.param = "qkv";
  step.shard = "k";
  step.box = Box{{0, 1}, {0, 2}};
  auto round = sim::RankStepFromJson(sim::RankStepToJson(step));
  REQUIRE(round.ok());
  CHECK(round->shard == "k");

  json outcome = net::CommitOutcomeToJson(CommitOutcome{});
  CHECK(net::CommitOutcomeFromJson(outcome).ok());
  outcome["decison"] = "commit";
  CHECK_FALSE(net::CommitOutcomeFromJson(outcome).ok());
}

TEST_CASE("ControlStepAndCommitFieldsOfTheWrongTypeAreRefusedNamingThem", "[net]") {
  for (const char* key : {"op", "param", "shard", "source", "derived", "value"}) {
    json j{{"op", "land"}, {"param", "w"}, {"fill", {{"seed", 1}}}};
    j[key] = 5;
    auto st = sim::RankStepFromJson(j);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.status().message(),
               Catch::Contains(std::string("step.") + key + ": expected a string"));
  }
  auto st = sim::RankStepFromJson(json{{"param", "w"}});
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.status().message(), Catch::Contains("step.op: missing"));
  st = sim::RankStepFromJson(json{{"op", "patch"}, {"source", "w"}, {"indices", 3}});
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.status().message(), Catch::Contains("step.indices: expected an array"));
  auto o = net::CommitOptionsFromJson(json{{"expect_version", 5}});
  REQUIRE_FALSE(o.ok());
  CHECK_THAT(o.status().message(), Catch::Contains("commit.options.expect_version"));
  o = net::CommitOptionsFromJson(json{{"expect_version", ""}});
  CHECK_FALSE(o.ok());
  o = net::CommitOptionsFromJson(json{{"expect_version", "v"}, {"expect_rank_digests", "x"}});
  REQUIRE_FALSE(o.ok());
  CHECK_THAT(o.status().message(), Catch::Contains("commit.options.expect_rank_digests"));
  o = net::CommitOptionsFromJson(json{{"expect_version", "v"}, {"expect_rank_digests", {"a"}}});
  REQUIRE(o.ok());
  CHECK(*o->expect_version == "v");
}

TEST_CASE("RankRequestsWithUnknownFieldsAreRefusedNamingThem", "[net]") {
  testing::TempDir d;
  ParticipantOptions o;
  o.journal_dir = d.sub("rank-0");
  auto p = Participant::Open(o, testing::SmallManifest());
  REQUIRE(p.ok());
  Participant& part = *p.value();
  BeginRequest req;
  req.tx = "t1";
  // A misspelt field never reaches the participant: nothing begins.
  auto r =
      net::ServeRankRequest(part, "begin", {{"req", net::BeginRequestToJson(req)}, {"rqe", 1}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("begin.rqe: unknown field") != std::string::npos);
  CHECK_FALSE(part.status().active_tx.has_value());
  REQUIRE(net::ServeRankRequest(part, "begin", {{"req", net::BeginRequestToJson(req)}}).ok());
  auto prep = net::ServeRankRequest(part, "prepare", {{"tx", "t1"}, {"timeout", 5}});
  REQUIRE_FALSE(prep.ok());
  CHECK(prep.status().message().find("prepare.timeout: unknown field") != std::string::npos);
  auto dec = net::ServeRankRequest(
      part, "decide", {{"tx", "t1"}, {"decision", "abort"}, {"version", ""}, {"verison", ""}});
  REQUIRE_FALSE(dec.ok());
  CHECK(dec.status().message().find("decide.verison: unknown field") != std::string::npos);
  CHECK(part.status().active_tx.has_value());  // still active: the bad decide changed nothing
  CHECK(net::ServeRankRequest(part, "describe", {{"x", 1}}).status().code() ==
        ErrorCode::kInvalidArgument);
}

// Issue 13 item 8: one JSON codec per value (boxes, statuses, vote report kinds).
TEST_CASE("BoxCodecRefusesMalformedBoxesNamingWhereAndNeverWraps") {
  const Box b = {{0, 16}, {-3, 8}};
  CHECK(BoxToJson(b) == json::parse("[[0, 16], [-3, 8]]"));
  auto back = BoxFromJson(BoxToJson(b), "x.box");
  REQUIRE(back.ok());
  CHECK(back.value() == b);
  CHECK(BoxFromJson(json::array(), "x.box").value().empty());
  CHECK(BoxFromJson(json("all"), "steps[2].box").status().message() ==
        "steps[2].box: expected an array of [begin, end] pairs");
  CHECK(BoxFromJson(json::parse("[[0, 1], [2]]"), "m.box").status().message() ==
        "m.box[1]: expected [begin, end] integers");
  CHECK(BoxFromJson(json::parse("[[0, 1.5]]"), "m.box").status().message() ==
        "m.box[0]: expected [begin, end] integers");
  // 2^64-1 would be -1 as an int64: refused, never wrapped.
  auto huge = BoxFromJson(json::parse("[[0, 18446744073709551615]]"), "m.box");
  REQUIRE_FALSE(huge.ok());
  CHECK_THAT(huge.status().message(), Catch::StartsWith("m.box[0]"));
  // Manifests and the codec of frames use the same form.
  const json vote = net::VoteToJson(Vote{});
  CHECK(net::VoteFromJson(vote).ok());
}

TEST_CASE("StatusCodecTakesOkOnlyWhereAStatusMayBeOk") {
  const json ok = net::StatusToJson(Status::OK());
  CHECK(ok == json{{"code", "OK"}, {"message", ""}});
  CHECK(net::StatusOrOkFromJson(ok).ok());
  // An error frame never carries success.
  CHECK(net::StatusFromJson(ok).code() == ErrorCode::kIOError);
  const json dirty = net::StatusToJson(Status(ErrorCode::kDirty, "rank 0 is dirty"));
  for (const Status& s : {net::StatusFromJson(dirty), net::StatusOrOkFromJson(dirty)}) {
    CHECK(s.code() == ErrorCode::kDirty);
    CHECK(s.message() == "rank 0 is dirty");
  }
  Status extra = net::StatusOrOkFromJson({{"code", "OK"}, {"message", ""}, {"mesage", "x"}});
  CHECK(extra.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(extra.message(), Catch::Contains("status.mesage: unknown field"));
  // A code of the wrong type is an error status, not an exception.
  CHECK_FALSE(net::StatusOrOkFromJson({{"code", 0}, {"message", ""}}).ok());
}

TEST_CASE("VoteKindNamesRoundTripAndUnknownKindsAreRefused") {
  for (auto k : {VoteReport::Kind::kYes, VoteReport::Kind::kNo, VoteReport::Kind::kTimeout,
                 VoteReport::Kind::kCrashed}) {
    CHECK(VoteKindFromName(VoteKindName(k)) == k);
  }
  CHECK(VoteKindName(VoteReport::Kind::kTimeout) == "timeout");
  CHECK_FALSE(VoteKindFromName("maybe").has_value());
  CommitOutcome o;
  o.decision = Decision::kAbort;
  VoteReport v;
  v.rank = 0;
  v.kind = VoteReport::Kind::kTimeout;
  v.status = Status(ErrorCode::kTimeout, "no vote");
  o.votes.push_back(v);
  json j = net::CommitOutcomeToJson(o);
  CHECK(j["votes"][0]["kind"] == "timeout");
  auto back = net::CommitOutcomeFromJson(j);
  REQUIRE(back.ok());
  CHECK(back->votes[0].kind == VoteReport::Kind::kTimeout);
  j["votes"][0]["kind"] = "maybe";
  auto refused = net::CommitOutcomeFromJson(j);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("votes[].kind"));
}

}  // namespace
}  // namespace wtx
