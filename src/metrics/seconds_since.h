// SecondsSince: how the metrics time a phase (the steady clock: durations, not dates).
#pragma once

#include <chrono>

namespace wtx::metrics {

// Seconds since `t0` on the steady clock.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace wtx::metrics
