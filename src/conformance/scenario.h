// Scenario: the `wtx sim` input of spec/scenario.md, parsed and validated. Every error names
// the step and field ("steps[4].kind: unknown kind 'sparse' (full|partial|delta)").
//
// Thread-safety: immutable after parsing.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/conformance/fill.h"
#include "wtx/coordinator.h"
#include "wtx/manifest.h"
#include "wtx/protocol.h"

namespace wtx::sim {

// A rank target: one rank or every rank ("*").
struct RankTarget {
  bool all = true;
  int rank = 0;
};

struct CrashSpec {
  std::string who;  // "coordinator" or a rank number
  int rank = -1;    // when who is a rank
  std::string at;   // commit crash point; empty for the crash op
  bool power_loss = true;
};

struct Step {
  int index = 0;
  std::string op;
  RankTarget target;
  // begin / commit / abort
  std::string tx;
  BeginRequest begin;
  std::string base_ref;  // as written ("$t1" or a version)
  // write
  std::string param;  // "*" allowed
  std::string shard;
  std::string source;  // write: shard selector; patch: the source
  std::optional<Box> box;
  FillSpec fill;
  // patch
  std::vector<int64_t> indices;
  int part = 0, parts = 1;
  // refresh
  std::string derived;
  // set_kernel_identity
  std::string value;
  // commit
  std::set<int> silent;
  std::string expect_version_ref;  // as written ("$t1" or a version); empty: none
  CommitOptions commit_options;    // expect_version_ref resolved by the runner
  std::optional<CrashSpec> crash;  // commit's crash, or the crash/restart op's target
};

struct Scenario {
  int ranks = 1;
  std::vector<ManifestPtr> manifests;  // one per rank
  std::string kernel_identity;
  size_t rollback_budget_bytes = size_t{1} << 30;
  std::vector<Step> steps;
};

// `base_dir` resolves relative paths (the scenario file's folder).
Result<Scenario> ParseScenario(const nlohmann::json& j, const std::string& base_dir);
Result<Scenario> LoadScenarioFile(const std::string& path);

}  // namespace wtx::sim
