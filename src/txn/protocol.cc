#include "wtx/protocol.h"

namespace wtx {

std::string_view TxKindName(TxKind kind) {
  switch (kind) {
    case TxKind::kFull:
      return "full";
    case TxKind::kPartial:
      return "partial";
    case TxKind::kDelta:
      return "delta";
  }
  return "full";
}

std::optional<TxKind> TxKindFromName(std::string_view name) {
  if (name == "full") return TxKind::kFull;
  if (name == "partial") return TxKind::kPartial;
  if (name == "delta") return TxKind::kDelta;
  return std::nullopt;
}

std::string_view VerifyModeName(VerifyMode mode) {
  return mode == VerifyMode::kAll ? "all" : "touched";
}

std::optional<VerifyMode> VerifyModeFromName(std::string_view name) {
  if (name == "touched") return VerifyMode::kTouched;
  if (name == "all") return VerifyMode::kAll;
  return std::nullopt;
}

std::string_view DecisionName(Decision d) {
  switch (d) {
    case Decision::kCommit:
      return "commit";
    case Decision::kAbort:
      return "abort";
    case Decision::kNoop:
      return "noop";
  }
  return "abort";
}

std::string_view DecisionOutcomeName(Decision d) {
  switch (d) {
    case Decision::kCommit:
      return "committed";
    case Decision::kAbort:
      return "aborted";
    case Decision::kNoop:
      return "noop";
  }
  return "aborted";
}

std::optional<Decision> DecisionFromName(std::string_view name) {
  if (name == "commit") return Decision::kCommit;
  if (name == "abort") return Decision::kAbort;
  if (name == "noop") return Decision::kNoop;
  return std::nullopt;
}

}  // namespace wtx
