// ArmTestCrashPoint: test_crash_at of Participant.open and Coordinator.open. Included only by
// py_participant.cc and py_coordinator.cc, the two sources compiled once per build of the
// extension (cmake/wtx_python.cmake): with WTX_PY_TEST_HOOKS in the build tree's module, without
// in the installed one; every other source is shared by both and never sees either definition.
#pragma once

#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "py_binding.h"

namespace wtx::python {

#ifdef WTX_PY_TEST_HOOKS
// Kills the process (exit status 137, as SIGKILL) at an armed protocol point
// ("before_prepare_logged", "after_prepare_logged", "before_decision_logged",
// "after_decision_logged"): the fault injection of `test_crash_at` (a real process death, for
// multi-process tests), as `wtx rank --test-hooks` offers over its control connection. Only in
// the build tree's module (target wtx_python); the installed one (wtx_python_installable, what
// `pip install` ships) is compiled without it.
class ExitAtCrashPoint : public CrashPoints {
 public:
  explicit ExitAtCrashPoint(std::string point) : point_(std::move(point)) {}
  bool ShouldCrash(std::string_view point) override {
    if (point == point_) ::_exit(137);
    return false;
  }

 private:
  std::string point_;
};

inline std::unique_ptr<CrashPoints> ArmTestCrashPoint(const std::optional<std::string>& point) {
  if (!point) return nullptr;
  return std::make_unique<ExitAtCrashPoint>(*point);
}
#else
// The installed module has no fault injection: test_crash_at is refused by name.
inline std::unique_ptr<CrashPoints> ArmTestCrashPoint(const std::optional<std::string>& point) {
  if (point) {
    Raise(Status::InvalidArgument(
        "test_crash_at: this wtx is the installed module, which has no crash points (they "
        "exist only in the build tree's test module, build/python)"));
  }
  return nullptr;
}
#endif

}  // namespace wtx::python
