#include "src/history/history.h"

#include <map>

#include "journal/record_fields.h"
#include "src/txn/coordinator_records.h"
#include "src/txn/logged_decision_json.h"
#include "src/txn/participant_records.h"
#include "src/txn/participant_state.h"
#include "wtx/storage_identity.h"

namespace wtx {

using nlohmann::json;

namespace {

// The history's view of an event record.
json EventJson(const AcceptedUnverifiedRecord& r) {
  return {{"type", std::string(kAcceptedUnverifiedType)}, {"time", r.ts}, {"reason", r.reason}};
}

// STORAGE_MOVED / REBIND: the parameters, each with its old and new storage.
json StorageEventJson(std::string_view type, const std::vector<StorageEntry>& entries,
                      const std::optional<std::string>& tx, int64_t ts) {
  std::string detail = tx ? "in transaction '" + *tx + "': " : "";
  for (size_t i = 0; i < entries.size(); ++i) {
    const StorageEntry& e = entries[i];
    StorageChange c{
        e.param,
        {static_cast<uint64_t>(e.was_address), static_cast<size_t>(e.was_bytes), 0, ""},
        {static_cast<uint64_t>(e.now_address), static_cast<size_t>(e.now_bytes),
         e.was_address == e.now_address && e.was_bytes == e.now_bytes ? 1u : 0u, e.released}};
    detail += (i ? "; " : "") + DescribeStorageChange(c);
  }
  return {{"type", std::string(type)}, {"time", ts}, {"reason", detail}};
}

Result<std::vector<json>> CoordinatorHistory(const Journal& journal, std::vector<json>* events) {
  std::vector<json> out;
  std::map<std::string, size_t> at;  // tx -> latest entry index
  Status s = journal.ForEachRecord([&](const json& r) -> Status {
    WTX_ASSIGN_OR_RETURN(rec, DecodeCoordinatorRecord(r));
    if (const auto* d = std::get_if<DecisionRecord>(&rec)) {
      json votes = json::array();
      for (const DecisionVote& v : d->votes) votes.push_back(LoggedVoteToJson(v));
      json timings = json::object();
      if (d->prepare_us) timings["prepare"] = *d->prepare_us;
      at[d->tx] = out.size();
      out.push_back({{"tx", d->tx},
                     {"decision", std::string(DecisionName(d->decision))},
                     {"outcome", std::string(DecisionOutcomeName(d->decision))},
                     {"version", OptionalStringJson(d->version)},
                     {"served_digest",
                      d->version ? json(d->served_digest.value_or(*d->version)) : json(nullptr)},
                     {"reason", d->reason},
                     {"time", d->ts},
                     {"votes", std::move(votes)},
                     {"timings_us", std::move(timings)},
                     {"acknowledged", false},
                     {"lineage", d->lineage.empty() ? json(nullptr) : json(d->lineage)},
                     {"step", d->step ? json(*d->step) : json(nullptr)}});
    } else if (const auto* e = std::get_if<EndRecord>(&rec)) {
      if (auto it = at.find(e->tx); it != at.end()) out[it->second]["acknowledged"] = true;
    } else if (const auto* b = std::get_if<BeginRefusedRecord>(&rec)) {
      // A refused attempt: nothing began anywhere, so it is an entry of its own.
      std::string reason;
      json ranks = json::array();
      for (const RefusedRank& k : b->ranks) {
        reason += (reason.empty() ? "" : "; ") +
                  (k.rank >= 0 ? "rank " + std::to_string(k.rank) + ": " : std::string()) + k.code +
                  ": " + k.message;
        ranks.push_back({{"rank", k.rank}, {"code", k.code}, {"message", k.message}});
      }
      at.erase(b->tx);
      out.push_back({{"tx", b->tx},
                     {"kind", std::string(TxKindName(b->kind))},
                     {"decision", nullptr},
                     {"outcome", "refused"},
                     {"version", nullptr},
                     {"served_digest", nullptr},
                     {"reason", reason},
                     {"time", b->ts},
                     {"refused", std::move(ranks)},
                     {"votes", json::array()},
                     {"timings_us", json::object()},
                     {"acknowledged", true}});
    } else if (const auto* u = std::get_if<AcceptedUnverifiedRecord>(&rec)) {
      if (events) events->push_back(EventJson(*u));
    }
    return Status::OK();
  });
  if (!s.ok()) return s;
  return out;
}

// The participant's history, with a replay alongside: the dirty flag each outcome left is the
// one the dirty rule derives.
Result<std::vector<json>> ParticipantHistory(const Journal& journal, std::vector<json>* events) {
  std::vector<json> out;
  std::map<std::string, size_t> at;  // tx -> latest entry index
  ParticipantReplay replay;
  Status s = journal.ForEachRecordRef([&](const RecordRef& ref) -> Status {
    WTX_ASSIGN_OR_RETURN(rec, DecodeParticipantRecord(ref));
    WTX_RETURN_IF_ERROR(replay.Apply(rec, ref.seq));
    if (const auto* u = std::get_if<AcceptedUnverifiedRecord>(&rec)) {
      if (events) events->push_back(EventJson(*u));
      return Status::OK();
    }
    if (const auto* m = std::get_if<StorageMovedRecord>(&rec)) {
      if (events) events->push_back(StorageEventJson("STORAGE_MOVED", m->params, m->tx, m->ts));
      return Status::OK();
    }
    if (const auto* b = std::get_if<RebindRecord>(&rec)) {
      if (events) events->push_back(StorageEventJson("REBIND", b->params, std::nullopt, b->ts));
      return Status::OK();
    }
    if (const auto* g = std::get_if<LineageRecord>(&rec)) {
      if (events) {
        std::string detail = "new lineage '" + g->lineage + "' (model " + g->fingerprint + ")";
        if (!g->previous_lineage.empty() || !g->previous_fingerprint.empty()) {
          detail += " replaces lineage '" + g->previous_lineage + "' (model " +
                    g->previous_fingerprint + ")";
          if (g->previous_step) detail += " at step " + std::to_string(*g->previous_step);
        }
        events->push_back({{"type", "LINEAGE"}, {"time", g->ts}, {"reason", detail}});
      }
      return Status::OK();
    }
    if (const auto* b = std::get_if<BeginRecord>(&rec)) {
      at[b->tx] = out.size();
      out.push_back({{"tx", b->tx},
                     {"kind", std::string(TxKindName(b->kind))},
                     {"base", OptionalStringJson(b->base)},
                     {"version", nullptr},
                     {"served_digest", nullptr},
                     {"outcome", "active"},
                     {"reason", ""},
                     {"time", b->ts},
                     {"modules", b->modules},
                     {"sources", b->sources},
                     {"rollback", b->rollback},
                     {"coverage", {{"writes", 0}, {"patches", 0}, {"elements", 0}, {"bytes", 0}}},
                     {"refreshed", json::array()},
                     {"timings_us", json::object()},
                     {"lineage", b->lineage.empty() ? json(nullptr) : json(b->lineage)},
                     {"step", b->step ? json(*b->step) : json(nullptr)}});
      return Status::OK();
    }
    const std::string* tx = TxOf(rec);
    if (!tx) return Status::OK();
    auto it = at.find(*tx);
    if (it == at.end()) return Status::OK();
    json& e = out[it->second];
    json& cov = e["coverage"];
    auto add = [&](const char* key, int64_t n) { cov[key] = cov[key].get<int64_t>() + n; };
    if (const auto* w = std::get_if<WriteRecord>(&rec)) {
      add("writes", 1);
      add("elements", w->elements);
      add("bytes", w->bytes);
    } else if (std::holds_alternative<PatchRecord>(rec)) {
      add("patches", 1);
    } else if (const auto* r = std::get_if<RefreshRecord>(&rec)) {
      for (const auto& d : r->derived) e["refreshed"].push_back(d);
    } else if (const auto* p = std::get_if<PreparedRecord>(&rec)) {
      e["outcome"] = "prepared";
      e["vote"] = p->yes ? "yes" : "no";
      if (p->coverage) {
        const PreparedCoverage& c = *p->coverage;
        e["coverage"] = {{"shards", c.shards},     {"pieces", c.pieces}, {"rows", c.rows},
                         {"elements", c.elements}, {"bytes", c.bytes},   {"patched", c.patched},
                         {"missing", c.missing}};
      }
      if (p->has_timings) {
        e["timings_us"] = {{"first_write", p->first_write_us},
                           {"writes", p->writes_us},
                           {"prepare", p->prepare_us}};
      }
      if (!p->yes) {
        std::string reason;
        for (const auto& er : p->errors) reason += (reason.empty() ? "" : ",") + er;
        e["reason"] = reason;
        e["message"] = p->message;
      }
    } else if (const auto* o = std::get_if<OutcomeRecord>(&rec)) {
      e["outcome"] = std::string(DecisionOutcomeName(o->decision));
      e["version"] = OptionalStringJson(o->version);
      e["served_digest"] =
          o->version ? json(o->served_digest.value_or(*o->version)) : json(nullptr);
      if (o->decision == Decision::kNoop) e["reason"] = "";  // checks of an empty tx do not apply
      if (o->reason) {
        const std::string before = e["reason"].get<std::string>();
        e["reason"] = before.empty() ? *o->reason : before + "; " + *o->reason;
      }
      e["dirty_after"] = replay.state()->dirty;
      e["timings_us"]["total"] = o->ts - e["time"].get<int64_t>();
    }
    return Status::OK();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace

Result<std::vector<json>> ReadHistory(const Journal& journal, std::vector<json>* events) {
  if (journal.identity().role == "coordinator") return CoordinatorHistory(journal, events);
  return ParticipantHistory(journal, events);
}

}  // namespace wtx
