// The transaction layer's view of journal integrity: what the records of a participant's or a
// coordinator's journal mean (replay from empty equals the stored state), plugged into the
// journal layer's structural checks (journal/verify.h: files, write-ahead log, checksums, hash
// chain, sync watermark, identity), which know no record type. Every process that writes a
// journal (Participant::Open, Coordinator::Open) and every reader of a transaction journal
// (`wtx check/log/show/status/replay`, the journal reader) goes through the three gates below,
// so none of them runs on, or returns, history whose replay disagrees with its stored state.
//
// Thread-safety: pure functions of the files / of a Journal the caller does not use
// concurrently; concurrent calls on different journals are safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "journal/journal.h"
#include "journal/verify.h"
#include "wtx/status.h"

namespace wtx {

// Replays every record from empty; returns the rebuilt state (its journal encoding).
Result<nlohmann::json> ReplayState(const Journal& journal);

// State fields only (drops the journal's "seq"/"head" bookkeeping), for comparisons.
nlohmann::json StripBookkeeping(nlohmann::json state);

// Identity role known, replay equals the stored state. OK or kJournalCorrupt naming the first
// inconsistency.
Status CheckJournal(const Journal& journal);

// CheckJournal as the journal layer's content check.
JournalContentCheck TransactionJournalCheck();

// VerifyJournalStore (journal/verify.h) with CheckJournal as its content check: `wtx check`.
JournalCheckReport VerifyJournalDir(const std::string& dir, VerifyOptions options = {});

// OpenTrustedJournalStore with CheckJournal: the gate of every process that writes a journal.
Result<std::unique_ptr<Journal>> OpenTrustedJournal(const std::string& dir,
                                                    const JournalOptions& options,
                                                    std::vector<std::string>* warnings = nullptr);

// OpenVerifiedJournalStore with CheckJournal: a reader that goes through this never returns
// corrupt data.
Result<std::unique_ptr<Journal>> OpenVerifiedReadOnly(const std::string& dir,
                                                      std::vector<std::string>* warnings = nullptr);

}  // namespace wtx
