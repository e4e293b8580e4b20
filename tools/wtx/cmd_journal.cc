// `wtx log|show|status|replay|check DIR`: read a participant's or the coordinator's journal.
// All of them open the journal read-only (safe beside a running process); log, show and status
// first run the full integrity check of `wtx check` (journal/verify.h) and refuse a journal
// that fails it rather than print wrong history. Warnings (a torn unsynced tail) go to stderr.
#include <ctime>
#include <iomanip>
#include <iostream>

#include "tools/wtx/commands.h"
#include "journal/history.h"
#include "journal/journal.h"
#include "src/txn/participant_state.h"
#include "journal/verify.h"

namespace wtx::cli {

using nlohmann::json;

namespace {

Result<std::unique_ptr<Journal>> OpenReadOnly(const std::string& dir) {
  JournalOptions o;
  o.read_only = true;
  o.create_if_missing = false;
  return Journal::Open(dir, o);
}

int Refuse(const std::string& cmd, const Status& s) {
  std::cerr << "wtx " << cmd << ": " << s.ToString() << "\n";
  return s.code() == ErrorCode::kJournalCorrupt ? 3 : 1;
}

std::string Time(int64_t micros) {
  std::time_t t = static_cast<std::time_t>(micros / 1000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%dT%H:%M:%S") << "." << std::setw(3) << std::setfill('0')
     << (micros / 1000) % 1000 << "Z";
  return os.str();
}

std::string Short(const json& v) {
  if (!v.is_string()) return "-";
  std::string s = v.get<std::string>();
  return s.size() > 16 ? s.substr(0, 16) : s;
}

// Loads and verifies; every reader goes through this so that corruption is never printed.
Result<std::unique_ptr<Journal>> OpenChecked(const std::string& dir, const std::string& cmd) {
  JournalCheckReport rep = VerifyJournalDir(dir);
  if (!rep.status.ok()) return rep.status;
  for (const auto& w : rep.warnings) std::cerr << "wtx " << cmd << ": warning: " << w << "\n";
  auto j = OpenReadOnly(dir);
  if (!j.ok()) return j.status();
  Status s = CheckJournal(*j.value());
  if (!s.ok()) return s;
  return j;
}

int Log(const std::string& dir, bool as_json) {
  auto j = OpenChecked(dir, "log");
  if (!j.ok()) return Refuse("log", j.status());
  auto h = ReadHistory(*j.value());
  if (!h.ok()) return Refuse("log", h.status());
  if (as_json) {
    std::cout << json(h.value()).dump() << "\n";
    return 0;
  }
  const bool coord = j.value()->identity().role == "coordinator";
  std::cout << std::left << std::setw(12) << "TX" << std::setw(9) << (coord ? "DECISION" : "KIND")
            << std::setw(18) << "BASE" << std::setw(18) << "VERSION" << std::setw(11) << "OUTCOME"
            << std::setw(26) << "TIME" << "REASON\n";
  for (const auto& e : h.value()) {
    std::cout << std::left << std::setw(12) << e["tx"].get<std::string>() << std::setw(9)
              << (coord ? e["decision"].get<std::string>() : e["kind"].get<std::string>())
              << std::setw(18) << Short(e.value("base", json())) << std::setw(18)
              << Short(e["version"]) << std::setw(11) << e["outcome"].get<std::string>()
              << std::setw(26) << Time(e["time"].get<int64_t>()) << e.value("reason", "")
              << "\n";
  }
  return 0;
}

int Show(const std::string& dir, const std::string& tx, bool as_json) {
  auto j = OpenChecked(dir, "show");
  if (!j.ok()) return Refuse("show", j.status());
  auto h = ReadHistory(*j.value());
  if (!h.ok()) return Refuse("show", h.status());
  json found;
  for (const auto& e : h.value()) {
    if (e["tx"] == tx) found = e;  // the latest entry of a reused id
  }
  if (found.is_null()) {
    std::cerr << "wtx show: no transaction '" << tx << "' in " << dir << "\n";
    return 1;
  }
  json records = json::array();
  j.value()->ForEachRecord([&](const json& r) {
    if (r.value("tx", json()) == tx) records.push_back(r);
    return Status::OK();
  }).ok();
  found["records"] = records;
  std::cout << found.dump(as_json ? -1 : 2) << "\n";
  return 0;
}

json StatusJson(const Journal& j) {
  json st = StripBookkeeping(j.state());
  json out = {{"role", j.identity().role}, {"records", j.last_seq()}};
  if (j.identity().role == "coordinator") {
    out["decisions"] = st.value("decisions", 0);
    out["pending"] = st.value("pending", json::array());
    return out;
  }
  const json act = st.value("active", json());
  out["rank"] = j.identity().rank;
  out["version"] = st.value("version", json());
  out["committed_tx"] = st.value("committed_tx", json());
  out["dirty"] = st.value("dirty", false);
  out["loaded"] = st.value("loaded", false);
  out["active_tx"] = act.is_object() ? act["tx"] : json();
  out["in_doubt"] =
      act.is_object() && act.value("vote", json()) == "yes" ? act["tx"] : json();
  out["serving"] = out["loaded"].get<bool>() && !out["dirty"].get<bool>() &&
                   !out["version"].is_null() && out["in_doubt"].is_null();
  return out;
}

int StatusCmd(const std::string& dir, bool as_json) {
  auto j = OpenChecked(dir, "status");
  if (!j.ok()) return Refuse("status", j.status());
  json s = StatusJson(*j.value());
  if (as_json) {
    std::cout << s.dump() << "\n";
    return 0;
  }
  for (const auto& [k, v] : s.items()) std::cout << std::left << std::setw(14) << k << v.dump() << "\n";
  return 0;
}

int Replay(const std::string& dir) {
  auto j = OpenReadOnly(dir);
  if (!j.ok()) return Refuse("replay", j.status());
  auto st = ReplayState(*j.value());
  if (!st.ok()) return Refuse("replay", st.status());
  json stored = StripBookkeeping(j.value()->state());
  json out = {{"records", j.value()->last_seq()},
              {"state", st.value()},
              {"matches_stored_state", st.value() == stored}};
  std::cout << out.dump(2) << "\n";
  return st.value() == stored ? 0 : 3;
}

// Exit 0: consistent (warnings on stderr); 3: corrupt (the message names what is wrong);
// 1: no journal or unreadable.
int Check(const std::string& dir, int expect_rank, bool expect_coordinator, bool strict) {
  VerifyOptions o;
  o.strict = strict;
  if (expect_coordinator) o.expect = JournalIdentity{"coordinator", -1};
  if (expect_rank >= 0) o.expect = JournalIdentity{"participant", expect_rank};
  JournalCheckReport rep = VerifyJournalDir(dir, o);
  if (!rep.status.ok()) return Refuse("check", rep.status);
  for (const auto& w : rep.warnings) std::cerr << "wtx check: warning: " << w << "\n";
  const JournalIdentity& id = rep.identity;
  std::cout << "ok: " << dir << " (" << id.role
            << (id.role == "participant" ? " rank " + std::to_string(id.rank) : "")
            << (rep.identity_checked ? " as expected" : "; identity not checked") << ", "
            << rep.records << " records, synced through record "
            << (rep.watermark ? std::to_string(rep.watermark->seq) : std::string("-"))
            << ", checksums, chain and state consistent"
            << (rep.torn_tail ? ", torn unsynced tail" : "") << ")\n";
  return 0;
}

}  // namespace

void RegisterJournalCommands(CLI::App& app, int* exit_code) {
  auto dir = std::make_shared<std::string>();
  auto tx = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);

