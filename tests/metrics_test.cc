// The metrics of docs/observability.md recorded in process (wtx/metrics.h): what the registry holds
// after commits and aborts, the labels a participant may add, the scrape endpoint's address
// checks, and the event log the Python module mirrors. The registry is process-wide, so the
// counters are compared before and after each step. (The real scrape by a Prometheus server
// is tests/prometheus/test_scrape.py.)
#include <prometheus/registry.h>

#include <catch2/catch.hpp>

#include "src/metrics/metrics_hub.h"
#include "src/testing/armed_crash_point.h"
#include "tests/test_util.h"
#include "wtx/metrics.h"

namespace wtx {
namespace {

using namespace wtx::testing;
using Labels = std::map<std::string, std::string>;

// The value of the one series of family `name` whose labels include `want` (NaN when none;
// a failure when several).
double Value(const std::string& name, const Labels& want) {
  double found = std::nan("");
  int hits = 0;
  for (const auto& family : MetricsRegistry()->Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      bool match = true;
      for (const auto& [k, v] : want) {
        bool has = false;
        for (const auto& l : m.label) has = has || (l.name == k && l.value == v);
        match = match && has;
      }
      if (!match) continue;
      ++hits;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          found = m.counter.value;
          break;
        case prometheus::MetricType::Gauge:
          found = m.gauge.value;
          break;
        case prometheus::MetricType::Histogram:
          found = static_cast<double>(m.histogram.sample_count);
          break;
        default:
          break;
      }
    }
  }
  REQUIRE(hits <= 1);
  return found;
}

double Count(const std::string& name, const Labels& want) {
  const double v = Value(name, want);
  return std::isnan(v) ? 0 : v;
}

Labels Rank(int r, Labels more = {}) {
  more["role"] = "rank";
  more["rank"] = std::to_string(r);
  return more;
}

Status WriteShard(Participant& p, const std::string& param, const std::string& shard) {
  const Manifest& m = p.manifest();
  const uint32_t index = *m.FindParam(param);
  const ParamSpec& spec = m.params()[index];
  const Box box =
      shard.empty() ? WholeBox(spec.shape) : spec.shards[*m.FindShard(index, shard)].box;
  std::vector<uint8_t> bytes = Pattern(m, param, box, 7);
  WritePiece w{param, shard, std::nullopt, bytes.data(), bytes.size()};
  return p.Write({&w, 1});
}

