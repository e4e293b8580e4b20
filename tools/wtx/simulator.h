// Simulator: runs a Scenario with real participants, a real coordinator, the in-process
// transport and real RocksDB journals (DIR/rank-N, DIR/coordinator), each process on its own
// fault-injecting filesystem so that a crash with power loss drops exactly its unsynced data.
// Produces the output document of spec/scenario.md.
//
// Thread-safety: a Simulator is used from one thread.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "scenario.h"

namespace wtx::sim {

struct SimOptions {
  std::string journal_dir;  // must be empty or absent
};

// Runs every step; step failures are part of the output, not errors. Errors are environment
// failures (journal directory unusable).
Result<nlohmann::json> RunScenario(const Scenario& scenario, const SimOptions& options);

}  // namespace wtx::sim
