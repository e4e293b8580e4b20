// ArmedCrashPoint: fires once at the armed point, then forgets it — the one CrashPoints
// implementation of the simulator, the torture harness and the `wtx coordinator` /
// `wtx rank` processes (--test-hooks). Library wtx_testing (never installed).
//
// Thread-safety: all methods are safe to call concurrently (an internal mutex).
#pragma once

#include <mutex>
#include <string>
#include <string_view>

#include "src/util/crash_points.h"
#include "src/util/thread_annotations.h"

namespace wtx {

class ArmedCrashPoint : public CrashPoints {
 public:
  // Arms `point` (replacing any armed point) and forgets an earlier firing.
  void Arm(std::string point);
  // Disarms; true when the point fired since it was armed (the firing is then forgotten).
  bool Disarm();
  bool ShouldCrash(std::string_view point) override;

 private:
  std::mutex mu_;
  std::string point_ GUARDED_BY(mu_);  // empty: disarmed
  bool fired_ GUARDED_BY(mu_) = false;
};

}  // namespace wtx