TEST_CASE("MetricsFollowCommitsAndAborts") {
  const double committed0 = Count("wtx_transactions_total", Rank(0, {{"outcome", "committed"}}));
  const double aborted1 = Count("wtx_transactions_total", Rank(1, {{"outcome", "aborted"}}));
  const double cause1 = Count("wtx_aborts_total", Rank(1, {{"code", "E_COVERAGE_INCOMPLETE"}}));
  const double decided =
      Count("wtx_decisions_total", {{"role", "coordinator"}, {"outcome", "committed"}});
  const double bytes0 = Count("wtx_bytes_written_total", Rank(0));
  const double prepares0 = Count("wtx_phase_duration_seconds", Rank(0, {{"phase", "prepare"}}));
  Cluster c(2, SmallManifest());
  // Opened, never loaded: held, and why.
  CHECK(Value("wtx_serving", Rank(0)) == 0);
  CHECK(Value("wtx_held_info", Rank(0, {{"reason", "not_loaded"}})) == 1);

  CommitOutcome o = c.FullCommit("t1", 1);
  REQUIRE(o.status.ok());
  CHECK(Count("wtx_transactions_total", Rank(0, {{"outcome", "committed"}, {"kind", "full"}})) ==
        committed0 + 1);
  CHECK(Count("wtx_decisions_total", {{"role", "coordinator"}, {"outcome", "committed"}}) ==
        decided + 1);
  CHECK(Count("wtx_bytes_written_total", Rank(0)) ==
        bytes0 + static_cast<double>(c.manifest().TotalBytes()));
  CHECK(Count("wtx_phase_duration_seconds", Rank(0, {{"phase", "prepare"}})) == prepares0 + 1);
  for (int r = 0; r < 2; ++r) {
    CHECK(Value("wtx_serving", Rank(r)) == 1);
    CHECK(Value("wtx_dirty", Rank(r)) == 0);
    CHECK(Value("wtx_version_info", Rank(r, {{"version", o.version}, {"label", "t1"}})) == 1);
    CHECK(std::isnan(Value("wtx_held_info", Rank(r))));
    CHECK(Value("wtx_coverage_ratio", Rank(r)) == 0);
  }

  // A half-failed update: rank 1 writes only q of qkv. While it is open, rank 1's coverage
  // is part of one parameter and its start time is set.
  REQUIRE(c.coordinator().Begin(Req("t2", TxKind::kFull)).status.ok());
  REQUIRE(WriteShard(c.rank(0), "qkv", "").ok());
  REQUIRE(WriteShard(c.rank(1), "qkv", "q").ok());
  const double coverage = Value("wtx_coverage_ratio", Rank(1));
  CHECK(coverage > 0);
  CHECK(coverage < Value("wtx_coverage_ratio", Rank(0)));
  CHECK(Value("wtx_transaction_start_timestamp_seconds", Rank(1)) > 0);
  CHECK(Value("wtx_held_info", Rank(1, {{"reason", "updating"}})) == 1);
  CommitOutcome a = c.coordinator().Commit("t2");
  REQUIRE(a.decision == Decision::kAbort);
  CHECK(Count("wtx_transactions_total", Rank(1, {{"outcome", "aborted"}})) == aborted1 + 1);
  CHECK(Count("wtx_aborts_total", Rank(1, {{"code", "E_COVERAGE_INCOMPLETE"}})) == cause1 + 1);
  for (int r = 0; r < 2; ++r) {
    CHECK(Value("wtx_dirty", Rank(r)) == 1);
    CHECK(Value("wtx_serving", Rank(r)) == 0);
    CHECK(Value("wtx_held_info", Rank(r, {{"reason", "dirty"}})) == 1);
    CHECK(std::isnan(Value("wtx_held_info", Rank(r, {{"reason", "updating"}}))));
    CHECK(Value("wtx_transaction_start_timestamp_seconds", Rank(r)) == 0);
    // The committed version is still t1's.
    CHECK(Value("wtx_version_info", Rank(r, {{"version", o.version}})) == 1);
  }
}

TEST_CASE("AnInDoubtTransactionKeepsItsStartTimeAcrossARestart") {
  // The coordinator dies after the votes, before its decision: both ranks are in doubt. Rank 1
  // restarts (its process died too) and is in doubt again: the open-update gauge must still say
  // when the transaction began (from its BEGIN record), not 0 ("no transaction") nor the
  // restart's time.
  Cluster c(2, SmallManifest());
  ArmedCrashPoint cp;
  cp.Arm("before_decision_logged");
  REQUIRE(c.RestartCoordinator(&cp).ok());
  CommitOutcome o = c.FullCommit("t1", 1);
  REQUIRE(o.status.code() == ErrorCode::kCrashed);
  const double began = Value("wtx_transaction_start_timestamp_seconds", Rank(1));
  REQUIRE(began > 0);
  c.KillCoordinator(false);
  c.Kill(1, false);
  REQUIRE(c.Restart(1).ok());  // the coordinator is down: rank 1 stays in doubt
  REQUIRE(c.rank(1).status().in_doubt == "t1");
  CHECK(Value("wtx_transaction_start_timestamp_seconds", Rank(1)) == began);
  REQUIRE(c.RestartCoordinator().ok());  // presumed abort: nothing open any more
  CHECK_FALSE(c.rank(1).status().in_doubt);
  CHECK(Value("wtx_transaction_start_timestamp_seconds", Rank(1)) == 0);
}

