// `wtx coordinator --listen HOST:PORT --journal DIR --secret-file F --ranks N`
//
// Runs a coordinator on the TCP transport until SIGINT/SIGTERM. Ranks (`wtx rank`, or an
// engine embedding TcpRankAgent) connect to --listen; drivers connect to the same port with
// role "control" and call begin/commit/abort/decisions, answered by the library's
// CoordinatorControlService (src/net/control_service.h). On start it waits up to
// --startup-wait-ms for every rank, re-sends logged decisions (Recover) and only then answers
// in-doubt ranks; it re-sends pending decisions whenever a rank (re)connects (the library's
// CoordinatorRecovery, src/net/coordinator_recovery.h). This file parses flags and wires.
// --defer-recovery leaves both to a control "recover" call (the simulator's ordering).
// --manifest-groups (one value per rank) lets pipeline stages hold different manifests.
// With --decision-log etcd://... the decisions live in etcd: the coordinator first takes the
// leadership of the log (waiting up to --leader-wait-ms for a dead leader's lease to end, or,
// with --standby, for as long as another coordinator leads), and only then listens; it exits
// (status 4) when it loses the leadership (its lease found gone, or not renewed for a whole
// TTL), so that a deposed coordinator serves no one; an etcd election that holds renewals up
// for less than that only pauses its decisions.
// With --metrics-listen it serves its Prometheus metrics (docs/observability.md).
// Prints one JSON line on stdout once ready (journal recovered, listening): {"ready": true,
// "port": P[, "metrics_port": M]}; SIGINT/SIGTERM stop it at any stage, start-up and the wait for
// ranks included (daemon_signals.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include "src/net/channel.h"
#include "src/net/codec.h"
#include "src/net/control_codec.h"
#include "src/net/control_service.h"
#include "src/net/coordinator_recovery.h"
#include "src/txn/test_hooks.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/daemon_hooks.h"
#include "tools/wtx/daemon_signals.h"
#include "tools/wtx/decision_log_flags.h"
#include "tools/wtx/metrics_flags.h"
#include "wtx/coordinator.h"
#include "wtx/tcp_transport.h"

namespace wtx::cli {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

struct CoordinatorArgs {
  std::string listen = "127.0.0.1:7070";
  std::string journal;
  std::string secret_file;
  int ranks = 1;
  int64_t prepare_timeout_ms = 5000;
  int64_t request_timeout_ms = 10000;
  int64_t startup_wait_ms = 30000;
  int max_connections = 1024;
  TlsFiles tls;
  size_t max_frame_bytes = size_t{64} << 20;
  bool defer_recovery = false;
  DaemonHookFlags hook_flags;  // --test-hooks, --sync-delay-ms (daemon_hooks.h)
  bool accept_unverified_journal = false;
  DecisionLogFlags decision_log;
  MetricsFlags metrics;
  bool standby = false;
  int64_t lease_ttl_ms = 2000;
  int64_t leader_wait_ms = -1;  // default: two lease TTLs and a second
  int64_t retain_decisions = 0;
  std::string holder;
  std::string manifest_groups;  // "0,0,1,1"; empty: every rank the same manifest
};

// --manifest-groups: one integer in [0, kMaxRanks] per rank, comma-separated.
Result<std::vector<int>> ParseManifestGroups(const std::string& text, int ranks) {
  std::vector<int> out;
  if (text.empty()) return out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    int v = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 0 ||
        v > kMaxRanks) {
      return Status::InvalidArgument("--manifest-groups: value " + std::to_string(out.size()) +
                                     " '" + item + "' is not an integer in [0, " +
                                     std::to_string(kMaxRanks) + "]");
    }
    out.push_back(v);
    at = end + 1;
  }
  if (out.size() != static_cast<size_t>(ranks)) {
    return Status::InvalidArgument("--manifest-groups has " + std::to_string(out.size()) +
                                   " values for --ranks " + std::to_string(ranks) +
                                   " (one per rank)");
  }
  return out;
}

int Fail(const Status& s) { return net::FailToStart("coordinator", s); }

