// The control services of the `wtx coordinator` / `wtx rank` processes through their library
// API (src/net/control_service.h), without the CLI: a real coordinator on a loopback
// TcpTransport, a real participant with a TcpRankAgent, and the services answering requests
// as a control connection would hand them over.
#include <catch2/catch.hpp>

#include "src/conformance/step_codec.h"
#include "src/net/codec.h"
#include "src/net/control_service.h"
#include "src/net/rank_agent_hooks.h"
#include "src/testing/armed_crash_point.h"
#include "src/testing/process_test_hooks.h"
#include "tests/test_util.h"
#include "wtx/coordinator.h"
#include "wtx/tcp_rank_agent.h"
#include "wtx/tcp_transport.h"

namespace wtx {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::Req;
using testing::SmallManifest;
using testing::TempDir;

constexpr char kSecret[] = "control service secret";

// One coordinator on loopback with one rank connected to it.
struct OneRankCluster {
  TempDir dir;
  std::unique_ptr<TcpTransport> transport;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<Participant> participant;
  std::unique_ptr<TcpRankAgent> agent;

  OneRankCluster() {
    TcpTransportOptions to;
    to.listen_host = "127.0.0.1";
    to.port = 0;
    to.secret = kSecret;
    to.num_ranks = 1;
    transport = TcpTransport::Listen(to).value();
    CoordinatorOptions co;
    co.journal_dir = dir.sub("coordinator");
    coordinator = Coordinator::Open(co, transport.get()).value();
    ParticipantOptions po;
    po.rank = 0;
    po.journal_dir = dir.sub("rank-0");
    po.kernel_identity = "k1";
    participant = Participant::Open(std::move(po), SmallManifest()).value();
    RankAgentOptions ao;
    ao.coordinator_port = transport->port();
    ao.rank = 0;
    ao.secret = kSecret;
    agent = TcpRankAgent::Start(ao, participant.get()).value();
  }
  ~OneRankCluster() {
    agent.reset();
    transport->Shutdown();
    coordinator.reset();
  }
};

json Call(Result<json> r) {
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return r.value();
}

std::string ErrorOf(const Result<json>& r) {
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

TEST_CASE("ControlServicesRunAFullTransactionThroughTheirRequests") {
  OneRankCluster c;
  net::CoordinatorControlService coord(c.coordinator.get(), c.transport.get(), 1);
  net::RankControlService rank(c.participant.get(), c.agent.get(), sim::ControlStepHandler());

  CHECK(Call(coord.Handle("wait_ranks", {{"ranks", {0}}, {"timeout_ms", 10000}}))["ok"] == true);
  CHECK(Call(coord.Handle("connected", json::object()))["ranks"] == json::array({0}));
  CHECK(Call(coord.Handle("recover", json::object()))["code"] == "OK");
  CHECK(Call(rank.Handle("wait_resolved", {{"timeout_ms", 10000}}))["resolved"] == true);

  json begun =
      Call(coord.Handle("begin", {{"req", net::BeginRequestToJson(Req("t1", TxKind::kFull))}}));
  REQUIRE(begun["status"]["code"] == "OK");
  Call(rank.Handle("step", {{"step", {{"op", "write"}, {"param", "*"}, {"fill", {{"seed", 1}}}}}}));
  Call(rank.Handle("step", {{"step", {{"op", "refresh"}, {"derived", "*"}}}}));
  json committed = Call(coord.Handle("commit", {{"tx", "t1"}}));
  REQUIRE(committed["decision"] == "commit");
  CHECK(committed["crash_fired"] == false);
  CHECK(committed["votes"][0]["kind"] == "yes");

  json st = Call(rank.Handle("status", json::object()));
  CHECK(st["serving"] == true);
  CHECK(st["version"] == committed["version"]);
  CHECK(Call(coord.Handle("committed_version", {{"tx", "t1"}}))["version"] == committed["version"]);
  json decisions = Call(coord.Handle("decisions", json::object()))["decisions"];
  REQUIRE(decisions.size() == 1);
  CHECK(decisions[0]["tx"] == "t1");
  CHECK(Call(rank.Handle("verify", json::object()))["ok"] == true);
  CHECK(Call(rank.Handle("ping", json::object())) == json::object());

  // The handler form the transport takes answers the same way.
  auto answer = coord.Handler()("committed_version", {{"tx", "t1"}});
  REQUIRE(answer.has_value());
  CHECK(Call(std::move(*answer))["version"] == committed["version"]);
}

TEST_CASE("ControlServicesRefuseUnknownMethodsAndMalformedParameters") {
  OneRankCluster c;
  net::CoordinatorControlService coord(c.coordinator.get(), c.transport.get(), 1);
  net::RankControlService rank(c.participant.get(), /*agent=*/nullptr, sim::ControlStepHandler());

  // Test hooks are unknown methods unless enabled.
  CHECK(ErrorOf(coord.Handle("arm_crash", {{"point", "x"}})) == "unknown method 'arm_crash'");
  CHECK(ErrorOf(coord.Handle("crash", json::object())) == "unknown method 'crash'");
  CHECK(ErrorOf(rank.Handle("set_silent", {{"silent", true}})) == "unknown method 'set_silent'");
  CHECK(ErrorOf(coord.Handle("bogus", json::object())) == "unknown method 'bogus'");
  // Fields: unknown ones by name, wrong types naming the field, never an exception.
  CHECK_THAT(ErrorOf(coord.Handle("commit", {{"tx", "t1"}, {"txx", "t2"}})),
             Catch::Contains("commit.txx: unknown field"));
  CHECK_THAT(ErrorOf(coord.Handle("commit", {{"tx", 7}})), Catch::Contains("commit.tx"));
  CHECK_THAT(ErrorOf(coord.Handle("abort", json::object())), Catch::Contains("abort.tx"));
  CHECK_THAT(ErrorOf(coord.Handle("begin", {{"req", "full"}})), Catch::Contains("begin request"));
  CHECK_THAT(ErrorOf(coord.Handle("wait_ranks", {{"ranks", {1}}, {"timeout_ms", 1}})),
             Catch::Contains("wait_ranks.ranks"));
  CHECK_THAT(ErrorOf(coord.Handle("wait_ranks", {{"ranks", {0}}})),
             Catch::Contains("wait_ranks.timeout_ms"));
  CHECK_THAT(ErrorOf(rank.Handle("verify", {{"deep", true}})),
             Catch::Contains("verify.deep: unknown field"));
  CHECK_THAT(ErrorOf(rank.Handle("step", {{"step", {{"op", "write"}, {"sahrd", "k"}}}})),
             Catch::Contains("step.sahrd: unknown field"));
  CHECK_THAT(ErrorOf(rank.Handle("step", {{"step", {{"op", "write"}, {"box", "all"}}}})),
             Catch::Contains("step.box"));
  CHECK_THAT(ErrorOf(rank.Handle("wait_resolved", {{"timeout_ms", 1}})),
             Catch::Contains("no transport agent"));
  // A rank service given no step handler (a production rank) refuses data-plane steps.
  net::RankControlService bare(c.participant.get(), /*agent=*/nullptr);
  CHECK_THAT(ErrorOf(bare.Handle("step", {{"step", {{"op", "write"}}}})),
             Catch::Contains("applies no data-plane steps"));
  // A rank step outside a transaction is the participant's refusal, passed through.
  CHECK_FALSE(rank.Handle("step", {{"step", {{"op", "write"}, {"fill", {{"seed", 1}}}}}}).ok());
}

TEST_CASE("ControlTestHooksArmCrashPointsSilenceAndCrashThroughTheCallback") {
  OneRankCluster c;
  ArmedCrashPoint coord_point, rank_point;
  RankAgentHooks agent_hooks;
  std::vector<bool> crashes;
  auto crash = [&](bool power_loss) { crashes.push_back(power_loss); };
  ProcessTestHooks ch(&coord_point, /*agent=*/nullptr, /*fs=*/nullptr, crash);
  net::CoordinatorControlService coord(c.coordinator.get(), c.transport.get(), 1, &ch);
  ProcessTestHooks rh(&rank_point, &agent_hooks, /*fs=*/nullptr, crash);
  net::RankControlService rank(c.participant.get(), c.agent.get(), sim::ControlStepHandler(), &rh);

  Call(coord.Handle("arm_crash", {{"point", "before_decision_logged"}}));
  CHECK(coord_point.ShouldCrash("before_decision_logged"));
  CHECK(Call(coord.Handle("disarm", json::object()))["fired"] == true);
  CHECK(Call(rank.Handle("disarm", json::object()))["fired"] == false);
  CHECK_THAT(ErrorOf(rank.Handle("arm_crash", {{"point", 3}})), Catch::Contains("arm_crash.point"));

  Call(rank.Handle("set_silent", {{"silent", true}}));
  CHECK(agent_hooks.silent.load());
  Call(rank.Handle("set_silent", {{"silent", false}}));
  CHECK_FALSE(agent_hooks.silent.load());
  CHECK_THAT(ErrorOf(rank.Handle("set_silent", json::object())),
             Catch::Contains("set_silent.silent"));

  Call(coord.Handle("crash", {{"power_loss", true}}));
  Call(rank.Handle("crash", json::object()));
  CHECK(crashes == std::vector<bool>{true, false});
  // set_silent is a rank's method; hooks without an agent refuse it.
  CHECK(ErrorOf(coord.Handle("set_silent", {{"silent", true}})) == "unknown method 'set_silent'");
  CHECK_THAT(ch.SetSilent(true).message(), Catch::Contains("no agent"));
  CHECK_THAT(ErrorOf(rank.Handle("crash", {{"power_loss", "yes"}})),
             Catch::Contains("crash.power_loss"));
}

}  // namespace
}  // namespace wtx
