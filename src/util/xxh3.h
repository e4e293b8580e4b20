// Xxh3_64: XXH3_64bits (seed 0, default secret) of libxxhash, through the library's run-time
// dispatch (AVX-512, AVX2 or SSE2, chosen once per process by libxxhash) where the installed
// library has it: WTX_HAVE_XXH3_DISPATCH, set by CMake when XXH3_64bits_dispatch links (Debian's
// libxxhash.so has it). The plain XXH3_64bits of a libxxhash built for baseline x86-64 runs
// its SSE2 path: about a third of the AVX2 speed on cache-resident bytes. The digest is the
// same on every path (XXH3's output is fixed by its specification; content_hash_test checks).
//
// Thread-safety: a pure function; an Xxh3Stream has one owner.
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

// The same digest over bytes given in pieces, in order: Digest() equals Xxh3_64 of the
// concatenation since the last Reset() (XXH3's streaming form is specified to match its
// one-shot form). The state lives on the heap (libxxhash keeps its layout private).
class Xxh3Stream {
 public:
  Xxh3Stream() : state_(XXH3_createState()) { Reset(); }
  ~Xxh3Stream() { XXH3_freeState(state_); }
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void Reset() { XXH3_64bits_reset(state_); }
  void Update(const void* data, size_t size) {
#ifdef WTX_HAVE_XXH3_DISPATCH
    XXH3_64bits_update_dispatch(state_, data, size);
#else
    XXH3_64bits_update(state_, data, size);
#endif
  }
  uint64_t Digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

}  // namespace wtx
