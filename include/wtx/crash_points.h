// Crash points: a test hook that lets a harness kill a participant or the coordinator at a
// named protocol point ("before_prepare_logged", "after_prepare_logged",
// "before_decision_logged", "after_decision_logged"). The call that reaches an armed point
// returns E_CRASHED and the object is dead from then on, as if its process had been killed
// there. Production code leaves ParticipantOptions/CoordinatorOptions::crash_points null.
//
// Thread-safety: CrashPoints implementations must be safe to call from the participant's or
// coordinator's calling threads; ArmedCrashPoint is (an internal mutex).
#pragma once

#include <mutex>
#include <string>
#include <string_view>

namespace wtx {

class CrashPoints {
 public:
  virtual ~CrashPoints() = default;
  // True when the process should die at `point` now.
  virtual bool ShouldCrash(std::string_view point) = 0;
};

// Fires once at the armed point, then forgets it: the one crash-point implementation of the
// simulator, the torture harness and the `wtx coordinator` / `wtx rank` processes.
class ArmedCrashPoint : public CrashPoints {
 public:
  // Arms `point` (replacing any armed point) and forgets an earlier firing.
  void Arm(std::string point);
  // Disarms; true when the point fired since it was armed (the firing is then forgotten).
  bool Disarm();
  bool ShouldCrash(std::string_view point) override;

 private:
  std::mutex mu_;
  std::string point_;  // empty: disarmed
  bool fired_ = false;
};

}  // namespace wtx
