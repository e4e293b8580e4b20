// libFuzzer entry point; WTX_FUZZ_TARGET (scenario | manifest | record | safetensors) picks the
// parser. Built only with -DWTX_FUZZ=ON (clang): see tests/fuzz/CMakeLists.txt.
#include "tests/fuzz/fuzz_targets.h"

#define WTX_CAT2(a, b) a##b
#define WTX_CAT(a, b) WTX_CAT2(a, b)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  WTX_CAT(wtx::fuzz::Fuzz, WTX_FUZZ_TARGET)(data, size);
  return 0;
}