int RunCoordinator(const CoordinatorArgs& a) {
  DaemonSignals signals("coordinator");
  signals.Stage("reading --secret-file");
  auto secret = net::ReadSecretFile(a.secret_file, "--secret-file");
  if (!secret.ok()) return Fail(secret.status());
  auto hp = net::ParseHostPort(a.listen);
  if (!hp.ok()) return Fail(hp.status());
  if (Status s = CheckDirectoryArg("--journal", a.journal, /*must_exist=*/false,
                                   /*must_hold_files=*/false);
      !s.ok()) {
    return Fail(s);
  }
  auto groups = ParseManifestGroups(a.manifest_groups, a.ranks);
  if (!groups.ok()) return Fail(groups.status());
  if (a.standby && a.decision_log.url.empty()) {
    // A standby of nothing would lead on its own journal beside the real leader.
    return Fail(Status::InvalidArgument(
        "--standby needs --decision-log etcd://...: a standby waits for the leadership of a "
        "shared decision log"));
  }
  // A shared decision log is opened, and led, before anything listens: a standby must not take
  // ranks' connections away from the leader.
  signals.Stage("opening --decision-log");
  auto log = OpenDecisionLogFlags(a.decision_log, /*create=*/true);
  if (!log.ok()) return Fail(log.status());
  std::shared_ptr<Leadership> leadership;
  std::string holder;
  if (log.value()) {
    holder = a.holder.empty()
                 ? "wtx coordinator pid " + std::to_string(getpid()) + " listening on " + a.listen
                 : a.holder;
    auto lead = log.value()->NewLeadership(holder, milliseconds(a.lease_ttl_ms));
    if (!lead.ok()) return Fail(lead.status());
    leadership = std::move(lead).value();
    const milliseconds wait =
        a.standby
            ? milliseconds(kMaxTimeoutMs)
            : milliseconds(a.leader_wait_ms >= 0 ? a.leader_wait_ms : 2 * a.lease_ttl_ms + 1000);
    signals.Stage(a.standby ? "standing by for the leadership of --decision-log"
                            : "taking the leadership of --decision-log");
    if (a.standby) {
      net::LogLine("coordinator",
                   "standby: waiting for the leadership of " + log.value()->Describe());
    }
    auto epoch = leadership->Acquire(wait);
    if (!epoch.ok()) return Fail(epoch.status());
    net::LogLine("coordinator", "leads " + log.value()->Describe() + " with epoch " +
                                    std::to_string(epoch.value()));
  }
  signals.Stage("reading the TLS files, listening on --listen");
  TcpTransportOptions to;
  to.listen_host = hp->first;
  to.port = hp->second;
  to.secret = secret.value();
  to.num_ranks = a.ranks;
  to.request_timeout = milliseconds(a.request_timeout_ms);
  to.max_frame_bytes = a.max_frame_bytes;
  to.max_connections = a.max_connections;
  to.tls = a.tls;
  auto transport = TcpTransport::Listen(to);
  if (!transport.ok()) return Fail(transport.status());
  TcpTransport& t = *transport.value();

  // With test hooks the journal runs on a fault-injecting filesystem, so that a "crash with
  // power loss" can drop exactly the unsynced data before the process exits.
  auto metric_labels = ParseMetricLabelFlags(a.metrics);
  if (!metric_labels.ok()) return Fail(metric_labels.status());
  DaemonHooks test = MakeDaemonHooks(a.hook_flags, /*rank=*/false);
  CoordinatorOptions co;
  co.metric_labels = metric_labels.value();
  CoordinatorHooks hooks;
  co.journal_dir = a.journal;
  co.prepare_timeout = milliseconds(a.prepare_timeout_ms);
  co.accept_unverified_journal = a.accept_unverified_journal;
  co.decision_log = log.value();
  co.leadership = leadership;
  co.lease_ttl = milliseconds(a.lease_ttl_ms);
  co.holder = holder;
  co.manifest_groups = groups.value();
  co.retain_decisions = static_cast<size_t>(a.retain_decisions);
  if (test.journal_fs) co.env.fs = test.journal_fs;
  hooks.crash_points = test.crash_points;
  signals.Stage("opening and recovering --journal");
  auto opened = OpenCoordinatorWithHooks(co, &t, hooks);
  // Taking over during an etcd election: the new lease cannot be renewed for a moment (Leads()
  // false) and the log may not answer. Retried while the leadership has not ended, for up to
  // two lease TTLs and a second. A leadership found ended is a loss only when another
  // coordinator leads now (status 4, as a deposed leader); a lease the election let lapse with
  // nobody else leading is taken again (issue 45: a standby never exits for a leader that does
  // not exist).
  for (int reacquired = 0;; ++reacquired) {
    const auto retry_until =
        std::chrono::steady_clock::now() + 2 * milliseconds(a.lease_ttl_ms) + milliseconds(1000);
    bool said = false;
    while (!opened.ok() && leadership && !leadership->Ended() &&
           (opened.status().code() == ErrorCode::kStaleCoordinator ||
            opened.status().code() == ErrorCode::kDecisionLogUnavailable) &&
           std::chrono::steady_clock::now() < retry_until) {
      if (!said) {
        net::LogLine("coordinator", "cannot start on the leadership yet (" +
                                        opened.status().ToString() + "); retrying");
        said = true;
      }
      std::this_thread::sleep_for(milliseconds(100));
      opened = OpenCoordinatorWithHooks(co, &t, hooks);
    }
    if (opened.ok() || !leadership || !leadership->Ended()) break;
    auto who = log.value()->CurrentLeader();
    const bool other_leads = who.ok() && who.value() && who.value()->second != holder;
    if (other_leads || reacquired >= 3) {
      net::PrintReadyLine({{"ready", false}, {"error", net::StatusToJson(opened.status())}});
      net::LogLine("coordinator", "lost the leadership of " + log.value()->Describe() +
                                      " while taking over (" +
                                      (other_leads ? "'" + who.value()->second + "' leads"
                                                   : std::string("it could not be kept")) +
                                      "); exiting");
      return kExitUnreachable;
    }
    net::LogLine("coordinator", "the leadership of " + log.value()->Describe() +
                                    " lapsed while taking over and nobody else leads (" +
                                    (who.ok() ? "no holder" : who.status().ToString()) +
                                    "); taking it again");
    auto lead = log.value()->NewLeadership(holder, milliseconds(a.lease_ttl_ms));
    if (!lead.ok()) return Fail(lead.status());
    leadership = std::move(lead).value();
    co.leadership = leadership;
    auto epoch = leadership->Acquire(a.standby ? milliseconds(kMaxTimeoutMs)
                                               : 2 * milliseconds(a.lease_ttl_ms));
    if (!epoch.ok()) return Fail(epoch.status());
    net::LogLine("coordinator", "leads " + log.value()->Describe() + " with epoch " +
                                    std::to_string(epoch.value()));
    opened = OpenCoordinatorWithHooks(co, &t, hooks);
  }
  if (!opened.ok()) return Fail(opened.status());
  Coordinator* c = opened.value().get();

  net::CoordinatorControlService control(c, &t, a.ranks, test.control);
  t.SetControlHandler(control.Handler());

  signals.Stage("listening on --metrics-listen");
  auto metrics = StartMetricsFlags(a.metrics);
  if (!metrics.ok()) return Fail(metrics.status());

  json ready = {{"ready", true}, {"role", "coordinator"}, {"port", t.port()}};
  if (metrics.value()) ready["metrics_port"] = metrics.value()->port();
  if (co.decision_log) {
    ready["epoch"] = c->epoch();
    ready["decision_log"] = c->decision_log();
  }
  signals.Ready(ready);

  // Unless deferred: wait for the ranks, re-send logged decisions, then answer in-doubt ranks
  // and re-send pending decisions whenever a rank (re)connects.
  net::CoordinatorRecovery recovery(c, &t);
  if (!a.defer_recovery) recovery.Start(a.ranks, milliseconds(a.startup_wait_ms));
  // A deposed leader stops: it can decide nothing, and ranks must find its successor. One whose
  // renewals cannot reach etcd for a moment (an etcd election) does not lead meanwhile but
  // stays: it leads again after the next renewal. After a whole lease TTL without leading it
  // stops too (its lease may have expired, a standby may lead, and ranks that still reach it
  // would not look for the successor).
  // The time the coordinator last stopped leading; the epoch (time_point{}) while it leads.
  std::chrono::steady_clock::time_point not_leading_since{};
  const bool deposed = !signals.WaitForStopOr([&] {
    if (c->deposed()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (c->leads()) {
      not_leading_since = {};
      return false;
    }
    if (not_leading_since == std::chrono::steady_clock::time_point{}) not_leading_since = now;
    return now - not_leading_since >= milliseconds(a.lease_ttl_ms);
  });
  if (deposed) {
    net::LogLine("coordinator", "lost the leadership of " + c->decision_log() + " (epoch " +
                                    std::to_string(c->epoch()) + "); exiting");
  }
  recovery.RequestStop();  // a startup wait cut short by the shutdown is no missing rank
  // Every blocking wait ends within a second: the startup wait and WaitForRanks calls return,
  // and calls in flight (prepare, decide, recover) fail at once on their closed connections.
  t.Shutdown();
  recovery.Stop();
  transport.value().reset();
  return deposed ? kExitUnreachable : kExitOk;
}

}  // namespace

void RegisterCoordinatorCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("coordinator", "Run a coordinator on the TCP transport");
  auto a = std::make_shared<CoordinatorArgs>();
  cmd->add_option("--listen", a->listen, "HOST:PORT to listen on (port 0: any free port)")
      ->check(HostPortCheck())
      ->capture_default_str();
  cmd->add_option("--journal", a->journal, "Coordinator journal directory")->required();
  cmd->add_option("--secret-file", a->secret_file, "File holding the shared secret")->required();
  AddIntOption(cmd, "--ranks", &a->ranks, kRankCountBounds, "Number of ranks")->required();
  AddIntOption(cmd, "--prepare-timeout-ms", &a->prepare_timeout_ms, kTimeoutMsBounds,
               "Vote timeout")
      ->capture_default_str();
  AddIntOption(cmd, "--request-timeout-ms", &a->request_timeout_ms, kTimeoutMsBounds,
               "Timeout of other calls")
      ->capture_default_str();
  AddIntOption(cmd, "--startup-wait-ms", &a->startup_wait_ms, kWaitMsBounds,
               "How long to wait for every rank before recovering")
      ->capture_default_str();
  AddIntOption(cmd, "--max-frame-bytes", &a->max_frame_bytes, kFrameBytesBounds,
               "Largest accepted frame")
      ->capture_default_str();
  AddTlsOptions(cmd, &a->tls);
  AddIntOption(cmd, "--max-connections", &a->max_connections, 1, 1 << 20,
               "Connections served at once (ranks, controllers, handshakes); more are refused")
      ->capture_default_str();
  cmd->add_flag("--defer-recovery", a->defer_recovery,
                "Recover and answer in-doubt ranks only on a control 'recover' call");
  cmd->add_flag("--accept-unverified-journal", a->accept_unverified_journal,
                "Start on a journal that has records but no valid sync watermark (synced records "
                "may have been lost); logged in the journal as an ACCEPTED_UNVERIFIED record");
  AddDecisionLogFlags(cmd, &a->decision_log);
  AddMetricsFlags(cmd, &a->metrics);
  cmd->add_flag("--standby", a->standby,
                "With --decision-log: wait for as long as another coordinator leads, then take "
                "over (re-send its decisions, abort what it left undecided)");
  AddIntOption(cmd, "--lease-ttl-ms", &a->lease_ttl_ms, IntBounds{1000, 600000},
               "Leader lease TTL (rounded up to whole seconds by etcd)")
      ->capture_default_str();
  AddIntOption(cmd, "--leader-wait-ms", &a->leader_wait_ms, kWaitMsBounds,
               "Without --standby: how long to wait for another leader's lease to end before "
               "refusing to start (default: 2 x --lease-ttl-ms + 1000)");
  AddIntOption(cmd, "--retain-decisions", &a->retain_decisions, kByteBudgetBounds,
               "With --decision-log: keep this many ended decisions in etcd, removing older "
               "ended ones (0: keep all)")
      ->capture_default_str();
  cmd->add_option("--holder", a->holder,
                  "This coordinator's name in the leader record (default: pid and --listen)");
  cmd->add_option("--manifest-groups", a->manifest_groups,
                  "One value per rank, comma-separated (pipeline stages): ranks of one value "
                  "must hold the same manifest, ranks of different values may differ (default: "
                  "every rank the same)");
  AddDaemonHookFlags(cmd, &a->hook_flags);
  cmd->callback([=] { *exit_code = RunCoordinator(*a); });
}

}  // namespace wtx::cli
