#include "src/testing/armed_crash_point.h"

#include <utility>

namespace wtx {

void ArmedCrashPoint::Arm(std::string point) {
  std::lock_guard<std::mutex> l(mu_);
  point_ = std::move(point);
  fired_ = false;
}

bool ArmedCrashPoint::Disarm() {
  std::lock_guard<std::mutex> l(mu_);
  point_.clear();
  const bool fired = fired_;
  fired_ = false;
  return fired;
}

bool ArmedCrashPoint::ShouldCrash(std::string_view point) {
  std::lock_guard<std::mutex> l(mu_);
  if (point_.empty() || point != point_) return false;
  fired_ = true;
  point_.clear();
  return true;
}

}  // namespace wtx