  auto* log = app.add_subcommand("log", "One line per transaction in a journal");
  log->add_option("dir", *dir, "Journal directory (e.g. DIR/rank-0)")->required();
  log->add_flag("--json", *as_json, "JSON output");
  log->callback([=] { *exit_code = Log(*dir, *as_json); });

  auto* show = app.add_subcommand("show", "Everything the journal holds about one transaction");
  show->add_option("dir", *dir, "Journal directory")->required();
  show->add_option("tx", *tx, "Transaction id")->required();
  show->add_flag("--json", *as_json, "Compact JSON output");
  show->callback([=] { *exit_code = Show(*dir, *tx, *as_json); });

  auto* status = app.add_subcommand("status", "Version, dirty, loaded and in-doubt state");
  status->add_option("dir", *dir, "Journal directory")->required();
  status->add_flag("--json", *as_json, "JSON output");
  status->callback([=] { *exit_code = StatusCmd(*dir, *as_json); });

  auto* replay = app.add_subcommand("replay", "Rebuild the state from the records and print it");
  replay->add_option("dir", *dir, "Journal directory")->required();
  replay->callback([=] { *exit_code = Replay(*dir); });

  auto* check = app.add_subcommand(
      "check", "Verify integrity (files, checksums, chain, state, identity); exit 3 if corrupt");
  auto expect_rank = std::make_shared<int>(-1);
  auto expect_coordinator = std::make_shared<bool>(false);
  check->add_option("dir", *dir, "Journal directory")->required();
  check->add_option("--expect-rank", *expect_rank,
                    "The journal must be participant N's (default: inferred from a rank-N "
                    "directory name)");
  check->add_flag("--expect-coordinator", *expect_coordinator,
                  "The journal must be the coordinator's (default: inferred from the name)");
  auto strict = std::make_shared<bool>(false);
  check->add_flag("--strict", *strict,
                  "Warnings (a torn unsynced tail, a missing sync watermark) fail the check too");
  check->callback([=] { *exit_code = Check(*dir, *expect_rank, *expect_coordinator, *strict); });
}

}  // namespace wtx::cli
