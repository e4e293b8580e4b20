#include "participant_state.h"

namespace wtx {

using nlohmann::json;

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

namespace {

Result<json> ApplyUnchecked(const json& state, const json& r) {
  json s = StripBookkeeping(state);
  const std::string type = r.value("type", std::string());
  const json tx = r.value("tx", json());
  auto need_active = [&]() -> Status {
    if (s["active"].is_null() || s["active"]["tx"] != tx) {
      return Status::Corruption("record " + std::to_string(r.value("seq", 0)) + " (" + type +
                                ") names transaction " + tx.dump() +
                                " which is not the active one");
    }
    return Status::OK();
  };
  if (type == "CREATE") {
    if (!state.is_null()) return Status::Corruption("CREATE record after the journal began");
    return InitialParticipantState(r.at("rank").get<int>());
  }
  if (type == "BEGIN") {
    if (!s["active"].is_null()) {
      return Status::Corruption("BEGIN of " + tx.dump() + " while " + s["active"]["tx"].dump() +
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
  return s;
}

}  // namespace

Result<json> ApplyParticipantRecord(const json& state, const json& r) {
  // A record with a valid checksum can still be malformed (written by another program, or
  // crafted): that is a corrupt journal, never an exception escaping into the reader.
  const std::string at = "record " + (r.is_object() && r.contains("seq") && r["seq"].is_number()
                                          ? r["seq"].dump()
                                          : std::string("?"));
  if (!r.is_object()) return Status::Corruption(at + " is not an object");
  if (!state.is_null() && !state.is_object()) return Status::Corruption("state is not an object");
  if (state.is_null() && r.value("type", json()) != "CREATE") {
    return Status::Corruption(at + " comes before the journal's CREATE record");
  }
  try {
    return ApplyUnchecked(state, r);
  } catch (const json::exception& e) {
    return Status::Corruption(at + " is malformed: " + e.what());
  }
}

}  // namespace wtx
