// `wtx sim SCENARIO.json [--journal-dir DIR] [--expect EXPECT.json] [--transport inproc|tcp]
//          [--memory host|reference-device|device] [--decision-log etcd://.../PREFIX]`
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "src/conformance/expectations.h"
#include "src/conformance/scenario.h"
#include "src/conformance/simulator.h"
#include "src/conformance/tcp_simulator.h"
#include "src/util/file_util.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/daemon_hooks.h"
#include "tools/wtx/decision_log_flags.h"

namespace wtx::cli {

namespace {

int RunSim(const std::string& path, std::string journal_dir, const std::string& expect_path,
           bool pretty, const std::string& transport, const std::string& memory_name,
           const DecisionLogFlags& decision_log) {
  if (!decision_log.url.empty() && transport != "tcp") {
    std::cerr << "wtx sim: --decision-log applies to --transport tcp (the coordinator and "
                 "rank processes share it)\n";
    return kExitInvalidInput;
  }
  if (!decision_log.url.empty()) {
    // Refused here, naming the flag, rather than by every process it would start.
    auto log = OpenDecisionLogFlags(decision_log, /*create=*/true);
    if (!log.ok()) {
      std::cerr << "wtx sim: " << log.status().ToString() << "\n";
      return ExitCodeFor(log.status()) == kExitInvalidInput ? kExitInvalidInput : kExitUnreachable;
    }
  }
  auto memory = ParseLiveMemoryKind(memory_name);
  if (!memory.ok()) {
    std::cerr << "wtx sim: --memory: " << memory.status().message() << "\n";
    return kExitInvalidInput;
  }
  if (transport == "tcp" && memory.value() != LiveMemoryKind::kHost) {
    std::cerr << "wtx sim: --memory " << memory_name
              << " applies to --transport inproc (rank processes use host memory)\n";
    return kExitInvalidInput;
  }
  auto sc = sim::LoadScenarioFile(path);
  if (!sc.ok()) {
    std::cerr << "wtx sim: invalid scenario " << path << ": " << sc.status().message() << "\n";
    return kExitInvalidInput;
  }
  nlohmann::json expect;
  if (!expect_path.empty()) {
    auto e = ReadJsonFileArg("--expect", expect_path);
    if (!e.ok()) {
      std::cerr << "wtx sim: " << e.status().message() << "\n";
      return kExitInvalidInput;
    }
    expect = std::move(e).value();
  }
  if (!journal_dir.empty()) {
    if (Status s = CheckDirectoryArg("--journal-dir", journal_dir, /*must_exist=*/false,
                                     /*must_hold_files=*/false);
        !s.ok()) {
      std::cerr << "wtx sim: " << s.message() << "\n";
      return kExitInvalidInput;
    }
  }
  bool temp = journal_dir.empty();
  if (temp) {
    std::random_device rd;
    journal_dir = (std::filesystem::temp_directory_path() /
                   ("wtx-sim-" + std::to_string(rd()) + std::to_string(rd())))
                      .string();
  }
  Result<nlohmann::json> out = Status::InvalidArgument("unknown transport");
  if (transport == "tcp") {
    sim::TcpSimOptions o;
    o.journal_dir = journal_dir;
    // The rank and coordinator processes are this binary: the build tree's wtx has the daemons'
    // test hooks, the installed one does not (daemon_hooks.h).
    o.test_hooks = DaemonTestHooksBuiltIn();
    o.decision_log = decision_log.url;
    for (const auto& [flag, value] :
         {std::pair<const char*, const std::string&>{"--etcd-ca", decision_log.tls.ca},
          {"--etcd-cert", decision_log.tls.cert},
          {"--etcd-key", decision_log.tls.key}}) {
      if (!value.empty()) {
        o.decision_log_args.push_back(flag);
        o.decision_log_args.push_back(value);
      }
    }
    if (!decision_log.url.empty()) {
      o.decision_log_args.push_back("--decision-log-timeout-ms");
      o.decision_log_args.push_back(std::to_string(decision_log.timeout_ms));
    }
    out = sim::RunScenarioTcp(sc.value(), o);
  } else {
    sim::SimOptions o;
    o.journal_dir = journal_dir;
    o.memory = memory.value();
    out = sim::RunScenario(sc.value(), o);
  }
  if (temp) {
    std::error_code ec;
    std::filesystem::remove_all(journal_dir, ec);
  }
  if (!out.ok()) {
    std::cerr << "wtx sim: " << out.status().ToString() << "\n";
    return ExitCodeFor(out.status());
  }
  std::cout << out.value().dump(pretty ? 1 : -1) << "\n";
  if (!expect_path.empty()) {
    auto fails = sim::CheckExpectations(out.value(), expect);
    for (const auto& f : fails) std::cerr << "EXPECTATION FAILED: " << f << "\n";
    if (!fails.empty()) return kExitFailed;
    std::cerr << "all " << expect.size() << " expectations hold\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterSimCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("sim", "Run a scripted update scenario (spec/scenario.md)");
  auto path = std::make_shared<std::string>();
  auto dir = std::make_shared<std::string>();
  auto expect = std::make_shared<std::string>();
  auto pretty = std::make_shared<bool>(false);
  cmd->add_option("scenario", *path, "Scenario JSON file")->required();
  cmd->add_option("--journal-dir", *dir, "Keep the journals here (DIR/rank-N, DIR/coordinator)");
  cmd->add_option("--expect", *expect, "Check the output against an *.expect.json file");
  cmd->add_flag("--pretty", *pretty, "Indent the output");
  auto transport = std::make_shared<std::string>("inproc");
  cmd->add_option("--transport", *transport,
                  "inproc: one process; tcp: coordinator and ranks as processes on loopback")
      ->check(CLI::IsMember({"inproc", "tcp"}))
      ->capture_default_str();
  auto memory = std::make_shared<std::string>("host");
  cmd->add_option("--memory", *memory,
                  "where each rank's live bytes are: host; device (GPU memory and kernels; "
                  "CUDA builds with a GPU); reference-device (the device path on the kernels' "
                  "CPU references)")
      ->capture_default_str();
  auto decision_log = std::make_shared<DecisionLogFlags>();
  AddDecisionLogFlags(cmd, decision_log.get());
  cmd->callback([=] {
    *exit_code = RunSim(*path, *dir, *expect, *pretty, *transport, *memory, *decision_log);
  });
}

}  // namespace wtx::cli
