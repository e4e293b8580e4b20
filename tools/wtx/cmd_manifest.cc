// `wtx manifest`: one rank's manifest generated from a Hugging Face config.json, as JSON or as
// a size summary.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "src/util/file_util.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/hf_flags.h"
#include "tools/wtx/size_format.h"
#include "wtx/hf_manifest.h"

namespace wtx::cli {
namespace {

using nlohmann::json;

struct ManifestArgs {
  HfFlags hf;
  int rank = 0;
  bool json = false;
  bool summary = false;
};

int Fail(const std::string& message) {
  std::cerr << "wtx manifest: " << message << "\n";
  return kExitInvalidInput;
}

// The label column of the human-readable summary.
std::string Pad(std::string label) {
  if (label.size() < 14) label.resize(14, ' ');
  return label;
}

json SummaryJson(const ManifestSummary& s) {
  return {{"params", s.params}, {"bytes", s.bytes}, {"tensors", s.tensors}, {"shards", s.shards}};
}

std::string SummaryLine(const std::string& label, const ManifestSummary& s) {
  std::ostringstream o;
  o << label << Grouped(s.params) << " params, " << Grouped(s.bytes) << " bytes (" << GiB(s.bytes)
    << "), " << Grouped(static_cast<int64_t>(s.tensors)) << " tensors, "
    << Grouped(static_cast<int64_t>(s.shards)) << " shards\n";
  return o.str();
}

// The checkpoint as the whole group reads it: every source tensor once, at the dtype of the
// parameter it feeds. Without expert parallelism every rank names every source (only the
// boxes differ), so one rank suffices; with it, each rank names only its own experts.
Result<ManifestSummary> CheckpointSummary(const Manifest& m, const nlohmann::json& config,
                                          const HfManifestOptions& options) {
  ManifestSummary ckpt;
  std::unordered_set<std::string> seen;
  auto add = [&](const Manifest& r) {
    for (const ParamSpec& p : r.params()) {
      for (const ShardSpec& s : p.shards) {
        if (s.padding || !seen.insert(s.source).second) continue;
        const int64_t n = NumElements(s.source_shape);
        ckpt.params += n;
        ckpt.bytes += n * static_cast<int64_t>(DTypeSize(p.dtype));
        ++ckpt.tensors;
      }
    }
  };
  add(m);
  if (options.ep > 1) {
    for (int r = 0; r < options.ep; ++r) {
      if (r == options.rank) continue;
      HfManifestOptions o = options;
      o.rank = r;
      WTX_ASSIGN_OR_RETURN(other, ManifestFromHfConfig(config, o));
      add(*other);
    }
  }
  return ckpt;
}

int PrintSummary(const Manifest& m, const ManifestArgs& a, const nlohmann::json& config,
                 const HfManifestOptions& options, const std::string& placement_why) {
  const std::string model_type = config.value("model_type", "");
  const ManifestSummary rank = Summarize(m);
  // Every rank of the group has the same parameter shapes and dtypes (one fingerprint), so the
  // group's total is its size times one rank's.
  const int group = options.GroupSize();
  ManifestSummary total;
  total.params = rank.params * group;
  total.bytes = rank.bytes * group;
  total.tensors = rank.tensors * group;
  total.shards = rank.shards * group;
  auto ckpt_or = CheckpointSummary(m, config, options);
  if (!ckpt_or.ok()) return Fail(FlagMessage(ckpt_or.status()));
  const ManifestSummary& ckpt = *ckpt_or;
  std::map<std::string, size_t> dtypes;
  for (const ParamSpec& p : m.params()) ++dtypes[std::string(DTypeName(p.dtype))];
  if (a.json) {
    json out = {
        {"hf_config", a.hf.hf_config},
        {"model_type", model_type},
        {"tp", a.hf.tp},
        {"ep", a.hf.ep},
        {"expert_placement",
         a.hf.ep > 1 ? json{{"applied", std::string(ExpertPlacementName(options.expert_placement))},
                            {"requested", a.hf.expert_placement},
                            {"why", placement_why}}
                     : json()},
        {"rank", a.rank},
        {"ranks", group},
        {"fingerprint", m.Fingerprint()},
        {"dtypes", dtypes},
        {"per_rank", SummaryJson(rank)},
        {"total", SummaryJson(total)},
        {"checkpoint",
         {{"params", ckpt.params}, {"bytes", ckpt.bytes}, {"tensors", ckpt.tensors}}}};
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::ostringstream o;
  o << model_type << " (" << a.hf.hf_config << "), tp " << a.hf.tp;
  if (a.hf.ep > 1)
    o << ", ep " << a.hf.ep << " (" << ExpertPlacementName(options.expert_placement) << ")";
  o << ", rank " << a.rank << "\n";
  o << Pad("fingerprint") << m.Fingerprint() << "\n";
  o << Pad("dtypes");
  bool first = true;
  for (const auto& [name, n] : dtypes) {
    o << (first ? "" : ", ") << name << " x " << n;
    first = false;
  }
  o << " tensors\n";
  o << SummaryLine(Pad("rank " + std::to_string(a.rank)), rank);
  o << SummaryLine(Pad("all " + std::to_string(group) + " ranks"), total);
  o << Pad("checkpoint") << Grouped(ckpt.params) << " params, " << Grouped(ckpt.bytes) << " bytes ("
    << GiB(ckpt.bytes) << "), " << Grouped(static_cast<int64_t>(ckpt.tensors))
    << " source tensors (each once)\n";
  std::cout << o.str();
  return kExitOk;
}

int RunManifest(const ManifestArgs& a) {
  auto options_or = HfOptionsFromFlags(a.hf);
  if (!options_or.ok()) return Fail(options_or.status().message());
  HfManifestOptions options = *options_or;
  options.rank = a.rank;
  auto read = ReadJsonFileArg("--hf-config", a.hf.hf_config);
  if (!read.ok()) return Fail(read.status().message());
  const json& config = read.value();
  auto m = ManifestFromHfConfig(config, options);
  if (!m.ok()) return Fail(FlagMessage(m.status()));
  // Which experts a rank holds is vLLM's choice, not only the flag's: say which and why.
  std::string why;
  const ExpertPlacement applied = EffectiveExpertPlacement(config, options, &why);
  if (a.hf.ep > 1) std::cerr << "wtx manifest: expert placement " << why << "\n";
  options.expert_placement = applied;
  if (a.summary) return PrintSummary(**m, a, config, options, why);
  json out = (*m)->ToJson();
  out["fingerprint"] = (*m)->Fingerprint();

  std::cout << out.dump() << "\n";
  return kExitOk;
}

}  // namespace

void RegisterManifestCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ManifestArgs>();
  CLI::App* cmd = app.add_subcommand(
      "manifest", "Print one rank's manifest generated from a Hugging Face config.json");
  AddHfFlags(cmd, &args->hf);
  AddIntOption(cmd, "--rank", &args->rank, kRankIdBounds,
               "rank in the group, 0 <= rank < tp (ep with --ep)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "JSON output (the default without --summary)");
  cmd->add_flag("--summary", args->summary,
                "parameter counts and bytes of this rank, of all ranks and of the checkpoint");
  cmd->callback([args, exit_code] { *exit_code = RunManifest(*args); });
}

}  // namespace wtx::cli
