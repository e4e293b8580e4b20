// `wtx torture --iterations N --seed S [--ranks R] [--transactions T] [--start I] [--dir DIR]
//              [--json] [--verbose] [--keep-failed]`
// Randomized crash-safety testing (tools/torture/torture.h). Exit 0 when no invariant was
// violated, 1 on any violation (each printed with the command that replays it), 2 on bad usage.
#include <iostream>

#include "src/etcd/etcd_url.h"
#include "tools/torture/torture.h"
#include "tools/wtx/commands.h"

namespace wtx::cli {

namespace {

// --iterations at most a billion scripts (a run of a million takes about a day).
constexpr int64_t kMaxTortureIterations = 1000000000;

int RunTortureCmd(const torture::TortureOptions& o, bool as_json) {
  if (!o.dir.empty()) {
    if (Status s = CheckDirectoryArg("--dir", o.dir, /*must_exist=*/false,
                                     /*must_hold_files=*/false);
        !s.ok()) {
      std::cerr << "wtx torture: " << s.message() << "\n";
      return kExitInvalidInput;
    }
  }
  if (!o.decision_log.empty()) {
    // A malformed URL is bad usage, named, not a violation found by a run.
    if (auto u = etcd::ParseEtcdUrl(o.decision_log); !u.ok()) {
      std::cerr << "wtx torture: --decision-log '" << o.decision_log
                << "': " << u.status().message() << "\n";
      return kExitInvalidInput;
    }
  }
  torture::TortureOptions opts = o;
  opts.log = [](const std::string& line) { std::cerr << line << "\n"; };
  auto rep = torture::RunTorture(opts);
  if (!rep.ok()) {
    std::cerr << "wtx torture: " << rep.status().ToString() << "\n";
    return ExitCodeFor(rep.status());
  }
  const torture::TortureReport& r = rep.value();
  for (const auto& v : r.violations) {
    std::cerr << "VIOLATION seed " << o.seed << " script " << v.script << " step " << v.step << ": "
              << v.what << "\n  reproduce: " << torture::ReproduceCommand(o, v.script) << "\n";
    for (const auto& t : v.trace) std::cerr << "    " << t << "\n";
    if (!v.journals.empty()) std::cerr << "  journals kept in " << v.journals << "\n";
  }
  if (as_json) {
    std::cout << r.ToJson(o).dump(1) << "\n";
  } else {
    std::cout << "torture: seed " << o.seed << ", " << o.ranks << " ranks: " << r.scripts
              << " scripts, " << r.transactions << " transactions (" << r.committed
              << " committed, " << r.aborted << " aborted, " << r.noop << " noop, "
              << r.begin_refused << " begins refused), " << r.steps << " steps\n"
              << "  crash points: " << r.crash_points << " (";
    bool first = true;
    for (const auto& [k, n] : r.crash_kinds) {
      std::cout << (first ? "" : ", ") << k << " " << n;
      first = false;
    }
    std::cout << ")\n  recoveries: " << r.recoveries
              << ", in-doubt resolved: " << r.in_doubt_resolved
              << ", I/O errors injected: " << r.io_errors_injected
              << ", invariant checks: " << r.checks
              << ", journals verified: " << r.journals_verified
              << "\n  violations: " << r.violations.size() << "\n  time: " << r.seconds << " s ("
              << (r.seconds > 0 ? r.crash_points / r.seconds : 0) << " crash points/s)\n";
  }
  return r.violations.empty() ? kExitOk : kExitFailed;
}

}  // namespace

void RegisterTortureCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "torture", "Random transaction scripts with injected crashes, checked against a model");
  auto o = std::make_shared<torture::TortureOptions>();
  auto as_json = std::make_shared<bool>(false);
  AddIntOption(cmd, "--iterations", &o->iterations, 1, kMaxTortureIterations,
               "Scripts to run (default 100)");
  AddIntOption(cmd, "--seed", &o->seed, 0, INT64_MAX, "Random seed (default 1)");
  AddIntOption(cmd, "--start", &o->start, 0, INT64_MAX - kMaxTortureIterations,
               "Index of the first script (replay one: --iterations 1)");
  AddIntOption(cmd, "--ranks", &o->ranks, 1, 8, "Ranks per cluster (default 2)");
  AddIntOption(cmd, "--transactions", &o->transactions, 0, 10000,
               "Faulty transactions per script before the final clean one (default 10)");
  cmd->add_option("--dir", o->dir, "Scratch directory (default /dev/shm or the temp dir)");
  cmd->add_option("--decision-log", o->decision_log,
                  "The coordinator decides in etcd (etcd://HOST:PORT,.../PREFIX): coordinator "
                  "kills become takeovers of the leadership");
  cmd->add_flag("--json", *as_json, "Print the report as JSON");
  cmd->add_flag("--verbose", o->verbose, "Trace every operation to stderr");
  cmd->add_flag("--keep-failed", o->keep_failed, "Keep the journals of failing scripts");
  cmd->callback([=] { *exit_code = RunTortureCmd(*o, *as_json); });
}

}  // namespace wtx::cli
