// The fields "decision" (commit, abort or noop) and "version" (required for a commit) that a
// participant's OUTCOME and the coordinator's DECISION share: one reader for both record codecs
// (participant_records.cc, coordinator_records.cc), over the generic field reader of the journal
// layer (journal/record_fields.h), which knows no transaction types.
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "journal/record_fields.h"
#include "wtx/protocol.h"

namespace wtx {

// Reads both fields through `f`; a bad or missing one fails `f` naming it.
void ReadDecision(RecordFields& f, Decision* decision, std::optional<std::string>* version);

// An optional step of a lineage (docs/fleet.md) under `key`: absent, or an integer >= 0 (a
// negative one fails `f` naming the key). Shared by BEGIN, LINEAGE and DECISION records.
std::optional<int64_t> ReadStep(RecordFields& f, std::string_view key);

}  // namespace wtx
