#include "src/layouts/hf_families.h"

namespace wtx::hf {

namespace {

constexpr Family kFamilies[] = {
#define WTX_HF_FAMILY(model_type, builder) {(model_type), &(builder)},
#include "src/layouts/hf_families.inc"
#undef WTX_HF_FAMILY
};

}  // namespace

std::span<const Family> Families() { return kFamilies; }

const Family* FindFamily(std::string_view model_type) {
  for (const Family& f : kFamilies) {
    if (f.model_type == model_type) return &f;
  }
  return nullptr;
}

}  // namespace wtx::hf
