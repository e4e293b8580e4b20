// `wtx load` / `wtx expect`: a safetensors checkpoint loaded as one `full` transaction on the N
// ranks of a tensor-parallel group (manifests from a Hugging Face config), each rank reading its
// own slices by source name, or the version such a load must commit, computed without any rank.
//
// The load is expressed as steps of the scenario runner (simulator.h): begin full, every rank
// reads its slices (the internal rank step `load_checkpoint`, which calls
// WriteCheckpointSlices), every rank refreshes its derived state, commit; so it runs on both
// transports (in process, or rank and coordinator processes over TCP) with the same code.
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/conformance/scenario.h"
#include "wtx/expected_version.h"
#include "wtx/safetensors.h"

namespace wtx {

struct CheckpointLoadRequest {
  std::string checkpoint;  // file, index or folder (SafetensorsCheckpoint::Open)
  std::string hf_config;   // config.json
  int tp = 1;
  std::optional<DType> dtype;  // live dtype (HfManifestOptions::dtype)
  // Compute the expected version first and commit only if the ranks' digests equal it.
  bool expect_version = false;
  // The lineage and step the load commits (docs/fleet.md); "" / nullopt: the ranks' own, the
  // next step.
  std::string lineage;
  std::optional<int64_t> step;
};

struct CheckpointLoadPlan {
  std::string checkpoint;                   // absolute path
  std::vector<ManifestPtr> manifests;       // one per rank
  std::vector<std::string> missing;         // tensors the manifests read that the checkpoint lacks
  std::optional<ExpectedVersion> expected;  // when requested and nothing is missing
  sim::Scenario scenario;                   // the load's steps
};

// Opens and validates the checkpoint against every rank's manifest (shapes, dtypes: errors
// name file and tensor, kInvalidArgument) and builds the steps. Nothing is begun.
Result<CheckpointLoadPlan> PlanCheckpointLoad(const CheckpointLoadRequest& request);

// {"outcome", "version", "tx", "ranks": [{"rank", "digest", "version", "dirty", "loaded",
// "serving"}], and on failure "error", "message", "missing"} from the runner's output.
nlohmann::json CheckpointLoadOutput(const CheckpointLoadPlan& plan, const nlohmann::json& run);

// The version loading `request.checkpoint` must commit, and each rank's digest. Errors as
// PlanCheckpointLoad; a missing tensor is kNotFound naming it.
Result<ExpectedVersion> ExpectCheckpointVersion(const CheckpointLoadRequest& request);

}  // namespace wtx
