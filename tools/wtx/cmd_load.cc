// `wtx load --checkpoint PATH --hf-config C --tp N [--dtype D] [--journal-dir DIR]
//           [--transport inproc|tcp] [--expect-version] [--lineage L] [--step N] [--json]`
// `wtx expect --checkpoint PATH --hf-config C --tp N [--dtype D] [--json]`
//
// load: one `full` transaction on N ranks, each reading its own slices of the safetensors
// checkpoint by source name (checkpoint_load.h); prints the outcome and the version. expect:
// the version such a load must commit and each rank's digest, computed without any journal.
// On a terminal (and without --json) load shows its progress on stderr (progress.h): the
// checkpoint bytes read, rate and time left; in-process transport only (the ranks of
// --transport tcp read in their own processes).
// Exit codes (src/util/exit_codes.h): 0 committed / computed, 1 aborted or failed, 2 invalid
// arguments or checkpoint.
#include <filesystem>
#include <iostream>
#include <random>

#include "src/checkpoint/checkpoint_slices.h"
#include "src/conformance/checkpoint_load.h"
#include "src/conformance/simulator.h"
#include "src/conformance/tcp_simulator.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/progress.h"

namespace wtx::cli {

namespace {

using nlohmann::json;

struct LoadArgs {
  std::string checkpoint;
  std::string hf_config;
  int tp = 1;
  std::string dtype;
  bool dtype_given = false;  // --dtype "" is an unknown dtype, not the default
  std::string journal_dir;
  std::string transport = "inproc";
  bool expect_version = false;
  bool json = false;
  int threads = 0;
  std::string lineage;
  int64_t step = 0;
  CLI::Option* step_option = nullptr;  // --step given: step is the load's
};

int Fail(const char* cmd, const Status& s) {
  std::cerr << "wtx " << cmd << ": " << s.ToString() << "\n";
  // A checkpoint file that cannot be read is the input's fault too.
  return s.code() == ErrorCode::kIOError ? kExitInvalidInput : ExitCodeFor(s);
}

Result<CheckpointLoadRequest> Request(const LoadArgs& a) {
  // Named by their flags before the library reads them (its errors name the paths).
  WTX_RETURN_IF_ERROR(ReadJsonFileArg("--hf-config", a.hf_config).status());
  std::error_code ec;
  if (!std::filesystem::exists(a.checkpoint, ec)) {
    return Status(ErrorCode::kNotFound,
                  "--checkpoint '" + a.checkpoint + "': no such file or directory");
  }
  CheckpointLoadRequest r;
  r.checkpoint = a.checkpoint;
  r.hf_config = a.hf_config;
  r.tp = a.tp;
  r.expect_version = a.expect_version;
  r.lineage = a.lineage;
  if (a.step_option && a.step_option->count() > 0) r.step = a.step;
  if (a.dtype_given) {
    auto d = DTypeFromName(a.dtype);
    if (!d) {
      return Status::InvalidArgument("--dtype: unknown '" + a.dtype +
                                     "' (f32, bf16, f16, fp8_e4m3, i8, u8, i32)");
    }
    r.dtype = *d;
  }
  return r;
}

int RunLoad(const LoadArgs& a) {
  auto req = Request(a);
  if (!req.ok()) return Fail("load", req.status());
  if (!a.journal_dir.empty()) {
    if (Status s = CheckDirectoryArg("--journal-dir", a.journal_dir, /*must_exist=*/false,
                                     /*must_hold_files=*/false);
        !s.ok()) {
      return Fail("load", s);
    }
  }
  auto plan = PlanCheckpointLoad(req.value());
  if (!plan.ok()) return Fail("load", plan.status());
  std::string dir = a.journal_dir;
  const bool temp = dir.empty();
  if (temp) {
    std::random_device rd;
    dir = (std::filesystem::temp_directory_path() /
           ("wtx-load-" + std::to_string(rd()) + std::to_string(rd())))
              .string();
  }
  // Progress on a terminal (progress.h): the bytes the ranks read of the checkpoint (each
  // rank's share is read off the checkpoint's header only when the line is drawn). In process
  // every read counts as it lands; over TCP the rank processes read, and a rank's bytes count
  // when its load step returns.
  const bool wanted = ProgressWanted(a.json);
  std::vector<uint64_t> rank_bytes(plan.value().manifests.size(), 0);
  uint64_t total = 0;
  if (wanted) {
    if (auto ckpt = SafetensorsCheckpoint::Open(plan.value().checkpoint); ckpt.ok()) {
      for (size_t r = 0; r < rank_bytes.size(); ++r) {
        rank_bytes[r] = CheckpointBytesFor(*ckpt.value(), *plan.value().manifests[r]);
        total += rank_bytes[r];
      }
    }
  }
  Progress progress("load", static_cast<int64_t>(total), Progress::Unit::kBytes, wanted);
  Result<json> run = Status::InvalidArgument("unknown transport '" + a.transport + "'");
  if (a.transport == "tcp") {
    sim::TcpSimOptions o;
    o.journal_dir = dir;
    o.test_hooks = false;
    o.threads = a.threads;
    o.on_rank_loaded = [&](int r) {
      if (r >= 0 && static_cast<size_t>(r) < rank_bytes.size()) {
        progress.Add(static_cast<int64_t>(rank_bytes[static_cast<size_t>(r)]));
      }
    };
    run = sim::RunScenarioTcp(plan.value().scenario, o);
  } else if (a.transport == "inproc") {
    sim::SimOptions o;
    o.journal_dir = dir;
    o.threads = a.threads;
    o.on_checkpoint_read = [&progress](uint64_t n) { progress.Add(static_cast<int64_t>(n)); };
    run = sim::RunScenario(plan.value().scenario, o);
  }
  progress.Finish();
  if (temp) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  if (!run.ok()) return Fail("load", run.status());
  const json out = CheckpointLoadOutput(plan.value(), run.value());
  const bool committed = out["outcome"] == "committed";
  if (a.json) {
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "load of " << plan.value().checkpoint << " on " << a.tp << " rank(s): "
              << (out["outcome"].is_string() ? out["outcome"].get<std::string>() : "failed");
    if (committed) std::cout << ", version " << out["version"].get<std::string>();
    if (committed && out.contains("step")) {
      std::cout << ", step " << out["step"].dump();
      if (out.contains("lineage")) std::cout << " of lineage " << out["lineage"].dump();
    }
    std::cout << "\n";
    if (out.contains("error")) {
      std::cout << "  " << out["error"].get<std::string>() << ": "
                << out["message"].get<std::string>() << "\n";
    }
    for (const json& r : out["ranks"]) {
      std::cout << "  rank " << r["rank"] << ": digest "
                << (r["digest"].is_string() ? r["digest"].get<std::string>() : "-")
                << (r["serving"] == true ? ", serving" : ", not serving") << "\n";
    }
  }
  return committed ? kExitOk : kExitFailed;
}

int RunExpect(const LoadArgs& a) {
  auto req = Request(a);
  if (!req.ok()) return Fail("expect", req.status());
  auto e = ExpectCheckpointVersion(req.value());
  if (!e.ok()) return Fail("expect", e.status());
  json ranks = json::array();
  for (size_t r = 0; r < e.value().rank_digests.size(); ++r) {
    ranks.push_back({{"rank", r}, {"digest", e.value().rank_digests[r]}});
  }
  if (a.json) {
    std::cout << json{{"version", e.value().version}, {"ranks", ranks}}.dump() << "\n";
  } else {
    std::cout << "version " << e.value().version << "\n";
    for (const json& r : ranks) {
      std::cout << "  rank " << r["rank"] << ": digest " << r["digest"].get<std::string>() << "\n";
    }
  }
  return kExitOk;
}

void AddCommon(CLI::App* cmd, LoadArgs& a) {
  cmd->add_option("--checkpoint", a.checkpoint,
                  "a .safetensors file, a model.safetensors.index.json, or a folder holding "
                  "either")
      ->required();
  cmd->add_option("--hf-config", a.hf_config, "the model's config.json")->required();
  AddIntOption(cmd, "--tp", &a.tp, kRankCountBounds, "tensor-parallel degree (ranks)")->required();
  cmd->add_option_function<std::string>(
      "--dtype",
      [&a](const std::string& v) {
        a.dtype = v;
        a.dtype_given = true;
      },
      "live dtype (default: the config's torch_dtype, as vLLM's dtype=auto); "
      "checkpoint tensors are converted only when exact "
      "(bf16/f16/fp8_e4m3 -> f32, fp8_e4m3 -> bf16/f16, i8/u8 -> i32)");
  cmd->add_flag("--json", a.json, "print JSON");
}

}  // namespace

void RegisterLoadCommands(CLI::App& app, int* exit_code) {
  auto la = std::make_shared<LoadArgs>();
  auto* load = app.add_subcommand(
      "load", "Load a safetensors checkpoint as one full transaction on --tp ranks");
  AddCommon(load, *la);
  load->add_option("--journal-dir", la->journal_dir,
                   "keep the journals here (a new or empty folder: DIR/rank-N, "
                   "DIR/coordinator); default: a temporary folder, removed afterwards");
  load->add_option("--transport", la->transport,
                   "inproc: one process; tcp: coordinator and ranks as processes on loopback")
      ->check(CLI::IsMember({"inproc", "tcp"}))
      ->capture_default_str();
  load->add_flag("--expect-version", la->expect_version,
                 "compute the version the checkpoint must produce first, and commit only if "
                 "the ranks' digests equal it (E_VERSION_MISMATCH otherwise)");
  AddDataThreadsOption(load, &la->threads);
  load->add_option("--lineage", la->lineage,
                   "the lineage (the policy being trained) the load commits a step of "
                   "(docs/fleet.md)");
  la->step_option = AddIntOption(
      load, "--step", &la->step, 0, INT64_MAX,
      "the step of the lineage the checkpoint is (default: one past the highest committed; a "
      "step at or below a committed one is refused, E_STEP_REGRESSION)");
  load->callback([=] { *exit_code = RunLoad(*la); });

  auto ea = std::make_shared<LoadArgs>();
  auto* expect = app.add_subcommand(
      "expect", "The version loading a safetensors checkpoint on --tp ranks must commit");
  AddCommon(expect, *ea);
  expect->callback([=] { *exit_code = RunExpect(*ea); });
}

}  // namespace wtx::cli
