// The durable state of a participant and the pure function that advances it by one journal
// record. The live participant computes every new state with ApplyParticipantRecord before
// appending, so replaying the journal from empty rebuilds exactly the stored state.
#pragma once

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx {

// {"rank", "version" (null|hex), "committed_tx", "dirty", "loaded", "active" (null|{tx, kind, base,
//  modules, sources, rollback, wrote, prepared, vote, digest}), "txs"}
nlohmann::json InitialParticipantState(int rank);
// Applies one record (BEGIN, WRITE, PATCH, REFRESH, PREPARED, OUTCOME, RESTART).
// kJournalCorrupt when the record cannot follow the state (e.g. OUTCOME without BEGIN).
Result<nlohmann::json> ApplyParticipantRecord(const nlohmann::json& state,
                                              const nlohmann::json& record);
// State fields only (drops the journal's "seq"/"head" bookkeeping), for comparisons.
nlohmann::json StripBookkeeping(nlohmann::json state);

}  // namespace wtx
