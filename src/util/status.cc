#include "wtx/status.h"

namespace wtx {
namespace {

struct CodeName {
  ErrorCode code;
  std::string_view name;
};

constexpr CodeName kNames[] = {
    {ErrorCode::kOk, "OK"},
    {ErrorCode::kBaseMismatch, "E_BASE_MISMATCH"},
    {ErrorCode::kDirty, "E_DIRTY"},
    {ErrorCode::kManifestMismatch, "E_MANIFEST_MISMATCH"},
    {ErrorCode::kKernelIdentityChanged, "E_KERNEL_IDENTITY_CHANGED"},
    {ErrorCode::kNoTx, "E_NO_TX"},
    {ErrorCode::kTxActive, "E_TX_ACTIVE"},
    {ErrorCode::kUnknownParam, "E_UNKNOWN_PARAM"},
    {ErrorCode::kOutOfRange, "E_OUT_OF_RANGE"},
    {ErrorCode::kOutOfScope, "E_OUT_OF_SCOPE"},
    {ErrorCode::kBadWrite, "E_BAD_WRITE"},
    {ErrorCode::kDuplicateWrite, "E_DUPLICATE_WRITE"},
    {ErrorCode::kLayoutMismatch, "E_LAYOUT_MISMATCH"},
    {ErrorCode::kCoverageIncomplete, "E_COVERAGE_INCOMPLETE"},
    {ErrorCode::kStaleDerived, "E_STALE_DERIVED"},
    {ErrorCode::kVoteNo, "E_VOTE_NO"},
    {ErrorCode::kTimeout, "E_TIMEOUT"},
    {ErrorCode::kCrashed, "E_CRASHED"},
    {ErrorCode::kJournalCorrupt, "E_JOURNAL_CORRUPT"},
    {ErrorCode::kInvalidArgument, "INVALID_ARGUMENT"},
    {ErrorCode::kIOError, "IO_ERROR"},
    {ErrorCode::kNotFound, "NOT_FOUND"},
    {ErrorCode::kBudgetExceeded, "E_ROLLBACK_BUDGET"},
    {ErrorCode::kUndeclaredWrite, "E_UNDECLARED_WRITE"},
    {ErrorCode::kStorageMoved, "E_STORAGE_MOVED"},
    {ErrorCode::kUnknownSource, "E_UNKNOWN_SOURCE"},
    {ErrorCode::kVersionMismatch, "E_VERSION_MISMATCH"},
    {ErrorCode::kStaleCoordinator, "E_STALE_COORDINATOR"},
    {ErrorCode::kDecisionLogUnavailable, "E_DECISION_LOG_UNAVAILABLE"},
    {ErrorCode::kStepRegression, "E_STEP_REGRESSION"},
    {ErrorCode::kLineageMismatch, "E_LINEAGE_MISMATCH"},
};

}  // namespace

std::string_view ErrorCodeName(ErrorCode code) {
  for (const auto& e : kNames) {
    if (e.code == code) return e.name;
  }
  return "UNKNOWN";
}

std::optional<ErrorCode> ErrorCodeFromName(std::string_view name) {
  for (const auto& e : kNames) {
    if (e.name == name) return e.code;
  }
  return std::nullopt;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(ErrorCodeName(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

}  // namespace wtx
