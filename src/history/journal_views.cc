// include/wtx/journal_reader.h: the record, state and replay views (`wtx show`, `wtx status`,
// `wtx replay`) over journal/journal.h and src/txn/journal_check.h. The history view and the
// verification are journal_reader.cc.
#include <nlohmann/json.hpp>

#include "journal/journal.h"
#include "src/txn/journal_check.h"
#include "src/txn/participant_state.h"
#include "wtx/journal_reader.h"

namespace wtx {

using nlohmann::json;

namespace {

std::optional<std::string> OptionalString(const json& obj, const char* key) {
  auto it = obj.is_object() ? obj.find(key) : obj.end();
  if (it == obj.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

Result<JournalTxRecords> ReadJournalRecords(const std::string& dir, const std::string& tx) {
  JournalTxRecords out;
  WTX_ASSIGN_OR_RETURN(j, OpenVerifiedReadOnly(dir, &out.warnings));
  WTX_RETURN_IF_ERROR(j->ForEachRecord([&](const json& r) {
    if (r.is_object() && r.value("tx", json()) == tx) {
      out.records.push_back({OptionalString(r, "type").value_or(""), tx, r.dump()});
    }
    return Status::OK();
  }));
  return out;
}

Result<JournalState> ReadJournalState(const std::string& dir) {
  JournalState out;
  WTX_ASSIGN_OR_RETURN(j, OpenVerifiedReadOnly(dir, &out.warnings));
  out.owner = JournalOwner{j->identity().role, j->identity().rank};
  out.records = j->last_seq();
  const json st = StripBookkeeping(j->state());
  if (out.owner.role == "coordinator") {
    if (auto d = st.find("decisions"); d != st.end() && d->is_number_integer()) {
      out.decisions = d->get<int64_t>();
    }
    if (auto p = st.find("pending"); p != st.end() && p->is_array()) {
      for (const auto& tx : *p) {
        if (tx.is_string()) out.pending.push_back(tx.get<std::string>());
      }
    }
    return out;
  }
  const json act = st.value("active", json());
  out.version = OptionalString(st, "version");
  out.served_digest = OptionalString(st, "served_digest");
  if (!out.served_digest) out.served_digest = out.version;
  out.committed_tx = OptionalString(st, "committed_tx");
  // From BEGIN to the decision the rank is dirty (the state says so since BEGIN records carry
  // it; an older journal's BEGIN did not, hence the active transaction here too).
  out.dirty = st.value("dirty", false) || act.is_object();
  out.loaded = st.value("loaded", false);
  out.active_tx = OptionalString(act, "tx");
  if (act.is_object() && act.value("vote", json()) == "yes") out.in_doubt = out.active_tx;
  out.serving = out.loaded && !out.dirty && out.version.has_value() && !out.in_doubt;
  out.model = OptionalString(st, "model").value_or("");
  out.lineage = OptionalString(st, "lineage").value_or("");
  if (auto s = st.find("step"); s != st.end() && s->is_number_integer()) {
    out.step = s->get<int64_t>();
  }
  return out;
}

Result<JournalReplay> ReplayJournal(const std::string& dir) {
  JournalReplay out;
  WTX_ASSIGN_OR_RETURN(j, OpenVerifiedReadOnly(dir, &out.warnings));
  WTX_ASSIGN_OR_RETURN(state, ReplayState(*j));
  out.records = j->last_seq();
  out.state_json = state.dump();
  // CheckJournal's rule, not a plain comparison: a snapshot written before the typed state
  // (journal-format.md, compatibility) lacks facts that replay re-derives and still matches.
  out.matches_stored_state = CheckJournal(*j).ok();
  return out;
}

}  // namespace wtx
