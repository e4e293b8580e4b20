#include "journal/history.h"

#include <map>

#include "src/txn/participant_state.h"

namespace wtx {

using nlohmann::json;

namespace {

std::string OutcomeName(const std::string& decision) {
  if (decision == "commit") return "committed";
  if (decision == "abort") return "aborted";
  return decision;
}

json CoordinatorState(const std::map<std::string, bool>& pending, size_t decisions) {
  json p = json::array();
  for (const auto& [tx, _] : pending) p.push_back(tx);
  return {{"decisions", decisions}, {"pending", p}};
}

}  // namespace

Result<std::vector<json>> ReadHistory(const Journal& journal) {
  std::vector<json> out;
  std::map<std::string, size_t> at;  // tx -> latest entry index
  const bool coordinator = journal.identity().role == "coordinator";
  Status s = journal.ForEachRecord([&](const json& r) -> Status {
    const std::string type = r.value("type", std::string());
    if (!r.contains("tx") || !r["tx"].is_string()) return Status::OK();
    const std::string tx = r["tx"].get<std::string>();
    if (coordinator) {
      if (type == "DECISION") {
        at[tx] = out.size();
        out.push_back({{"tx", tx},
                       {"decision", r["decision"]},
                       {"outcome", OutcomeName(r["decision"].get<std::string>())},
                       {"version", r.value("version", json())},
                       {"reason", r.value("reason", "")},
                       {"time", r.value("ts", int64_t{0})},
                       {"votes", r.value("votes", json::array())},
                       {"timings_us", r.value("timings_us", json::object())},
                       {"acknowledged", false}});
      } else if (type == "END" && at.count(tx)) {
        out[at[tx]]["acknowledged"] = true;
      }
      return Status::OK();
    }
    if (type == "BEGIN") {
      at[tx] = out.size();
      out.push_back({{"tx", tx},
                     {"kind", r["kind"]},
                     {"base", r.value("base", json())},
                     {"version", nullptr},
                     {"outcome", "active"},
                     {"reason", ""},
                     {"time", r.value("ts", int64_t{0})},
                     {"modules", r.value("modules", json::array())},
                     {"sources", r.value("sources", json::array())},
                     {"rollback", r.value("rollback", false)},
                     {"coverage", {{"writes", 0}, {"patches", 0}, {"elements", 0}, {"bytes", 0}}},
                     {"refreshed", json::array()},
                     {"timings_us", json::object()}});
      return Status::OK();
    }
    auto it = at.find(tx);
    if (it == at.end()) return Status::OK();
    json& e = out[it->second];
    const int64_t ts = r.value("ts", int64_t{0});
    if (type == "WRITE") {
      e["coverage"]["writes"] = e["coverage"]["writes"].get<int64_t>() + 1;
      e["coverage"]["elements"] = e["coverage"]["elements"].get<int64_t>() + r.value("elements", 0);
      e["coverage"]["bytes"] = e["coverage"]["bytes"].get<int64_t>() + r.value("bytes", 0);
    } else if (type == "PATCH") {
      e["coverage"]["patches"] = e["coverage"]["patches"].get<int64_t>() + 1;
    } else if (type == "REFRESH") {
      for (const auto& d : r.value("derived", json::array())) e["refreshed"].push_back(d);
    } else if (type == "PREPARED") {
      e["outcome"] = "prepared";
      e["vote"] = r.value("vote", json());
      if (r.contains("coverage")) e["coverage"] = r["coverage"];
      if (r.contains("timings_us")) e["timings_us"] = r["timings_us"];
      if (r.value("vote", "") == "no") {
        std::string reason;
        for (const auto& er : r.value("errors", json::array())) {
          reason += (reason.empty() ? "" : ",") + er.get<std::string>();
        }
        e["reason"] = reason;
        e["message"] = r.value("message", "");
      }
    } else if (type == "OUTCOME") {
      e["outcome"] = OutcomeName(r["decision"].get<std::string>());
      e["version"] = r.value("version", json());
      if (e["outcome"] == "noop") e["reason"] = "";  // checks of an empty transaction do not apply
      if (r.contains("reason")) {
        e["reason"] = e["reason"].get<std::string>().empty()
                          ? r["reason"].get<std::string>()
                          : e["reason"].get<std::string>() + "; " + r["reason"].get<std::string>();
      }
      e["dirty_after"] = r.value("dirty", json());
      e["timings_us"]["total"] = ts - e["time"].get<int64_t>();
    }
    return Status::OK();
  });
  if (!s.ok()) return s;
  return out;
}

Result<json> ReplayState(const Journal& journal) {
  if (journal.identity().role == "coordinator") {
    std::map<std::string, bool> pending;
    size_t decisions = 0;
    Status s = journal.ForEachRecord([&](const json& r) -> Status {
      const std::string type = r.value("type", std::string());
      if (type == "DECISION") {
        ++decisions;
        pending[r["tx"].get<std::string>()] = true;
      } else if (type == "END") {
        pending.erase(r["tx"].get<std::string>());
      } else if (type != "CREATE") {
        return Status::Corruption("record " + std::to_string(r.value("seq", 0)) +
                                  ": unknown coordinator record type '" + type + "'");
      }
      return Status::OK();
    });
    if (!s.ok()) return s;
    return CoordinatorState(pending, decisions);
  }
  // In place; binary WRITE records (nearly all of a large journal) without building JSON.
  ParticipantReplay replay;
  Status s = journal.ForEachRecordRef([&](const RecordRef& r) -> Status {
    if (r.write) return replay.ApplyWrite(r.seq, r.write->tx);
    return replay.Apply(*r.json);
  });
  if (!s.ok()) return s;
  return std::move(replay).Take();
}

Status CheckJournal(const Journal& journal) {
  const auto& id = journal.identity();
  if (id.role != "participant" && id.role != "coordinator") {
    return Status::Corruption(journal.dir() + ": unknown role '" + id.role + "'");
  }
  auto replayed = ReplayState(journal);
  if (!replayed.ok()) return replayed.status();
  json stored = StripBookkeeping(journal.state());
  if (id.role == "participant" && stored.value("rank", -2) != id.rank) {
    return Status::Corruption(journal.dir() + ": state of rank " +
                              stored.value("rank", json()).dump() + " in the journal of rank " +
                              std::to_string(id.rank));
  }
  if (StripBookkeeping(replayed.value()) != stored) {
    return Status::Corruption(journal.dir() + ": replayed state " + replayed.value().dump() +
                              " differs from the stored state " + stored.dump());
  }
  return Status::OK();
}

}  // namespace wtx
