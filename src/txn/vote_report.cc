// The names of a coordinator's vote kinds (VoteReport::Kind, wtx/coordinator.h), as logged,
// reported by `wtx` and carried by the control codec.
#include "wtx/coordinator.h"

namespace wtx {

std::string_view VoteKindName(VoteReport::Kind kind) {
  switch (kind) {
    case VoteReport::Kind::kYes:
      return "yes";
    case VoteReport::Kind::kNo:
      return "no";
    case VoteReport::Kind::kTimeout:
      return "timeout";
    case VoteReport::Kind::kCrashed:
      return "crashed";
  }
  return "crashed";
}

std::optional<VoteReport::Kind> VoteKindFromName(std::string_view name) {
  for (auto k : {VoteReport::Kind::kYes, VoteReport::Kind::kNo, VoteReport::Kind::kTimeout,
                 VoteReport::Kind::kCrashed}) {
    if (VoteKindName(k) == name) return k;
  }
  return std::nullopt;
}

}  // namespace wtx
