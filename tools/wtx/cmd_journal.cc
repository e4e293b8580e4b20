// `wtx log|show|status|replay|check DIR`: read a participant's or the coordinator's journal
// through the public journal reader (include/wtx/journal_reader.h). All of them open the
// journal read-only (safe beside a running process); log, show, status and replay first run
// the full integrity check of `wtx check` and refuse a journal that fails it rather than print
// wrong history. Warnings (a torn unsynced tail) go to stderr.
//
// With --decision-log etcd://.../PREFIX, log, show and status read the decisions from the
// shared decision log instead (DIR is then not needed), and check compares a coordinator's
// local audit journal DIR with it: a decision the two hold differently, or one the journal
// holds unended that the shared log lacks, is reported (exit 3).
#include <algorithm>
#include <cctype>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "src/txn/logged_decision_json.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/decision_log_flags.h"
#include "tools/wtx/progress.h"
#include "wtx/journal_reader.h"

namespace wtx::cli {

using nlohmann::json;

namespace {

// Exit codes (src/util/exit_codes.h): 2 when DIR is missing, not a directory or empty, or holds
// no journal; 3 when the journal is corrupt; 1 otherwise.
int Refuse(const std::string& cmd, const Status& s) {
  std::cerr << "wtx " << cmd << ": " << s.ToString() << "\n";
  return ExitCodeFor(s);
}

// DIR must be a directory holding something before a reader opens it.
Status CheckJournalDir(const std::string& dir) {
  return CheckDirectoryArg("DIR", dir, /*must_exist=*/true, /*must_hold_files=*/true);
}

void Warn(const std::string& cmd, const std::vector<std::string>& warnings) {
  for (const auto& w : warnings) std::cerr << "wtx " << cmd << ": warning: " << w << "\n";
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

std::string Short(const std::optional<std::string>& v) {
  if (!v) return "-";
  return v->size() > 16 ? v->substr(0, 16) : *v;
}

json OptionalJson(const std::optional<std::string>& v) { return v ? json(*v) : json(); }

// `wtx status` output: one JSON line, or a "key value" line per field.
int PrintState(const json& s, bool as_json) {
  if (as_json) {
    std::cout << s.dump() << "\n";
    return kExitOk;
  }
  for (const auto& [k, v] : s.items())
    std::cout << std::left << std::setw(14) << k << v.dump() << "\n";
  return kExitOk;
}

// Exit codes of a shared log that cannot be read: 4 when unreachable, 3 when a value under
// the prefix does not decode, 2 for bad flags.
int RefuseLog(const std::string& cmd, const Status& s) {
  std::cerr << "wtx " << cmd << ": " << s.ToString() << "\n";
  return s.code() == ErrorCode::kDecisionLogUnavailable ? kExitUnreachable : ExitCodeFor(s);
}

int LogShared(const DecisionLogFlags& flags, bool as_json) {
  auto log = OpenDecisionLogFlags(flags);
  if (!log.ok()) return RefuseLog("log", log.status());
  auto all = log.value()->List();
  if (!all.ok()) return RefuseLog("log", all.status());
  if (as_json) {
    json entries = json::array();
    for (const LoggedDecision& d : all.value()) entries.push_back(LoggedDecisionToJson(d));
    std::cout << entries.dump() << "\n";
    return kExitOk;
  }
  std::cout << std::left << std::setw(12) << "TX" << std::setw(9) << "DECISION" << std::setw(18)
            << "VERSION" << std::setw(7) << "STEP" << std::setw(7) << "EPOCH" << std::setw(7)
            << "ENDED" << std::setw(26) << "TIME" << std::setw(28) << "WRITER"
            << "REASON\n";
  for (const LoggedDecision& d : all.value()) {
    std::cout << std::left << std::setw(12) << d.tx << std::setw(9) << DecisionName(d.decision)
              << std::setw(18)
              << Short(d.version.empty() ? std::nullopt : std::optional<std::string>(d.version))
              << std::setw(7) << (d.step ? std::to_string(*d.step) : "-") << std::setw(7) << d.epoch
              << std::setw(7) << (d.ended ? "yes" : "no") << std::setw(26) << Time(d.time_micros)
              << std::setw(28) << d.writer << d.reason << "\n";
  }
  return kExitOk;
}

int ShowShared(const DecisionLogFlags& flags, const std::string& tx, bool as_json) {
  auto log = OpenDecisionLogFlags(flags);
  if (!log.ok()) return RefuseLog("show", log.status());
  auto d = log.value()->Read(tx);
  if (!d.ok()) return RefuseLog("show", d.status());
  if (!d.value()) {
    std::cerr << "wtx show: no decision on '" << tx << "' in " << log.value()->Describe() << "\n";
    return kExitFailed;
  }
  std::cout << LoggedDecisionToJson(**d).dump(as_json ? -1 : 2) << "\n";
  return kExitOk;
}

int StatusShared(const DecisionLogFlags& flags, bool as_json) {
  auto log = OpenDecisionLogFlags(flags);
  if (!log.ok()) return RefuseLog("status", log.status());
  auto all = log.value()->List();
  if (!all.ok()) return RefuseLog("status", all.status());
  auto leader = log.value()->CurrentLeader();
  if (!leader.ok()) return RefuseLog("status", leader.status());
  json unended = json::array();
  for (const LoggedDecision& d : all.value()) {
    if (!d.ended) unended.push_back(d.tx);
  }
  json s = {{"decision_log", log.value()->Describe()},
            {"decisions", all->size()},
            {"pending", unended},
            {"leader", leader.value() ? json{{"epoch", leader.value()->first},
                                             {"holder", leader.value()->second}}
                                      : json()}};
  return PrintState(s, as_json);
}

// The local audit journal DIR of a coordinator against the shared log.
int CheckShared(const DecisionLogFlags& flags, const std::string& dir) {
  auto log = OpenDecisionLogFlags(flags);
  if (!log.ok()) return RefuseLog("check", log.status());
  auto all = log.value()->List();
  if (!all.ok()) return RefuseLog("check", all.status());
  size_t compared = 0;
  if (!dir.empty()) {
    auto h = ReadJournalHistory(dir);
    if (!h.ok()) return Refuse("check", h.status());
    if (h->owner.role != "coordinator") {
      return Refuse("check", Status::InvalidArgument("DIR " + dir +
                                                     " is a participant's journal; --decision-log "
                                                     "compares a coordinator's journal"));
    }
    std::map<std::string, const LoggedDecision*> shared;
    for (const LoggedDecision& d : all.value()) shared[d.tx] = &d;
    std::vector<std::string> disagree;
    for (const HistoryEntry& e : h->entries) {
      if (!e.decision) continue;
      ++compared;
      auto it = shared.find(e.tx);
      if (it == shared.end()) {
        // An acknowledged decision may have been compacted from the shared log.
        if (!e.acknowledged) {
          disagree.push_back("transaction '" + e.tx + "': the journal holds " +
                             std::string(DecisionName(*e.decision)) +
                             ", the decision log holds none");
        }
        continue;
      }
      const std::string local_version = e.version.value_or("");
      if (it->second->decision != *e.decision ||
          (*e.decision == Decision::kCommit && it->second->version != local_version)) {
        disagree.push_back("transaction '" + e.tx + "': the journal holds " +
                           std::string(DecisionName(*e.decision)) + " " + local_version +
                           ", the decision log holds " +
                           std::string(DecisionName(it->second->decision)) + " " +
                           it->second->version);
      }
    }
    if (!disagree.empty()) {
      for (const std::string& d : disagree) std::cerr << "wtx check: " << d << "\n";
      std::cerr << "wtx check: " << dir << " and " << log.value()->Describe() << " disagree on "
                << disagree.size() << " decision(s)\n";
      return kExitJournalCorrupt;
    }
  }
  std::cout << "ok: " << log.value()->Describe() << " (" << all->size()
            << " decisions, every value decodes"
            << (dir.empty()
                    ? ""
                    : "; " + std::to_string(compared) + " decisions of " + dir + " agree with it")
            << ")\n";
  return kExitOk;
}

int Log(const std::string& dir, bool as_json) {
  if (Status s = CheckJournalDir(dir); !s.ok()) return Refuse("log", s);
  auto h = ReadJournalHistory(dir);
  if (!h.ok()) return Refuse("log", h.status());
  Warn("log", h->warnings);
  if (as_json) {
    json entries = json::array();
    for (const HistoryEntry& e : h->entries) entries.push_back(json::parse(e.json));
    std::cout << entries.dump() << "\n";
    // Events are not transactions: the JSON array stays one entry per transaction.
    for (const JournalEvent& e : h->events) {
      std::cerr << "wtx log: event " << Time(e.time_micros) << " " << e.type << ": " << e.detail
                << "\n";
    }
    return kExitOk;
  }
  const bool coord = h->owner.role == "coordinator";
  std::cout << std::left << std::setw(12) << "TX" << std::setw(9) << (coord ? "DECISION" : "KIND")
            << std::setw(18) << "BASE" << std::setw(18) << "VERSION" << std::setw(7) << "STEP"
            << std::setw(11) << "OUTCOME" << std::setw(26) << "TIME"
            << "REASON\n";
  for (const HistoryEntry& e : h->entries) {
    const std::string what = coord ? (e.decision ? std::string(DecisionName(*e.decision)) : "")
                                   : (e.kind ? std::string(TxKindName(*e.kind)) : "");
    std::cout << std::left << std::setw(12) << e.tx << std::setw(9) << what << std::setw(18)
              << Short(e.base) << std::setw(18) << Short(e.version) << std::setw(7)
              << (e.step ? std::to_string(*e.step) : "-") << std::setw(11) << e.outcome
              << std::setw(26) << Time(e.time_micros) << e.reason << "\n";
  }
  for (const JournalEvent& e : h->events) {
    std::cout << "EVENT " << Time(e.time_micros) << " " << e.type << ": " << e.detail << "\n";
  }
  return kExitOk;
}

// --at TIME: seconds since the epoch ("1796400000.25") or UTC as `wtx log` prints it
// ("2026-12-07T15:04:05.123Z", the fraction and the Z optional); microseconds since the epoch.
Result<int64_t> ParseTimeArg(const std::string& text) {
  const Status bad =
      Status::InvalidArgument("--at '" + text +
                              "': expected seconds since the epoch or a UTC time such as "
                              "2026-12-07T15:04:05.123Z");
  if (!text.empty() && text.find_first_not_of("0123456789.") == std::string::npos) {
    size_t used = 0;
    double seconds = 0;
    try {
      seconds = std::stod(text, &used);
    } catch (const std::exception&) {
      return bad;
    }
    if (used != text.size() || !(seconds >= 0) || seconds > 1e11) return bad;
    return static_cast<int64_t>(seconds * 1e6);
  }
  std::tm tm{};
  std::istringstream in(text);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return bad;
  int64_t micros = 0;
  if (in.peek() == '.') {
    in.get();
    std::string digits;
    while (std::isdigit(in.peek())) digits.push_back(static_cast<char>(in.get()));
    if (digits.empty() || digits.size() > 6) return bad;
    digits.resize(6, '0');
    micros = std::stoll(digits);
  }
  if (in.peek() == 'Z') in.get();
  if (in.peek() != std::char_traits<char>::eof()) return bad;
  return static_cast<int64_t>(timegm(&tm)) * 1000000 + micros;
}

// wtx show DIR --at TIME: what the rank served then (ServedAtTime).
int ShowAt(const std::string& dir, const std::string& at, bool as_json) {
  auto when = ParseTimeArg(at);
  if (!when.ok()) return Refuse("show", when.status());
  if (Status s = CheckJournalDir(dir); !s.ok()) return Refuse("show", s);
  auto h = ReadJournalHistory(dir);
  if (!h.ok()) return Refuse("show", h.status());
  Warn("show", h->warnings);
  auto served = ServedAtTime(h.value(), when.value());
  if (!served.ok()) return Refuse("show", served.status());
  const ServedAt& s = served.value();
  json out = {{"at", Time(s.at_micros)},
              {"serving", s.serving},
              {"version", OptionalJson(s.version)},
              {"served_digest", OptionalJson(s.served_digest)},
              {"committed_tx", OptionalJson(s.committed_tx)},
              {"lineage", s.lineage},
              {"step", s.step ? json(*s.step) : json()},
              {"reason", s.reason.empty() ? json() : json(s.reason)},
              {"since", s.since_micros > 0 ? json(Time(s.since_micros)) : json()},
              {"until", s.until_micros ? json(Time(*s.until_micros)) : json()}};
  std::cout << out.dump(as_json ? -1 : 2) << "\n";
  return kExitOk;
}

int Show(const std::string& dir, const std::string& tx, bool as_json) {
  if (Status s = CheckJournalDir(dir); !s.ok()) return Refuse("show", s);
  auto h = ReadJournalHistory(dir);
  if (!h.ok()) return Refuse("show", h.status());
  Warn("show", h->warnings);
  const HistoryEntry* found = nullptr;
  for (const HistoryEntry& e : h->entries) {
    if (e.tx == tx) found = &e;  // the latest entry of a reused id
  }
  if (found == nullptr) {
    std::cerr << "wtx show: no transaction '" << tx << "' in " << dir << "\n";
    return kExitFailed;
  }
  auto recs = ReadJournalRecords(dir, tx);
  if (!recs.ok()) return Refuse("show", recs.status());
  json out = json::parse(found->json);
  json records = json::array();
  for (const StoredRecord& r : recs->records) records.push_back(json::parse(r.json));
  out["records"] = std::move(records);
  std::cout << out.dump(as_json ? -1 : 2) << "\n";
  return kExitOk;
}

json StateJson(const JournalState& st) {
  json out = {{"role", st.owner.role}, {"records", st.records}};
  if (st.owner.role == "coordinator") {
    out["decisions"] = st.decisions;
    out["pending"] = st.pending;
    return out;
  }
  out["rank"] = st.owner.rank;
  out["version"] = OptionalJson(st.version);
  out["served_digest"] = OptionalJson(st.served_digest);
  out["committed_tx"] = OptionalJson(st.committed_tx);
  out["dirty"] = st.dirty;
  out["loaded"] = st.loaded;
  out["active_tx"] = OptionalJson(st.active_tx);
  out["in_doubt"] = OptionalJson(st.in_doubt);
  out["serving"] = st.serving;
  out["lineage"] = st.lineage;
  out["step"] = st.step ? json(*st.step) : json();
  out["model"] = st.model;
  return out;
}

// Whether the pending decision on `tx` in the coordinator journal DIR was logged with a leader
// epoch: the journal is then the audit copy of a shared decision log, not the truth.
bool DecidedUnderEpoch(const std::string& dir, const std::string& tx) {
  auto recs = ReadJournalRecords(dir, tx);
  if (!recs.ok()) return false;
  for (const StoredRecord& r : recs->records) {
    if (r.type != "DECISION") continue;
    const json j = json::parse(r.json, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("epoch")) return true;
  }
  return false;
}

// `wtx status DIR [--decision-log URL]`. A coordinator's audit journal of a shared decision log
// only knows the decisions its own process ended: one another leader finished is still pending
// here. With --decision-log the pending ones are reconciled with the log (the truth); without
// it the output says where the truth is.
int StatusCmd(const std::string& dir, const DecisionLogFlags& flags, bool as_json) {
  if (Status s = CheckJournalDir(dir); !s.ok()) return Refuse("status", s);
  auto st = ReadJournalState(dir);
  if (!st.ok()) return Refuse("status", st.status());
  Warn("status", st->warnings);
  json s = StateJson(st.value());
  if (st->owner.role != "coordinator") return PrintState(s, as_json);
  if (flags.url.empty()) {
    const bool audit =
        std::any_of(st->pending.begin(), st->pending.end(),
                    [&](const std::string& tx) { return DecidedUnderEpoch(dir, tx); });
    if (audit) {
      s["pending_is"] =
          "as this audit journal knows it: the shared decision log holds the truth (another "
          "leader may have ended them); wtx status DIR --decision-log URL reconciles";
    }
    return PrintState(s, as_json);
  }
  auto log = OpenDecisionLogFlags(flags);
  if (!log.ok()) return RefuseLog("status", log.status());
  // The log is read even with nothing pending here: "reconciled_with" is said only of a log
  // that answered (a dead, silent or garbage endpoint is refused, exit 4, naming it).
  if (st->pending.empty()) {
    auto leader = log.value()->CurrentLeader();
    if (!leader.ok()) return RefuseLog("status", leader.status());
  }
  json pending = json::array(), ended = json::array(), missing = json::array();
  for (const std::string& tx : st->pending) {
    auto d = log.value()->Read(tx);
    if (!d.ok()) return RefuseLog("status", d.status());
    (!d.value() ? missing : d.value()->ended ? ended : pending).push_back(tx);
  }
  s["pending"] = std::move(pending);
  s["ended_in_log"] = std::move(ended);  // pending here, ended by the log (another leader)
  if (!missing.empty()) s["not_in_log"] = std::move(missing);  // wtx check explains these
  s["reconciled_with"] = log.value()->Describe();
  return PrintState(s, as_json);
}

int Replay(const std::string& dir) {
  if (Status s = CheckJournalDir(dir); !s.ok()) return Refuse("replay", s);
  // The same integrity check as `wtx check` first: a replay of damaged history would print a
  // state that never existed.
  auto r = ReplayJournal(dir);
  if (!r.ok()) return Refuse("replay", r.status());
  Warn("replay", r->warnings);
  json out = {{"records", r->records},
              {"state", json::parse(r->state_json)},
              {"matches_stored_state", r->matches_stored_state}};
  std::cout << out.dump(2) << "\n";
  return r->matches_stored_state ? kExitOk : kExitJournalCorrupt;
}

// Exit 0: consistent (warnings on stderr); 3: corrupt (the message names what is wrong);
// 2: DIR missing, not a directory, empty or without a journal.
int Check(const std::string& dir, int expect_rank, bool expect_coordinator, bool strict) {
  if (Status s = CheckJournalDir(dir); !s.ok()) return Refuse("check", s);
  JournalVerifyOptions o;
  o.strict = strict;
  if (expect_coordinator) o.expect = JournalOwner{"coordinator", -1};
  if (expect_rank >= 0) o.expect = JournalOwner{"participant", expect_rank};
  // Progress on a terminal (progress.h): the records replayed.
  Progress progress("check: records replayed", 0, Progress::Unit::kItems,
                    ProgressWanted(/*json=*/false));
  o.on_record = [&progress](uint64_t done, uint64_t total) {
    progress.Set(static_cast<int64_t>(done), static_cast<int64_t>(total));
  };
  JournalVerification rep = VerifyJournal(dir, o);
  progress.Finish();
  if (!rep.status.ok()) return Refuse("check", rep.status);
  Warn("check", rep.warnings);
  const JournalOwner& id = rep.owner;
  std::cout << "ok: " << dir << " (" << id.role
            << (id.role == "participant" ? " rank " + std::to_string(id.rank) : "")
            << (rep.owner_checked ? " as expected" : "; identity not checked") << ", "
            << rep.records << " records, synced through record "
            << (rep.synced_through ? std::to_string(*rep.synced_through) : std::string("-"))
            << ", checksums, chain and state consistent"
            << (rep.torn_tail ? ", torn unsynced tail" : "") << ")\n";
  return kExitOk;
}

}  // namespace

void RegisterJournalCommands(CLI::App& app, int* exit_code) {
  auto dir = std::make_shared<std::string>();
  auto tx = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);

