// Xxh3_64: XXH3_64bits (seed 0, default secret) of libxxhash, through the library's run-time
// dispatch (AVX-512, AVX2 or SSE2, chosen once per process by libxxhash) where the installed
// library has it: WTX_HAVE_XXH3_DISPATCH, set by CMake when XXH3_64bits_dispatch links (Debian's
// libxxhash.so has it). The plain XXH3_64bits of a libxxhash built for baseline x86-64 runs
// its SSE2 path: about a third of the AVX2 speed on cache-resident bytes. The digest is the
// same on every path (XXH3's output is fixed by its specification; content_hash_test checks).
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>

#include <xxhash.h>
#ifdef WTX_HAVE_XXH3_DISPATCH
#define XXH_DISPATCH_DISABLE_REPLACE 1  // no macro renaming of XXH3_* in including files
#include <xxh_x86dispatch.h>
#endif

namespace wtx {

inline uint64_t Xxh3_64(const void* data, size_t size) {
#ifdef WTX_HAVE_XXH3_DISPATCH
  return XXH3_64bits_dispatch(data, size);
#else
  return XXH3_64bits(data, size);
#endif
}

}  // namespace wtx
