// `wtx rank --connect HOST:PORT --rank R --journal DIR --secret-file F
//           (--manifest M.json | --hf-config C --tp N) [--kernel-identity S]
//           [--lineage L [--new-lineage]]`
//
// Runs one participant (its journal recovered from DIR) with a TcpRankAgent connected to the
// coordinator, until SIGINT/SIGTERM. It stands in for an inference rank: a real engine embeds
// Participant + TcpRankAgent and writes its own bytes. With --control HOST:PORT it also serves
// an authenticated control port for the data-plane steps of spec/scenario.md (write, patch,
// refresh, set_kernel_identity with deterministic fills), status queries and, with
// --test-hooks (the build tree's wtx only: daemon_hooks.h), crash points, silence and crashes,
// answered by the library's RankControlService (src/net/control_service.h); this file parses
// flags and wires.
// Prints one JSON line on stdout once ready (manifest and journal loaded, TLS files read, the
// control port listening): {"ready": true, "rank": R, "control_port": P[, "metrics_port": M]}
// (--metrics-listen serves its Prometheus metrics, docs/observability.md); SIGINT/SIGTERM stop
// it at any stage, start-up included (daemon_signals.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include "src/conformance/step_codec.h"
#include "src/net/channel.h"
#include "src/net/codec.h"
#include "src/net/control.h"
#include "src/net/control_codec.h"
#include "src/net/control_service.h"
#include "src/txn/test_hooks.h"
#include "src/util/file_util.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/daemon_hooks.h"
#include "tools/wtx/daemon_signals.h"
#include "tools/wtx/decision_log_flags.h"
#include "tools/wtx/metrics_flags.h"
#include "wtx/fleet.h"
#include "wtx/hf_manifest.h"
#include "wtx/participant.h"
#include "wtx/tcp_rank_agent.h"