  auto shared = std::make_shared<DecisionLogFlags>();
  // DIR is required unless --decision-log names the shared log to read instead.
  auto need_dir = [=](const std::string& cmd) -> int {
    if (shared->url.empty() && dir->empty()) {
      std::cerr << "wtx " << cmd << ": give DIR (a journal) or --decision-log\n";
      return kExitInvalidInput;
    }
    return kExitOk;
  };

  auto* log = app.add_subcommand("log", "One line per transaction in a journal");
  log->add_option("dir", *dir, "Journal directory (e.g. DIR/rank-0)");
  log->add_flag("--json", *as_json, "JSON output");
  AddDecisionLogFlags(log, shared.get());
  log->callback([=] {
    if ((*exit_code = need_dir("log")) != kExitOk) return;
    *exit_code = shared->url.empty() ? Log(*dir, *as_json) : LogShared(*shared, *as_json);
  });

  auto* show = app.add_subcommand("show", "Everything the journal holds about one transaction");
  show->add_option("dir", *dir, "Journal directory (omitted with --decision-log)");
  show->add_option("tx", *tx, "Transaction id");
  show->add_flag("--json", *as_json, "Compact JSON output");
  auto at = std::make_shared<std::string>();
  show->add_option("--at", *at,
                   "Instead of TX: what the rank served at TIME (seconds since the epoch, or UTC "
                   "as wtx log prints it): version, step, since, until, or why it held");
  AddDecisionLogFlags(show, shared.get());
  show->callback([=] {
    if (!at->empty()) {
      if (!tx->empty() || !shared->url.empty() || dir->empty()) {
        std::cerr << "wtx show: --at takes a rank's journal DIR alone (no TX, no --decision-log)\n";
        *exit_code = kExitInvalidInput;
        return;
      }
      *exit_code = ShowAt(*dir, *at, *as_json);
      return;
    }
    // With --decision-log the one positional is the transaction id.
    const std::string id = !shared->url.empty() && tx->empty() ? *dir : *tx;
    if (id.empty() || (shared->url.empty() && dir->empty())) {
      std::cerr << "wtx show: give DIR TX, or --decision-log URL TX\n";
      *exit_code = kExitInvalidInput;
      return;
    }
    *exit_code = shared->url.empty() ? Show(*dir, id, *as_json) : ShowShared(*shared, id, *as_json);
  });