TEST_CASE("RankGaugesGoWithTheirParticipant") {
  {
    Cluster c(1, SmallManifest());
    REQUIRE(c.FullCommit("t1", 1).status.ok());
    CHECK(Value("wtx_serving", Rank(0)) == 1);
  }
  CHECK(std::isnan(Value("wtx_serving", Rank(0))));
  CHECK(std::isnan(Value("wtx_version_info", Rank(0))));
}

TEST_CASE("UnknownMetricLabelIsRefused") {
  TempDir dir;
  ParticipantOptions po;
  po.journal_dir = dir.path() + "/r0";
  po.metric_labels = {{"pod", "a"}};
  auto p = Participant::Open(po, SmallManifest());
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == ErrorCode::kInvalidArgument);
  CHECK(p.status().message().find("'pod'") != std::string::npos);
  CHECK_FALSE(CheckMetricLabels({{"replica", ""}}).ok());
  CHECK(CheckMetricLabels({{"replica", "r1"}, {"fleet", "policy"}}).ok());
}

TEST_CASE("ParticipantLabelsReachEverySeries") {
  TempDir dir;
  ParticipantOptions po;
  po.rank = 5;
  po.journal_dir = dir.path() + "/r5";
  po.metric_labels = {{"replica", "r7"}, {"fleet", "policy-a"}};
  auto p = Participant::Open(po, SmallManifest());
  REQUIRE(p.ok());
  CHECK(Value("wtx_serving", {{"rank", "5"}, {"replica", "r7"}, {"fleet", "policy-a"}}) == 0);
}

TEST_CASE("MetricsServerRefusesMalformedAddresses") {
  for (const std::string bad : {"nohost", ":9100", "127.0.0.1:", "127.0.0.1:99999", "h:1x"}) {
    auto s = MetricsServer::Start(bad);
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == ErrorCode::kInvalidArgument);
    CHECK(s.status().message().find("'" + bad + "'") != std::string::npos);
  }
  auto s = MetricsServer::Start("127.0.0.1:0");
  REQUIRE(s.ok());
  CHECK(s.value()->port() > 0);
  CHECK(s.value()->url() == "http://127.0.0.1:" + std::to_string(s.value()->port()) + "/metrics");
  // The same port again cannot be bound: an I/O error naming the address.
  const std::string taken = "127.0.0.1:" + std::to_string(s.value()->port());
  auto again = MetricsServer::Start(taken);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().code() == ErrorCode::kIOError);
  CHECK(again.status().message().find(taken) != std::string::npos);
}

TEST_CASE("EventLogMirrorsEveryChangeUntilFull") {
  auto& hub = metrics::MetricsHub::Get();
  hub.EnableEvents(3);
  uint64_t dropped = 0;
  hub.DrainEvents(&dropped);
  const metrics::Labels l = {{"role", "rank"}, {"rank", "9"}};
  hub.Add(metrics::Series::kBytesWritten, l, 5);
  hub.Set(metrics::Series::kServing, l, 1);
  hub.Observe(metrics::Series::kPhaseDuration, {{"role", "rank"}, {"phase", "begin"}}, 0.5);
  hub.Remove(metrics::Series::kServing, l);  // the fourth: dropped, counted
  auto events = hub.DrainEvents(&dropped);
  REQUIRE(events.size() == 3);
  CHECK(dropped == 1);
  CHECK(events[0].kind == metrics::MetricEvent::Kind::kAdd);
  CHECK(metrics::MetricFamilies()[events[0].family].name == "wtx_bytes_written_total");
  CHECK(events[0].value == 5);
  CHECK(events[2].kind == metrics::MetricEvent::Kind::kObserve);
  CHECK(events[2].labels.at("phase") == "begin");
  hub.EnableEvents(0);
  hub.Add(metrics::Series::kBytesWritten, l, 1);
  CHECK(hub.DrainEvents(&dropped).empty());
}

}  // namespace
}  // namespace wtx
