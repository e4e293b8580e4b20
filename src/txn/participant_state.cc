#include "src/txn/participant_state.h"

namespace wtx {

using nlohmann::json;

namespace {

// A JSON value for an error message: never throws (invalid UTF-8 in a crafted record's strings
// is replaced, not an exception).
std::string Quoted(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

json InitialParticipantState(int rank) {
  return {{"rank", rank}, {"version", nullptr}, {"committed_tx", nullptr},
          {"dirty", false}, {"loaded", false}, {"active", nullptr}, {"txs", 0}};
}

json StripBookkeeping(json state) {
  if (state.is_object()) {
    state.erase("seq");
    state.erase("head");
  }
  return state;
}

ParticipantReplay::ParticipantReplay(json state) : state_(StripBookkeeping(std::move(state))) {
  Recache();
}

void ParticipantReplay::Recache() {
  has_active_ = false;
  active_tx_is_string_ = false;
  write_marked_ = false;
  if (!state_.is_object()) return;
  auto a = state_.find("active");
  if (a == state_.end() || !a->is_object()) return;
  has_active_ = true;
  auto tx = a->find("tx");
  if (tx != a->end() && tx->is_string()) {
    active_tx_is_string_ = true;
    active_tx_ = tx->get<std::string>();
  }
  auto wrote = a->find("wrote");
  auto dirty = state_.find("dirty");
  write_marked_ = wrote != a->end() && *wrote == true && dirty != state_.end() && *dirty == true;
}

Status ParticipantReplay::NotActive(uint64_t seq, std::string_view type, const json& tx) const {
  return Status::Corruption("record " + std::to_string(seq) + " (" + std::string(type) +
                            ") names transaction " + Quoted(tx) +
                            " which is not the active one");
}

Status ParticipantReplay::ApplyWrite(uint64_t seq, std::string_view tx) {
  if (state_.is_null()) {
    return Status::Corruption("record " + std::to_string(seq) +
                              " comes before the journal's CREATE record");
  }
  if (!has_active_ || !active_tx_is_string_ || active_tx_ != tx) {
    return NotActive(seq, "WRITE", json(std::string(tx)));
  }
  if (!write_marked_) {
    state_["active"]["wrote"] = true;
    state_["dirty"] = true;
    write_marked_ = true;
  }
  return Status::OK();
}

Status ParticipantReplay::Apply(const json& r) {
  // A record with a valid checksum can still be malformed (written by another program, or
  // crafted): that is a corrupt journal, never an exception escaping into the reader.
  const std::string at = "record " + (r.is_object() && r.contains("seq") && r["seq"].is_number()
                                          ? Quoted(r["seq"])
                                          : std::string("?"));
  if (!r.is_object()) return Status::Corruption(at + " is not an object");
  if (!state_.is_null() && !state_.is_object()) return Status::Corruption("state is not an object");
  if (state_.is_null() && r.value("type", json()) != "CREATE") {
    return Status::Corruption(at + " comes before the journal's CREATE record");
  }
  Status s;
  try {
    s = ApplyUnchecked(r);
  } catch (const json::exception& e) {
    s = Status::Corruption(at + " is malformed: " + e.what());
  }
  Recache();
  return s;
}

Status ParticipantReplay::ApplyUnchecked(const json& r) {
  json& s = state_;
  const std::string type = r.value("type", std::string());
  const json tx = r.value("tx", json());
  auto need_active = [&]() -> Status {
    if (s["active"].is_null() || s["active"]["tx"] != tx) {
      return NotActive(r.value("seq", uint64_t{0}), type, tx);
    }
    return Status::OK();
  };
  if (type == "CREATE") {
    if (!s.is_null()) return Status::Corruption("CREATE record after the journal began");
    s = InitialParticipantState(r.at("rank").get<int>());
  } else if (type == "BEGIN") {
    if (!s["active"].is_null()) {
      return Status::Corruption("BEGIN of " + Quoted(tx) + " while " + Quoted(s["active"]["tx"]) +
                                " is active");
    }
    s["active"] = {{"tx", tx},
                   {"kind", r.at("kind")},
                   {"base", r.value("base", json())},
                   {"modules", r.value("modules", json::array())},
                   {"sources", r.value("sources", json::array())},
                   {"rollback", r.value("rollback", false)},
                   {"wrote", false},
                   {"prepared", false},
                   {"vote", nullptr},
                   {"digest", nullptr}};
    s["txs"] = s["txs"].get<int64_t>() + 1;
  } else if (type == "RESERVE") {
    // An in-place landing: the engine may change the region's bytes from now on.
    WTX_RETURN_IF_ERROR(need_active());
    s["active"]["wrote"] = true;
    s["dirty"] = true;
  } else if (type == "LANDED" || type == "CHUNKS") {
    // LANDED: coverage bookkeeping; CHUNKS: the chunk digests behind a yes vote (read back by
    // Reattach). Neither changes the state.
    WTX_RETURN_IF_ERROR(need_active());
  } else if (type == "UNDECLARED") {
    // The verifier found live bytes that changed without a declared write.
    s["dirty"] = true;
  } else if (type == "REATTACH") {
    if (!s["active"].is_null()) return Status::Corruption("REATTACH while a transaction is active");
    // The live bytes that survived a restart equal the committed version, chunk for chunk.
    s["dirty"] = false;
    s["loaded"] = true;
  } else if (type == "WRITE" || type == "PATCH") {
    WTX_RETURN_IF_ERROR(need_active());
    if (r.value("applied", int64_t{1}) > 0) {
      s["active"]["wrote"] = true;
      s["dirty"] = true;
    }
  } else if (type == "REFRESH") {
    // Staleness is process state (derived copies die with the process); nothing durable.
  } else if (type == "PREPARED") {
    WTX_RETURN_IF_ERROR(need_active());
    s["active"]["prepared"] = true;
    s["active"]["vote"] = r.at("vote");
    s["active"]["digest"] = r.value("digest", json());
  } else if (type == "OUTCOME") {
    WTX_RETURN_IF_ERROR(need_active());
    if (r.at("decision") == "commit") {
      s["version"] = r.at("version");
      s["committed_tx"] = tx;
      s["digest"] = s["active"].value("digest", json());
    }
    s["dirty"] = r.at("dirty");
    s["loaded"] = r.value("loaded", s.value("loaded", false));
    s["active"] = nullptr;
  } else if (type == "RESTART") {
    s["dirty"] = r.at("dirty");
    s["loaded"] = false;
  } else {
    return Status::Corruption("unknown record type '" + type + "'");
  }
  return Status::OK();
}

Result<json> ApplyParticipantRecord(const json& state, const json& record) {
  ParticipantReplay replay(state);
  WTX_RETURN_IF_ERROR(replay.Apply(record));
  return std::move(replay).Take();
}

}  // namespace wtx