  auto* status = app.add_subcommand("status", "Version, dirty, loaded and in-doubt state");
  status->add_option("dir", *dir,
                     "Journal directory (with --decision-log: a coordinator's audit journal, its "
                     "pending decisions reconciled with the log)");
  status->add_flag("--json", *as_json, "JSON output");
  AddDecisionLogFlags(status, shared.get());
  status->callback([=] {
    if ((*exit_code = need_dir("status")) != kExitOk) return;
    // DIR and --decision-log: the journal's state, its pending decisions reconciled with the
    // log; --decision-log alone: the log's own state.
    *exit_code =
        !dir->empty() ? StatusCmd(*dir, *shared, *as_json) : StatusShared(*shared, *as_json);
  });

  auto* replay = app.add_subcommand("replay", "Rebuild the state from the records and print it");
  replay->add_option("dir", *dir, "Journal directory")->required();
  replay->callback([=] { *exit_code = Replay(*dir); });

  auto* check = app.add_subcommand(
      "check", "Verify integrity (files, checksums, chain, state, identity); exit 3 if corrupt");
  auto expect_rank = std::make_shared<int>(-1);
  auto expect_coordinator = std::make_shared<bool>(false);
  check->add_option("dir", *dir,
                    "Journal directory (with --decision-log: a coordinator's audit journal to "
                    "compare, optional)");
  AddDecisionLogFlags(check, shared.get());
  AddIntOption(check, "--expect-rank", expect_rank.get(), kRankIdBounds,
               "The journal must be participant N's (default: inferred from a rank-N "
               "directory name)");
  check->add_flag("--expect-coordinator", *expect_coordinator,
                  "The journal must be the coordinator's (default: inferred from the name)");
  auto strict = std::make_shared<bool>(false);
  check->add_flag("--strict", *strict,
                  "Warnings (a torn unsynced tail, a missing sync watermark) fail the check too");
  check->callback([=] {
    if ((*exit_code = need_dir("check")) != kExitOk) return;
    if (!dir->empty()) {
      *exit_code = Check(*dir, *expect_rank, *expect_coordinator, *strict);
      if (*exit_code != kExitOk) return;
    }
    if (!shared->url.empty()) *exit_code = CheckShared(*shared, *dir);
  });
}

}  // namespace wtx::cli
