// `wtx plan`: the transfer plan of an M-to-N update (docs/m2n.md) from a sharded trainer into
// the engine ranks of a Hugging Face model, as a summary or as the plan's JSON.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/util/file_util.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/hf_flags.h"
#include "tools/wtx/progress.h"
#include "tools/wtx/size_format.h"
#include "wtx/transfer_plan.h"

namespace wtx::cli {
namespace {

struct PlanArgs {
  HfFlags hf;
  std::string trainer;
  std::string out;
  bool out_given = false;  // --out was on the command line (an empty path is refused)
  bool json = false;
};

int PlanFail(const std::string& message) {
  std::cerr << "wtx plan: " << message << "\n";
  return kExitInvalidInput;
}

double PlanMillisSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Bytes of every engine rank's live elements that a source feeds (all but vocabulary padding).
int64_t SourcedLiveBytes(const std::vector<ManifestPtr>& engine) {
  int64_t total = 0;
  for (const ManifestPtr& m : engine) {
    for (const ParamSpec& p : m->params()) {
      for (const ShardSpec& s : p.shards) {
        if (!s.padding) total += NumElements(s.box) * static_cast<int64_t>(DTypeSize(p.dtype));
      }
    }
  }
  return total;
}

std::string BytesRange(const std::vector<int64_t>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return Grouped(*lo) + " .. " + Grouped(*hi) + " bytes";
}

int RunPlan(const PlanArgs& a) {
  auto options_or = HfOptionsFromFlags(a.hf);
  if (!options_or.ok()) return PlanFail(options_or.status().message());
  if (a.out_given) {
    // Refused before any work: an empty path, a FIFO (which would block until a reader came),
    // a directory or a device.
    Status out = CheckWritableFileArg(a.out, "--out");
    if (!out.ok()) return PlanFail(out.message());
  }
  const HfManifestOptions& options = *options_or;
  auto read = ReadJsonFileArg("--hf-config", a.hf.hf_config);
  if (!read.ok()) return PlanFail(read.status().message());
  const nlohmann::json& config = read.value();
  const auto t0 = std::chrono::steady_clock::now();
  auto engine_or = ManifestsOfGroup(config, options);
  if (!engine_or.ok()) return PlanFail(FlagMessage(engine_or.status()));
  const std::vector<ManifestPtr>& engine = *engine_or;
  auto trainer = ParseTrainerSpec(a.trainer, &config, options);
  if (!trainer.ok()) return PlanFail("--trainer: " + trainer.status().message());
  const double layout_ms = PlanMillisSince(t0);
  const auto t1 = std::chrono::steady_clock::now();
  // Progress on a terminal (progress.h): the engine ranks planned.
  Progress progress("plan: engine ranks planned", static_cast<int64_t>(engine.size()),
                    Progress::Unit::kItems, ProgressWanted(a.json));
  auto plan = PlanTransfer(**trainer, engine, [&progress](size_t planned, size_t ranks) {
    progress.Set(static_cast<int64_t>(planned), static_cast<int64_t>(ranks));
  });
  progress.Finish();
  const double plan_ms = PlanMillisSince(t1);
  if (!plan.ok()) return PlanFail(plan.status().message());
  if (!a.out.empty()) {
    const std::string text = plan->ToJsonText();
    const std::string_view chunks[] = {text, "\n"};
    Status written = WriteRegularFile(a.out, "--out", chunks);
    if (!written.ok()) return PlanFail(written.message());
  }
  if (a.json) {
    std::cout << plan->ToJsonText() << "\n";
    return kExitOk;
  }
  const TransferPlan::Sizes sizes = plan->BytesByRank();
  const int64_t bytes = sizes.total;
  const int64_t live = SourcedLiveBytes(engine);
  std::ostringstream o;
  o << config.value("model_type", "") << " (" << a.hf.hf_config << "): trainer " << a.trainer
    << " (" << plan->trainer_ranks << " ranks) -> engine tp " << a.hf.tp;
  if (a.hf.ep > 1) o << ", ep " << a.hf.ep;
  o << " (" << plan->engine_ranks << " ranks)\n";
  o << "pieces         " << Grouped(static_cast<int64_t>(plan->pieces.size())) << " over "
    << Grouped(static_cast<int64_t>(plan->sources.size())) << " source tensors\n";
  o << "bytes          " << Grouped(bytes) << " (" << GiB(bytes) << "); engine live bytes fed "
    << "by sources " << Grouped(live) << (bytes == live ? ": equal" : ": DIFFERENT") << "\n";
  o << "per trainer    " << BytesRange(sizes.per_trainer) << "\n";
  o << "per engine     " << BytesRange(sizes.per_engine) << "\n";
  char times[128];
  std::snprintf(times, sizeof times, "planned in     %.1f ms (layouts %.1f ms)\n", plan_ms,
                layout_ms);
  o << times;
  std::cout << o.str();
  // Every element is planned exactly once (transfer_plan.h): a difference is a wtx bug.
  return bytes == live ? kExitOk : kExitInternal;
}

}  // namespace

void RegisterPlanCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Plan an M-to-N update: which trainer rank sends which piece of each source tensor to "
      "which engine rank (docs/m2n.md)");
  AddHfFlags(cmd, &args->hf);
  cmd->add_option("--trainer", args->trainer,
                  "the trainer's sharding: fsdp:K, tp:K, ep:E or tp:T,ep:E")
      ->required();
  cmd->add_flag("--json", args->json, "print the plan as JSON instead of a summary");
  CLI::Option* out = cmd->add_option("--out", args->out, "also write the plan's JSON to this file");
  cmd->callback([args, out, exit_code] {
    args->out_given = out->count() > 0;
    *exit_code = RunPlan(*args);
  });
}

}  // namespace wtx::cli
