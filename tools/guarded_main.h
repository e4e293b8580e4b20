// GuardedMain: the body of a tool's main() with a last-resort catch. The library reports errors
// as Status; an exception reaching main is a bug (or out of memory), and the tool says so on
// stderr, naming itself, and exits kExitInternal (70, EX_SOFTWARE) instead of aborting without a
// word.
//
// Thread-safety: call from main() only.
#pragma once

#include <cstdio>
#include <exception>

#include "src/util/exit_codes.h"

namespace wtx::tools {

template <typename Body>
int GuardedMain(const char* tool, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: internal error: unknown exception\n", tool);
  }
  return kExitInternal;
}

}  // namespace wtx::tools
