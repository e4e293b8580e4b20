#include "src/txn/journal_check.h"

#include "src/txn/coordinator_records.h"
#include "src/txn/participant_state.h"

namespace wtx {

using nlohmann::json;

namespace {

Result<CoordinatorState> ReplayCoordinator(const Journal& journal) {
  CoordinatorReplay replay;
  Status s = journal.ForEachRecord([&](const json& r) { return replay.Apply(r); });
  if (!s.ok()) return s;
  return replay.state();
}

}  // namespace

Result<json> ReplayState(const Journal& journal) {
  if (journal.identity().role == "coordinator") {
    WTX_ASSIGN_OR_RETURN(st, ReplayCoordinator(journal));
    return EncodeCoordinatorState(st);
  }
  WTX_ASSIGN_OR_RETURN(st, ReplayParticipantJournal(journal));
  return st ? EncodeParticipantState(*st) : json();
}

json StripBookkeeping(json state) {
  if (state.is_object()) {
    state.erase("seq");
    state.erase("head");
  }
  return state;
}

Status CheckJournal(const Journal& journal) {
  const auto& id = journal.identity();
  if (id.role == "participant") return CheckParticipantState(journal);
  if (id.role != "coordinator") {
    return Status::Corruption(journal.dir() + ": unknown role '" + id.role + "'");
  }
  WTX_ASSIGN_OR_RETURN(replayed, ReplayCoordinator(journal));
  if (journal.state().is_null()) {
    if (journal.last_seq() == 0) return Status::OK();
    return Status::Corruption(journal.dir() + ": records but no stored state");
  }
  WTX_ASSIGN_OR_RETURN(stored, DecodeCoordinatorState(journal.state(), journal.dir() + ": state"));
  if (replayed != stored) {
    return Status::Corruption(
        journal.dir() + ": replayed state " + EncodeCoordinatorState(replayed).dump() +
        " differs from the stored state " + EncodeCoordinatorState(stored).dump());
  }
  return Status::OK();
}

JournalContentCheck TransactionJournalCheck() { return CheckJournal; }

JournalCheckReport VerifyJournalDir(const std::string& dir, VerifyOptions options) {
  options.content_check = CheckJournal;
  return VerifyJournalStore(dir, options);
}

Result<std::unique_ptr<Journal>> OpenTrustedJournal(const std::string& dir,
                                                    const JournalOptions& options,
                                                    std::vector<std::string>* warnings) {
  return OpenTrustedJournalStore(dir, options, CheckJournal, warnings);
}

Result<std::unique_ptr<Journal>> OpenVerifiedReadOnly(const std::string& dir,
                                                      std::vector<std::string>* warnings) {
  return OpenVerifiedJournalStore(dir, CheckJournal, warnings);
}

}  // namespace wtx
