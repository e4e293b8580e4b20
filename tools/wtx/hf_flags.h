// The flags that lay out engine ranks from a Hugging Face config.json (`wtx manifest`,
// `wtx plan`): --hf-config, --tp, --ep, --expert-placement, --all2all-backend,
// --dtype, and their checks.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "wtx/hf_manifest.h"
#include "wtx/status.h"

namespace wtx::cli {

struct HfFlags {
  std::string hf_config;
  int tp = 1;
  int ep = 1;
  std::string expert_placement = "linear";
  std::string dtype;
  bool dtype_given = false;  // --dtype was on the command line (an empty value is refused)
  std::string all2all_backend = "allgather_reducescatter";
};

// Adds the six flags to `cmd` (--hf-config required).
void AddHfFlags(CLI::App* cmd, HfFlags* flags);
// The options the flags give (rank 0); kInvalidArgument naming the flag otherwise.
Result<HfManifestOptions> HfOptionsFromFlags(const HfFlags& flags);
// The library names options as the API does ("tp 3 ..."); on the command line they are flags.
std::string FlagMessage(const Status& s);

}  // namespace wtx::cli
