// History: the audit view of a journal — one entry per transaction with its kind, base,
// resulting version, outcome, reason, coverage summary and per-phase timings — and the
// integrity check that replays the journal and compares it with the stored state.
//
// Thread-safety: functions read a Journal the caller does not use concurrently.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "journal/journal.h"

namespace wtx {

// Entries in order of first appearance, from the typed records (participant_records.h,
// coordinator_records.h); a participant's dirty_after is what the dirty rule derives. Participant
// entries: {tx, kind, base, version, outcome, reason, time, coverage, timings_us, vote, refreshed};
// coordinator entries: {tx, decision, outcome, version, reason, time, votes, timings_us}.
// Event records (ACCEPTED_UNVERIFIED, src/txn/event_records.h) go to *events when given, in
// order: {type, time, reason}.
Result<std::vector<nlohmann::json>> ReadHistory(const Journal& journal,
                                                std::vector<nlohmann::json>* events = nullptr);

// Replays every record from empty; returns the rebuilt state.
Result<nlohmann::json> ReplayState(const Journal& journal);

// State fields only (drops the journal's "seq"/"head" bookkeeping), for comparisons.
nlohmann::json StripBookkeeping(nlohmann::json state);

// Chain, identity and replay-equals-stored-state checks. OK or kJournalCorrupt naming the
// first inconsistency.
Status CheckJournal(const Journal& journal);

}  // namespace wtx
