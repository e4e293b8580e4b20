#include "src/conformance/checkpoint_load.h"

#include <filesystem>
#include <set>

#include "src/checkpoint/checkpoint_slices.h"
#include "wtx/hf_manifest.h"

namespace wtx {

namespace {

using nlohmann::json;

constexpr const char* kLoadTx = "load";

Result<std::vector<ManifestPtr>> RankManifests(const CheckpointLoadRequest& r) {
  if (r.tp < 1) return Status::InvalidArgument("--tp " + std::to_string(r.tp) + ": must be >= 1");
  std::vector<ManifestPtr> out;
  for (int rank = 0; rank < r.tp; ++rank) {
    HfManifestOptions o;
    o.tp = r.tp;
    o.rank = rank;
    o.dtype = r.dtype;
    auto m = ManifestFromHfConfigFile(r.hf_config, o);
    if (!m.ok()) return m.status();
    out.push_back(std::move(m).value());
  }
  return out;
}

std::string Quoted(const std::vector<std::string>& names, size_t limit) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > limit) s += " and " + std::to_string(names.size() - limit) + " more";
  return s;
}

SourceLookup LookupIn(const SafetensorsCheckpoint& c) {
  return [&c](std::string_view name) -> std::optional<SourceTensor> {
    const CheckpointTensor* t = c.Find(name);
    if (!t) return std::nullopt;
    return SourceTensor{t->name, t->shape, t->dtype, t->bytes.data(), t->bytes.size()};
  };
}

std::vector<const Manifest*> Raw(const std::vector<ManifestPtr>& ms) {
  std::vector<const Manifest*> out;
  out.reserve(ms.size());
  for (const auto& m : ms) out.push_back(m.get());
  return out;
}

}  // namespace

Result<CheckpointLoadPlan> PlanCheckpointLoad(const CheckpointLoadRequest& request) {
  CheckpointLoadPlan plan;
  std::error_code ec;
  plan.checkpoint = std::filesystem::absolute(request.checkpoint, ec).string();
  if (ec) plan.checkpoint = request.checkpoint;
  WTX_ASSIGN_OR_RETURN(manifests, RankManifests(request));
  plan.manifests = std::move(manifests);
  WTX_ASSIGN_OR_RETURN(ckpt, SafetensorsCheckpoint::Open(plan.checkpoint));
  std::set<std::string> missing;
  for (const ManifestPtr& m : plan.manifests) {
    WTX_ASSIGN_OR_RETURN(miss, CheckCheckpointForManifest(*ckpt, *m));
    missing.insert(miss.begin(), miss.end());
  }
  plan.missing.assign(missing.begin(), missing.end());
  if (request.expect_version && plan.missing.empty()) {
    WTX_ASSIGN_OR_RETURN(e, ComputeExpectedVersion(Raw(plan.manifests), LookupIn(*ckpt)));
    plan.expected = std::move(e);
  }
  sim::Scenario& sc = plan.scenario;
  sc.ranks = request.tp;
  sc.manifests = plan.manifests;
  sim::Step begin;
  begin.op = "begin";
  begin.tx = kLoadTx;
  begin.begin.tx = kLoadTx;
  begin.begin.kind = TxKind::kFull;
  begin.begin.lineage = request.lineage;
  begin.begin.step = request.step;
  sim::Step load;
  load.op = "load_checkpoint";
  load.value = plan.checkpoint;
  sim::Step refresh;
  refresh.op = "refresh";
  refresh.derived = "*";
  sim::Step commit;
  commit.op = "commit";
  commit.tx = kLoadTx;
  if (plan.expected) {
    commit.expect_version_ref = plan.expected->version;
    commit.commit_options.expect_version = plan.expected->version;
    commit.commit_options.expect_rank_digests = plan.expected->rank_digests;
  }
  sc.steps = {begin, load, refresh, commit};
  for (size_t i = 0; i < sc.steps.size(); ++i) sc.steps[i].index = static_cast<int>(i);
  return plan;
}

json CheckpointLoadOutput(const CheckpointLoadPlan& plan, const json& run) {
  json out = {
      {"tx", kLoadTx}, {"outcome", nullptr}, {"version", nullptr}, {"served_digest", nullptr}};
  const json steps = run.value("steps", json::array());
  const json* failed = nullptr;
  const json* commit = nullptr;
  for (const json& s : steps) {
    if (s.value("op", "") == "commit") commit = &s;
    if (!failed && !s.value("ok", false)) failed = &s;
  }
  if (commit) {
    if (commit->contains("outcome")) out["outcome"] = (*commit)["outcome"];
    if (commit->contains("version")) out["version"] = (*commit)["version"];
    if (commit->contains("served_digest")) out["served_digest"] = (*commit)["served_digest"];
    for (const char* k : {"lineage", "step"}) {
      if (commit->contains(k)) out[k] = (*commit)[k];
    }
    if (commit->contains("votes")) out["votes"] = (*commit)["votes"];
  } else {
    out["outcome"] = "not_begun";
  }
  if (plan.expected) out["expected_version"] = plan.expected->version;
  if (failed) {
    out["error"] = failed->value("error", "");
    out["message"] = failed->value("op", "") + ": " + failed->value("message", "");
  }
  if (!plan.missing.empty()) {
    out["missing"] = plan.missing;
    out["error"] = ErrorCodeName(ErrorCode::kCoverageIncomplete);
    out["message"] = plan.checkpoint + " lacks tensor(s) " + Quoted(plan.missing, 16) +
                     "; the ranks that read them voted no and the load aborted";
  }
  json ranks = json::array();
  for (const json& r : run.value("ranks", json::array())) {
    json jr = {{"rank", r.value("rank", -1)}};
    for (const char* k :
         {"digest", "version", "served_digest", "dirty", "loaded", "serving", "lineage", "step"}) {
      jr[k] = r.value(k, json());
    }
    ranks.push_back(std::move(jr));
  }
  out["ranks"] = std::move(ranks);
  return out;
}

Result<ExpectedVersion> ExpectCheckpointVersion(const CheckpointLoadRequest& request) {
  WTX_ASSIGN_OR_RETURN(manifests, RankManifests(request));
  WTX_ASSIGN_OR_RETURN(ckpt, SafetensorsCheckpoint::Open(request.checkpoint));
  for (const ManifestPtr& m : manifests) {
    WTX_ASSIGN_OR_RETURN(miss, CheckCheckpointForManifest(*ckpt, *m));
    if (!miss.empty()) {
      return Status(ErrorCode::kNotFound,
                    request.checkpoint + " lacks tensor(s) " + Quoted(miss, 16));
    }
  }
  return ComputeExpectedVersion(Raw(manifests), LookupIn(*ckpt));
}

}  // namespace wtx
