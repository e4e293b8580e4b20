// The durable state of a participant and the pure rules that advance it by one journal record.
// The live participant computes every new state with these rules before appending, so replaying
// the journal from empty rebuilds exactly the stored state.
//
// Thread-safety: ParticipantReplay is a plain value (one owner); the functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx {

// {"rank", "version" (null|hex), "committed_tx", "dirty", "loaded", "active" (null|{tx, kind, base,
//  modules, sources, rollback, wrote, prepared, vote, digest}), "txs"}
nlohmann::json InitialParticipantState(int rank);

// Advances a state record by record, in place. A binary WRITE record (ApplyWrite) is applied
// from its transaction id alone, without JSON: the same rule as a JSON WRITE record without
// "applied". Any error is kJournalCorrupt naming the record; after one, the state is
// unspecified and the replay must stop.
class ParticipantReplay {
 public:
  // `state`: null (an empty journal) or a participant state; "seq"/"head" are dropped.
  explicit ParticipantReplay(nlohmann::json state = nlohmann::json());

  // Applies one record (CREATE, BEGIN, WRITE, PATCH, REFRESH, PREPARED, OUTCOME, RESTART).
  Status Apply(const nlohmann::json& record);
  // Applies the WRITE record `seq` of transaction `tx`.
  Status ApplyWrite(uint64_t seq, std::string_view tx);

  const nlohmann::json& state() const { return state_; }
  nlohmann::json Take() && { return std::move(state_); }

 private:
  Status ApplyUnchecked(const nlohmann::json& r);
  Status NotActive(uint64_t seq, std::string_view type, const nlohmann::json& tx) const;
  // Re-reads the cached view of the active transaction after a JSON record changed the state.
  void Recache();

  nlohmann::json state_;
  bool has_active_ = false;           // state_["active"] is an object
  bool active_tx_is_string_ = false;  // ... whose "tx" is a string,
  std::string active_tx_;             // ... this one
  bool write_marked_ = false;         // active.wrote and dirty are both already true
};

// Applies one record to `state` (a copy): ParticipantReplay for a single record.
Result<nlohmann::json> ApplyParticipantRecord(const nlohmann::json& state,
                                              const nlohmann::json& record);
// State fields only (drops the journal's "seq"/"head" bookkeeping), for comparisons.
nlohmann::json StripBookkeeping(nlohmann::json state);

}  // namespace wtx