namespace wtx::cli {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

struct RankArgs {
  std::string connect;
  int rank = 0;
  std::string journal;
  std::string secret_file;
  std::string manifest;
  std::string hf_config;
  int tp = 1;
  int ep = 1;
  std::string kernel_identity;
  size_t rollback_budget_bytes = size_t{1} << 30;
  int landing_hash_threads = 0;
  int threads = 0;
  std::string control;
  int64_t backoff_max_ms = 1000;
  int64_t heartbeat_ms = 1000;
  int64_t request_timeout_ms = 10000;
  size_t max_frame_bytes = size_t{64} << 20;
  DaemonHookFlags hook_flags;  // --test-hooks, --sync-delay-ms (daemon_hooks.h)
  bool accept_unverified_journal = false;
  std::string lineage;
  bool new_lineage = false;
  TlsFiles tls;
  DecisionLogFlags decision_log;
  MetricsFlags metrics;
  // --fleet: this rank registers as rank --rank of --replica (wtx/fleet.h).
  std::string fleet;
  std::string fleet_registry;  // default: --decision-log's url
  std::string replica;
  int replica_ranks = 0;
  int64_t fleet_ttl_ms = 6000;
  int64_t fleet_period_ms = 0;
};

int FailRank(const Status& s) { return net::FailToStart("rank", s); }

Result<ManifestPtr> LoadManifest(const RankArgs& a) {
  if (!a.manifest.empty()) {
    WTX_ASSIGN_OR_RETURN(text, ReadFileArg("--manifest", a.manifest));
    auto m = ParseManifestText(text);
    if (!m.ok())
      return Status::InvalidArgument("--manifest '" + a.manifest + "': " + m.status().message());
    return m;
  }
  WTX_ASSIGN_OR_RETURN(config, ReadJsonFileArg("--hf-config", a.hf_config));
  HfManifestOptions o;
  o.tp = a.tp;
  o.ep = a.ep;
  o.rank = a.rank % std::max(1, o.GroupSize());
  return ManifestFromHfConfig(config, o);
}

int RunRank(const RankArgs& a) {
  DaemonSignals signals("rank");
  if (a.manifest.empty() == a.hf_config.empty()) {
    return FailRank(Status::InvalidArgument("give exactly one of --manifest and --hf-config"));
  }
  signals.Stage("reading --secret-file");
  auto secret = net::ReadSecretFile(a.secret_file, "--secret-file");
  if (!secret.ok()) return FailRank(secret.status());
  auto coordinators = ParseHostPortList(a.connect);
  if (!coordinators.ok()) {
    return FailRank(Status::InvalidArgument("--connect: " + coordinators.status().message()));
  }
  signals.Stage("opening --decision-log");
  auto log = OpenDecisionLogFlags(a.decision_log);
  if (!log.ok()) return FailRank(log.status());
  if (log.value()) {
    // The rank needs the log only to resolve without a coordinator: an unreachable one is
    // said now, naming the endpoints, and does not keep the rank down.
    if (auto leader = log.value()->CurrentLeader(); !leader.ok()) {
      net::LogLine("rank-" + std::to_string(a.rank),
                   "warning: --decision-log " + log.value()->Describe() + " does not answer yet (" +
                       leader.status().ToString() +
                       "); starting, and resolving from it once it does");
    }
  }
  signals.Stage(a.manifest.empty() ? "reading --hf-config" : "reading --manifest");
  auto manifest = LoadManifest(a);
  if (!manifest.ok()) return FailRank(manifest.status());
  if (Status s = CheckDirectoryArg("--journal", a.journal, /*must_exist=*/false,
                                   /*must_hold_files=*/false);
      !s.ok()) {
    return FailRank(s);
  }
  signals.Stage("opening and recovering --journal");

  auto metric_labels = ParseMetricLabelFlags(a.metrics);
  if (!metric_labels.ok()) return FailRank(metric_labels.status());
  DaemonHooks test = MakeDaemonHooks(a.hook_flags, /*rank=*/true);
  ParticipantOptions po;
  po.metric_labels = metric_labels.value();
  ParticipantHooks hooks;
  po.rank = a.rank;
  po.journal_dir = a.journal;
  po.kernel_identity = a.kernel_identity;
  po.rollback_budget_bytes = a.rollback_budget_bytes;
  po.landing_hash_threads = a.landing_hash_threads;
  po.threads = a.threads;
  po.accept_unverified_journal = a.accept_unverified_journal;
  po.lineage = a.lineage;
  po.new_lineage = a.new_lineage;
  if (test.journal_fs) po.env.fs = test.journal_fs;
  hooks.crash_points = test.crash_points;
  auto opened = OpenParticipantWithHooks(std::move(po), manifest.value(), hooks);
  if (!opened.ok()) return FailRank(opened.status());
  Participant& p = *opened.value();

  RankAgentOptions ao;
  ao.coordinator_host = coordinators->front().first;
  ao.coordinator_port = coordinators->front().second;
  ao.more_coordinators.assign(coordinators->begin() + 1, coordinators->end());
  ao.decision_log = log.value();
  ao.rank = a.rank;
  ao.secret = secret.value();
  ao.backoff_max = milliseconds(a.backoff_max_ms);
  ao.heartbeat = milliseconds(a.heartbeat_ms);
  ao.request_timeout = milliseconds(a.request_timeout_ms);
  ao.max_frame_bytes = a.max_frame_bytes;
  ao.tls = a.tls;
  signals.Stage("reading the TLS files, starting the agent");
  auto agent = StartRankAgentWithHooks(ao, &p, test.agent);
  if (!agent.ok()) return FailRank(agent.status());
  TcpRankAgent& ag = *agent.value();

  // The control port applies the scenario runner's data-plane steps (spec/scenario.md).
  net::RankControlService service(&p, &ag, sim::ControlStepHandler(), test.control);
  if (!a.fleet.empty()) {
    // A lagging replica of the fleet catches up from this rank's peers (`wtx fleet catch-up`),
    // reaching them with this rank's secret: the fleet shares one.
    net::CatchUpOptions co;
    co.secret = secret.value();
    co.net.max_frame_bytes = a.max_frame_bytes;
    co.net.tls = a.tls;
    co.request_timeout = milliseconds(a.request_timeout_ms);
    service.EnableCatchUp(std::move(co));
  }
  std::unique_ptr<net::ControlServer> control;
  if (!a.control.empty()) {
    signals.Stage("listening on --control");
    auto chp = net::ParseHostPort(a.control);
    if (!chp.ok()) return FailRank(chp.status());
    net::NetOptions no;
    no.max_frame_bytes = a.max_frame_bytes;
    no.tls = a.tls;
    auto cs = net::ControlServer::Listen(chp->first, chp->second, secret.value(), service.Handler(),
                                         no, "rank-" + std::to_string(a.rank) + "-control");
    if (!cs.ok()) return FailRank(cs.status());
    control = std::move(cs).value();
  }

  std::unique_ptr<FleetMember> member;
  if (!a.fleet.empty()) {
    signals.Stage("joining --fleet");
    const std::string& registry = a.fleet_registry.empty() ? a.decision_log.url : a.fleet_registry;
    if (registry.empty() || a.replica.empty()) {
      return FailRank(Status::InvalidArgument(
          "--fleet needs --replica, and --fleet-registry etcd://HOST:PORT/PREFIX (or "
          "--decision-log, whose etcd and prefix it then uses)"));
    }
    auto fleet = FleetOptionsFromFlags(a.decision_log, registry, a.fleet);
    if (!fleet.ok()) return FailRank(fleet.status());
    FleetMemberOptions fo;
    fo.fleet = std::move(fleet).value();
    fo.replica = a.replica;
    fo.rank = a.rank;
    fo.world = a.replica_ranks;
    fo.ttl = milliseconds(a.fleet_ttl_ms);
    if (control) {
      auto chp = net::ParseHostPort(a.control);
      if (chp.ok()) fo.control = chp->first + ":" + std::to_string(control->port());
    }
    fo.period = milliseconds(a.fleet_period_ms);
    auto started = FleetMember::Start(std::move(fo), &p);
    if (!started.ok()) return FailRank(started.status());
    member = std::move(started).value();
  }

  signals.Stage("listening on --metrics-listen");
  auto metrics = StartMetricsFlags(a.metrics);
  if (!metrics.ok()) return FailRank(metrics.status());

  json ready = {{"ready", true}, {"role", "rank"}, {"rank", a.rank}};
  if (control) ready["control_port"] = control->port();
  if (metrics.value()) ready["metrics_port"] = metrics.value()->port();
  signals.Ready(ready);
  signals.WaitForStop();
  member.reset();  // leaves the fleet at once (its lease revoked)
  control.reset();
  agent.value().reset();
  return kExitOk;
}

}  // namespace

void RegisterRankCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("rank", "Run one participant rank on the TCP transport");
  auto a = std::make_shared<RankArgs>();
  cmd->add_option("--connect", a->connect,
                  "Coordinator HOST:PORT, then its standbys' (tried in turn), comma-separated")
      ->required()
      ->check(HostPortListCheck());
  AddIntOption(cmd, "--rank", &a->rank, kRankIdBounds, "This rank's id")->required();
  cmd->add_option("--journal", a->journal, "Journal directory of this rank")->required();
  cmd->add_option("--secret-file", a->secret_file, "File holding the shared secret")->required();
  cmd->add_option("--manifest", a->manifest, "Manifest JSON of this rank");
  cmd->add_option("--hf-config", a->hf_config, "Hugging Face config.json (with --tp)");
  AddIntOption(cmd, "--tp", &a->tp, kRankCountBounds, "Tensor-parallel degree (with --hf-config)")
      ->capture_default_str();
  AddIntOption(cmd, "--ep", &a->ep, kRankCountBounds,
               "Expert-parallel degree (with --hf-config; a multiple of --tp, see manifest.md)")
      ->capture_default_str();
  cmd->add_option("--kernel-identity", a->kernel_identity, "Attention/GEMM backends identity");
  AddIntOption(cmd, "--rollback-budget-bytes", &a->rollback_budget_bytes, kByteBudgetBounds,
               "Before-image budget of rollback transactions")
      ->capture_default_str();
  AddDataThreadsOption(cmd, &a->threads);
  AddIntOption(cmd, "--landing-hash-threads", &a->landing_hash_threads, kDataThreadsBounds,
               "At least this many threads hash every in-place landing in the background, "
               "whatever its size (0: as --threads says)")
      ->capture_default_str();
  cmd->add_option("--control", a->control,
                  "Serve the control protocol on HOST:PORT (port 0: any free port)")
      ->check(HostPortCheck());
  AddIntOption(cmd, "--backoff-max-ms", &a->backoff_max_ms, kTimeoutMsBounds,
               "Longest reconnect backoff")
      ->capture_default_str();
  AddIntOption(cmd, "--heartbeat-ms", &a->heartbeat_ms, IntBounds{10, kMaxTimeoutMs},
               "With standbys or --decision-log: ping the coordinator this often (3 missed: "
               "try the next one)")
      ->capture_default_str();
  AddIntOption(cmd, "--request-timeout-ms", &a->request_timeout_ms, kTimeoutMsBounds,
               "Timeout of this rank's own requests (QueryDecision)")
      ->capture_default_str();
  AddIntOption(cmd, "--max-frame-bytes", &a->max_frame_bytes, kFrameBytesBounds,
               "Largest accepted frame")
      ->capture_default_str();
  cmd->add_flag("--accept-unverified-journal", a->accept_unverified_journal,
                "Start on a journal that has records but no valid sync watermark (synced records "
                "may have been lost); logged in the journal as an ACCEPTED_UNVERIFIED record");
  cmd->add_option("--lineage", a->lineage,
                  "The lineage (the policy being trained) this rank's journal belongs to; a "
                  "journal of another lineage is refused (docs/fleet.md)");
  cmd->add_flag("--new-lineage", a->new_lineage,
                "Start --lineage on this journal even though it holds another lineage or model: "
                "its committed version and step are forgotten (nothing serves until a full "
                "commit)");
  cmd->add_option("--fleet", a->fleet,
                  "Register in this fleet's registry (next to --decision-log) and hold while "
                  "its policy does not admit this replica's step (docs/fleet.md)");
  cmd->add_option("--fleet-registry", a->fleet_registry,
                  "With --fleet: etcd://HOST:PORT[,...]/PREFIX of the fleet's registry (default: "
                  "--decision-log's; replicas with a decision log each share one PREFIX here)");
  cmd->add_option("--replica", a->replica,
                  "With --fleet: the replica (transaction group) this rank belongs to");
  AddIntOption(cmd, "--replica-ranks", &a->replica_ranks, IntBounds{0, kMaxRanks},
               "With --fleet: ranks in the replica (0: unknown; a missing rank is not noticed)")
      ->capture_default_str();
  AddIntOption(cmd, "--fleet-ttl-ms", &a->fleet_ttl_ms, IntBounds{1000, 600000},
               "With --fleet: the lease of this rank's record (gone this long after a crash)")
      ->capture_default_str();
  AddIntOption(cmd, "--fleet-period-ms", &a->fleet_period_ms, IntBounds{0, 600000},
               "With --fleet: between reports (0: a third of --fleet-ttl-ms)")
      ->capture_default_str();
  AddTlsOptions(cmd, &a->tls);
  AddDecisionLogFlags(cmd, &a->decision_log);
  AddMetricsFlags(cmd, &a->metrics);
  AddDaemonHookFlags(cmd, &a->hook_flags);
  cmd->callback([=] { *exit_code = RunRank(*a); });
}

}  // namespace wtx::cli
