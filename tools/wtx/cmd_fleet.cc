// `wtx fleet status` and `wtx fleet policy` (docs/fleet.md, docs/cli.md): a fleet's replicas as
// its registry in etcd holds them, and the policy its members enforce.
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "src/fleet/fleet_json.h"
#include "src/net/channel.h"
#include "src/net/fleet_catch_up.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/decision_log_flags.h"
#include "wtx/fleet.h"

namespace wtx::cli {

namespace {

struct FleetArgs {
  DecisionLogFlags log;
  std::string fleet;
  bool json = false;
  // policy: each set only when its flag was given.
  int64_t max_lag = -1;
  bool no_max_lag = false;
  int64_t quorum = -1;
  std::string lineage;
  bool lineage_given = false;
  // catch-up
  std::string replica;
  std::string from;
  std::string coordinator;
  std::string secret_file;
  TlsFiles tls;
  int64_t timeout_ms = 120000;
};

int FleetFail(const std::string& cmd, const Status& s) {
  std::cerr << "wtx fleet " << cmd << ": " << s.ToString() << "\n";
  return s.code() == ErrorCode::kDecisionLogUnavailable ? kExitUnreachable : ExitCodeFor(s);
}

Result<FleetOptions> Options(const FleetArgs& a) {
  if (a.log.url.empty()) return Status::InvalidArgument("--decision-log etcd://... is required");
  return FleetOptionsFromFlags(a.log, a.log.url, a.fleet);
}

std::string Opt(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "-"; }

void PrintStatus(const FleetStatus& s) {
  std::cout << "fleet " << s.fleet << "  lineage " << (s.lineage.empty() ? "-" : s.lineage)
            << "  newest step " << Opt(s.newest_step) << "  published step "
            << Opt(s.published_step) << "  max_lag " << Opt(s.policy.max_lag) << "  quorum "
            << (s.policy.quorum > 0 ? std::to_string(s.policy.quorum) : "all") << "\n";
  std::cout << std::left << std::setw(20) << "REPLICA" << std::setw(8) << "STEP" << std::setw(6)
            << "LAG" << std::setw(13) << "STATE" << std::setw(8) << "RANKS" << std::setw(18)
            << "VERSION"
            << "REASON\n";
  for (const FleetReplica& r : s.replicas) {
    const std::string version = r.version ? r.version->substr(0, 16) : "-";
    const std::string ranks =
        std::to_string(r.ranks) + "/" + (r.world > 0 ? std::to_string(r.world) : "?");
    std::cout << std::left << std::setw(20) << r.replica << std::setw(8) << Opt(r.step)
              << std::setw(6) << Opt(r.lag) << std::setw(13) << ReplicaStateName(r.state)
              << std::setw(8) << ranks << std::setw(18) << version << r.reason << "\n";
  }
  if (s.replicas.empty()) std::cout << "(no replica registered)\n";
}

int RunStatus(const FleetArgs& a) {
  auto options = Options(a);
  if (!options.ok()) return FleetFail("status", options.status());
  auto status = ReadFleetStatus(options.value());
  if (!status.ok()) return FleetFail("status", status.status());
  if (a.json) {
    std::cout << fleet::FleetStatusToJson(status.value()).dump(2) << "\n";
  } else {
    PrintStatus(status.value());
  }
  return kExitOk;
}

int RunPolicy(const FleetArgs& a) {
  auto options = Options(a);
  if (!options.ok()) return FleetFail("policy", options.status());
  if (a.no_max_lag && a.max_lag >= 0) {
    return FleetFail("policy", Status::InvalidArgument("give --max-lag or --no-max-lag, not both"));
  }
  auto status = ReadFleetStatus(options.value());
  if (!status.ok()) return FleetFail("policy", status.status());
  FleetPolicy policy = status->policy;
  const bool change = a.max_lag >= 0 || a.no_max_lag || a.quorum >= 0 || a.lineage_given;
  if (a.max_lag >= 0) policy.max_lag = a.max_lag;
  if (a.no_max_lag) policy.max_lag.reset();
  if (a.quorum >= 0) policy.quorum = static_cast<int>(a.quorum);
  if (a.lineage_given) policy.lineage = a.lineage;
  if (change) {
    auto set = SetFleetPolicy(options.value(), policy);
    if (!set.ok()) return FleetFail("policy", set.status());
  }
  nlohmann::json out = fleet::FleetPolicyToJson(policy);
  out["fleet"] = a.fleet;
  std::cout << out.dump(a.json ? 2 : -1) << "\n";
  return kExitOk;
}

int RunCatchUp(const FleetArgs& a) {
  auto options = Options(a);
  if (!options.ok()) return FleetFail("catch-up", options.status());
  auto secret = net::ReadSecretFile(a.secret_file, "--secret-file");
  if (!secret.ok()) return FleetFail("catch-up", secret.status());
  net::FleetCatchUpRequest req;
  req.fleet = options.value();
  req.replica = a.replica;
  req.from = a.from;
  req.coordinator = a.coordinator;
  req.secret = secret.value();
  req.net.tls = a.tls;
  req.timeout = std::chrono::milliseconds(a.timeout_ms);
  auto r = net::CatchUpReplica(req);
  if (!r.ok()) return FleetFail("catch-up", r.status());
  const net::FleetCatchUpReport& rep = r.value();
  if (a.json) {
    std::cout << nlohmann::json{{"replica", rep.replica}, {"from", rep.from},
                                {"tx", rep.tx},           {"lineage", rep.lineage},
                                {"step", rep.step},       {"version", rep.version},
                                {"bytes", rep.bytes},     {"already", rep.already}}
                     .dump(2)
              << "\n";
  } else if (rep.already) {
    std::cout << "replica " << rep.replica << " already serves step " << rep.step
              << " or newer (peer " << rep.from << ")\n";
  } else {
    std::cout << "replica " << rep.replica << " caught up from " << rep.from << ": step "
              << rep.step << ", version " << rep.version << " (" << rep.bytes << " bytes copied, "
              << rep.tx << ")\n";
  }
  return kExitOk;
}

void AddCommonFlags(CLI::App* cmd, FleetArgs* a) {
  AddDecisionLogFlags(cmd, &a->log);
  cmd->add_option("--fleet", a->fleet, "The fleet's name ([A-Za-z0-9._-], up to 128)")->required();
  cmd->add_flag("--json", a->json, "JSON output");
}

}  // namespace

void RegisterFleetCommands(CLI::App& app, int* exit_code) {
  auto* fleet = app.add_subcommand(
      "fleet", "A fleet of replicas in the etcd registry next to the decision log (docs/fleet.md)");
  fleet->require_subcommand(1);

  auto status_args = std::make_shared<FleetArgs>();
  auto* status = fleet->add_subcommand(
      "status",
      "Every replica of the fleet: its step, lag behind the newest step, state and why it holds; "
      "the fleet's newest and published steps");
  AddCommonFlags(status, status_args.get());
  status->callback([status_args, exit_code] { *exit_code = RunStatus(*status_args); });

  auto policy_args = std::make_shared<FleetArgs>();
  auto* policy = fleet->add_subcommand(
      "policy",
      "Show the fleet's policy, or change what the flags given name (the members apply it at "
      "their next report)");
  AddCommonFlags(policy, policy_args.get());
  AddIntOption(policy, "--max-lag", &policy_args->max_lag, IntBounds{0, INT64_MAX},
               "Hold a replica more than this many steps behind the newest (0: strictly "
               "on-policy)");
  policy->add_flag("--no-max-lag", policy_args->no_max_lag, "No staleness bound");
  AddIntOption(policy, "--quorum", &policy_args->quorum, IntBounds{0, kMaxRanks},
               "Replicas that must serve a step before it is published (0: every live replica)");
  policy
      ->add_option("--lineage", policy_args->lineage,
                   "The fleet's lineage (\"\": the first one committed); replicas of another "
                   "lineage hold")
      ->each([p = policy_args.get()](const std::string&) { p->lineage_given = true; });
  policy->callback([policy_args, exit_code] { *exit_code = RunPolicy(*policy_args); });

  auto catch_args = std::make_shared<FleetArgs>();
  auto* catch_up = fleet->add_subcommand(
      "catch-up",
      "Bring --replica to the version a serving peer replica serves: each rank copies its peer "
      "rank's live bytes, committed only as the peer's version (docs/fleet.md)");
  AddCommonFlags(catch_up, catch_args.get());
  catch_up->add_option("--replica", catch_args->replica, "The lagging replica")->required();
  catch_up->add_option("--from", catch_args->from,
                       "The peer replica (default: the serving one of the newest step)");
  catch_up
      ->add_option("--coordinator", catch_args->coordinator,
                   "HOST:PORT of the lagging replica's coordinator")
      ->required()
      ->check(HostPortCheck());
  catch_up
      ->add_option("--secret-file", catch_args->secret_file,
                   "The fleet's shared secret (its coordinators' and ranks')")
      ->required();
  AddTlsOptions(catch_up, &catch_args->tls);
  AddIntOption(catch_up, "--timeout-ms", &catch_args->timeout_ms, kTimeoutMsBounds,
               "Deadline of each rank's copy and of the commit")
      ->capture_default_str();
  catch_up->callback([catch_args, exit_code] { *exit_code = RunCatchUp(*catch_args); });
}

}  // namespace wtx::cli
