// include/wtx/journal_reader.h: typed views over journal/history.h and journal/verify.h.
#include "wtx/journal_reader.h"

#include <nlohmann/json.hpp>

#include "journal/journal.h"
#include "src/history/history.h"
#include "src/txn/journal_check.h"

namespace wtx {

using nlohmann::json;

namespace {

JournalOwner OwnerOf(const JournalIdentity& id) { return JournalOwner{id.role, id.rank}; }

std::optional<std::string> OptString(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::string String(const json& e, const char* key) { return OptString(e, key).value_or(""); }

int64_t Int(const json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

std::vector<std::string> Strings(const json& e, const char* key) {
  std::vector<std::string> out;
  auto it = e.find(key);
  if (it == e.end() || !it->is_array()) return out;
  for (const auto& v : *it) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

HistoryEntry EntryFromJson(const json& e) {
  HistoryEntry h;
  h.tx = String(e, "tx");
  h.time_micros = Int(e, "time");
  h.outcome = String(e, "outcome");
  h.version = OptString(e, "version");
  h.served_digest = OptString(e, "served_digest");
  if (!h.served_digest) h.served_digest = h.version;
  h.reason = String(e, "reason");
  h.lineage = OptString(e, "lineage").value_or("");
  if (auto s = e.find("step"); s != e.end() && s->is_number_integer()) h.step = s->get<int64_t>();
  if (auto t = e.find("timings_us"); t != e.end() && t->is_object()) {
    for (const auto& [k, v] : t->items()) {
      if (v.is_number_integer()) h.timings_us[k] = v.get<int64_t>();
    }
  }
  if (auto k = OptString(e, "kind")) h.kind = TxKindFromName(*k);
  h.base = OptString(e, "base");
  h.modules = Strings(e, "modules");
  h.sources = Strings(e, "sources");
  h.rollback = e.value("rollback", false);
  if (auto c = e.find("coverage"); c != e.end() && c->is_object()) {
    // Active: counts of WRITE/PATCH records; prepared: the PREPARED record's summary.
    h.coverage.pieces = c->contains("pieces") ? Int(*c, "pieces") : Int(*c, "writes");
    h.coverage.patches = c->contains("patched") ? Int(*c, "patched") : Int(*c, "patches");
    h.coverage.elements = Int(*c, "elements");
    h.coverage.bytes = Int(*c, "bytes");
    h.coverage.shards = Int(*c, "shards");
    h.coverage.missing = Int(*c, "missing");
  }
  h.refreshed = Strings(e, "refreshed");
  h.vote = OptString(e, "vote");
  h.message = String(e, "message");
  if (auto d = e.find("dirty_after"); d != e.end() && d->is_boolean()) {
    h.dirty_after = d->get<bool>();
  }
  if (auto d = OptString(e, "decision")) h.decision = DecisionFromName(*d);
  if (auto vs = e.find("votes"); vs != e.end() && vs->is_array()) {
    for (const auto& v : *vs) {
      if (!v.is_object()) continue;
      h.votes.push_back(
          LoggedVote{static_cast<int>(Int(v, "rank")), String(v, "vote"), String(v, "error")});
    }
  }
  h.acknowledged = e.value("acknowledged", false);
  h.json = e.dump();
  return h;
}

}  // namespace

JournalVerification VerifyJournal(const std::string& dir, const JournalVerifyOptions& options) {
  VerifyOptions vo;
  if (options.expect) vo.expect = JournalIdentity{options.expect->role, options.expect->rank};
  vo.strict = options.strict;
  vo.on_record = options.on_record;
  JournalCheckReport rep = VerifyJournalDir(dir, vo);
  JournalVerification out;
  out.status = rep.status;
  out.warnings = rep.warnings;
  out.owner = OwnerOf(rep.identity);
  out.owner_checked = rep.identity_checked;
  out.records = rep.records;
  if (rep.watermark) out.synced_through = rep.watermark->seq;
  out.torn_tail = rep.torn_tail;
  return out;
}

Result<JournalHistory> ReadJournalHistory(const std::string& dir) {
  std::vector<std::string> warnings;
  auto j = OpenVerifiedReadOnly(dir, &warnings);
  if (!j.ok()) return j.status();
  std::vector<nlohmann::json> events;
  auto h = ReadHistory(*j.value(), &events);
  if (!h.ok()) return h.status();
  JournalHistory out;
  for (const auto& e : events) {
    out.events.push_back(
        {e["type"].get<std::string>(), e["time"].get<int64_t>(), e["reason"].get<std::string>()});
  }
  out.owner = OwnerOf(j.value()->identity());
  out.records = j.value()->last_seq();
  out.warnings = std::move(warnings);
  for (const auto& e : h.value()) out.entries.push_back(EntryFromJson(e));
  return out;
}

}  // namespace wtx
