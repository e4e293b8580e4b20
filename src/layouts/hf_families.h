// Internal: the model families of ManifestFromHfConfig, one builder per config.json model_type.
// Each reads its fields from a config.json and lays out one rank into a Builder; errors name the
// config field.
//
// Adding a family: a file src/layouts/hf_<family>.cc defining
// `Status Build<Family>(const ConfigReader&, Builder*)` in namespace wtx::hf, and one line
// `WTX_HF_FAMILY("<model_type>", Build<Family>)` in src/layouts/hf_families.inc (the build picks
// up src/layouts/hf_*.cc by itself). docs/manifest.md walks through an example.
//
// Thread-safety: pure functions over their arguments; the registry is immutable.
#pragma once

#include <span>
#include <string_view>

#include "src/layouts/hf_builder.h"

namespace wtx::hf {

using FamilyBuilder = Status (*)(const ConfigReader& config, Builder* b);

// Declares every registered builder.
#define WTX_HF_FAMILY(model_type, builder) Status builder(const ConfigReader& config, Builder* b);
#include "src/layouts/hf_families.inc"
#undef WTX_HF_FAMILY

struct Family {
  std::string_view model_type;
  FamilyBuilder build;
};

// Every registered family, in hf_families.inc order.
std::span<const Family> Families();
// The family of `model_type`, or null.
const Family* FindFamily(std::string_view model_type);

}  // namespace wtx::hf
