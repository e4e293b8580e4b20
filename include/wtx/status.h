// Status and Result<T>: how every wtx API call reports success or failure.
//
// A Status is either OK or carries an ErrorCode and a human-readable message that names what
// was wrong (step, field, parameter, shard). The protocol error codes (E_*) are the ones fixed
// by spec/scenario.md; the remaining codes (kInvalidArgument, kIOError, ...) describe misuse
// and environment failures. No wtx API throws across its boundary.
//
// Thread-safety: Status and Result are values; distinct objects may be used from distinct
// threads without synchronization.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace wtx {

enum class ErrorCode {
  kOk = 0,
  // Protocol errors, spelled as in spec/scenario.md.
  kBaseMismatch,
  kDirty,
  kManifestMismatch,
  kKernelIdentityChanged,
  kNoTx,
  kTxActive,
  kUnknownParam,
  kOutOfRange,
  kOutOfScope,
  kBadWrite,
  kDuplicateWrite,
  kLayoutMismatch,
  kCoverageIncomplete,
  kStaleDerived,
  kVoteNo,
  kTimeout,
  kCrashed,
  kJournalCorrupt,
  // Non-protocol errors.
  kInvalidArgument,
  kIOError,
  kNotFound,
  kBudgetExceeded,
  // Added later (kept at the end so that numbering of older codes never changes).
  kUndeclaredWrite,         // E_UNDECLARED_WRITE: live bytes changed without a declared write
  kVersionMismatch,         // E_VERSION_MISMATCH: a prepared digest differs from the expected one
  kStaleCoordinator,        // E_STALE_COORDINATOR: a request or decision from an older leader epoch
  kDecisionLogUnavailable,  // E_DECISION_LOG_UNAVAILABLE: the decision log cannot be reached
  kStorageMoved,   // E_STORAGE_MOVED: a parameter's storage moved, shrank, was freed or re-laid out
  kUnknownSource,  // E_UNKNOWN_SOURCE: no rank of the model has a source tensor of that name
  kStepRegression,   // E_STEP_REGRESSION: a step at or below the one committed in the lineage
  kLineageMismatch,  // E_LINEAGE_MISMATCH: another lineage (or model) than the journal's
};

// "E_BASE_MISMATCH", ... for protocol codes; "INVALID_ARGUMENT", ... for the others.
std::string_view ErrorCodeName(ErrorCode code);
// Inverse of ErrorCodeName; nullopt for an unknown name.
std::optional<ErrorCode> ErrorCodeFromName(std::string_view name);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status Error(ErrorCode code, std::string message) {
    return Status(code, std::move(message));
  }
  static Status InvalidArgument(std::string message) {
    return Status(ErrorCode::kInvalidArgument, std::move(message));
  }
  static Status IOError(std::string message) {
    return Status(ErrorCode::kIOError, std::move(message));
  }
  static Status Corruption(std::string message) {
    return Status(ErrorCode::kJournalCorrupt, std::move(message));
  }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string_view code_name() const { return ErrorCodeName(code_); }
  // "E_DIRTY: rank 1 is dirty" (or "OK").
  std::string ToString() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// A value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "a Result built from a Status must carry an error");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

#define WTX_RETURN_IF_ERROR(expr) \
  do {                            \
    ::wtx::Status _st = (expr);   \
    if (!_st.ok()) return _st;    \
  } while (0)

// Declares `lhs` from a Result expression, returning its Status on error.
#define WTX_ASSIGN_OR_RETURN(lhs, expr)                   \
  auto lhs##_result_ = (expr);                            \
  if (!lhs##_result_.ok()) return lhs##_result_.status(); \
  auto lhs = std::move(lhs##_result_).value()  // NOLINT(bugprone-macro-parentheses): a name

}  // namespace wtx
