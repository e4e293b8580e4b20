#include "src/txn/decision_fields.h"

namespace wtx {

void ReadDecision(RecordFields& f, Decision* decision, std::optional<std::string>* version) {
  *decision = f.Enum<Decision>("decision", DecisionFromName, "is not commit, abort or noop")
                  .value_or(Decision::kAbort);
  *version = f.OptString("version");
  if (f.ok() && *decision == Decision::kCommit && !*version) {
    f.Fail("version", "is missing from a commit");
  }
}

std::optional<int64_t> ReadStep(RecordFields& f, std::string_view key) {
  std::optional<int64_t> step = f.OptInt(key);
  if (step && *step < 0) f.Fail(key, "is negative");
  return step;
}

}  // namespace wtx
