// History: the audit view of a journal — one entry per transaction with its kind, base,
// resulting version, outcome, reason, coverage summary and per-phase timings — read from the
// typed records of the transaction layer. The integrity check (replay equals the stored state)
// is the transaction layer's (src/txn/journal_check.h).
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

}  // namespace wtx
