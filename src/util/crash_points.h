// CrashPoints: the internal hook that lets a test harness kill a participant or the
// coordinator at a named protocol point ("before_prepare_logged", "after_prepare_logged",
// "before_decision_logged", "after_decision_logged"). The call that reaches an armed point
// returns E_CRASHED and the object is dead from then on, as if its process had been killed
// there. Not part of the public API: harnesses pass one through OpenParticipantWithHooks /
// OpenCoordinatorWithHooks (src/txn/test_hooks.h); the usual implementation is
// ArmedCrashPoint (src/testing/armed_crash_point.h, library wtx_testing).
//
// Thread-safety: implementations must be safe to call from the participant's or coordinator's
// calling threads.
#pragma once

#include <string_view>

namespace wtx {

class CrashPoints {
 public:
  virtual ~CrashPoints() = default;
  // True when the process should die at `point` now.
  virtual bool ShouldCrash(std::string_view point) = 0;
};

}  // namespace wtx
