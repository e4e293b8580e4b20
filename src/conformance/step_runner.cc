// The steps of a scenario on any SimProcesses (RunSteps, simulator.h): each step dispatched to
// the coordinator or to the targeted ranks (their data-plane steps through
// SimProcesses::RankStep), and the output document of spec/scenario.md built from the outcomes,
// the ranks' states and the coordinator's decisions (read from the journals of dead processes).
//
// Thread-safety: a Runner is used from one thread, like the SimProcesses it drives.
#include "src/conformance/simulator.h"

#include <map>

#include "journal/journal.h"
#include "src/manifest/box_json.h"
#include "src/txn/coordinator_records.h"
#include "wtx/coordinator.h"

namespace wtx::sim {

using nlohmann::json;

namespace {

// The steps of a scenario and the output document, on any SimProcesses.
class Runner {
 public:
  Runner(const Scenario& sc, SimProcesses& procs, std::string dir)
      : sc_(sc), procs_(procs), dir_(std::move(dir)) {}

  json Run() {
    json steps = json::array();
    for (const Step& st : sc_.steps) {
      json out = {{"i", st.index}, {"op", st.op}};
      RunStep(st, out);
      steps.push_back(std::move(out));
    }
    return {
        {"steps", std::move(steps)}, {"ranks", RanksJson()}, {"coordinator", CoordinatorJson()}};
  }

 private:
  std::vector<int> Targets(const RankTarget& t) const {
    if (!t.all) return {t.rank};
    std::vector<int> v;
    v.reserve(sc_.ranks);
    for (int r = 0; r < sc_.ranks; ++r) v.push_back(r);
    return v;
  }

  static void Fail(json& out, const std::vector<std::pair<int, Status>>& errs) {
    out["ok"] = false;
    out["error"] = ErrorCodeName(errs.front().second.code());
    out["message"] = errs.front().second.message();
    json ranks = json::array(), detail = json::array();
    for (const auto& [r, s] : errs) {
      if (r >= 0) ranks.push_back(r);
      detail.push_back({{"rank", r >= 0 ? json(r) : json()},
                        {"error", ErrorCodeName(s.code())},
                        {"message", s.message()}});
    }
    out["ranks"] = ranks;
    out["errors"] = detail;
  }

  // Runs a data-plane step on every targeted rank; a dead rank fails with E_CRASHED.
  void ForRanks(const Step& st, json& out) {
    std::vector<std::pair<int, Status>> errs;
    for (int r : Targets(st.target)) {
      Status s = procs_.RankAlive(r)
                     ? procs_.RankStep(r, st, scope_)
                     : Status(ErrorCode::kCrashed, "rank " + std::to_string(r) + " is down");
      if (!s.ok()) errs.emplace_back(r, s);
    }
    if (errs.empty()) {
      out["ok"] = true;
    } else {
      Fail(out, errs);
    }
  }

  std::string ResolveBase(const std::string& ref) {
    if (ref.empty() || ref[0] != '$') return ref;
    const std::string tx = ref.substr(1);
    if (procs_.CoordinatorAlive()) {
      if (auto v = procs_.CommittedVersion(tx)) return *v;
    }
    auto it = committed_.find(tx);
    if (it != committed_.end()) return it->second;
    return "(" + ref + ": transaction did not commit)";
  }

  void RunStep(const Step& st, json& out) {
    if (st.op == "begin") return DoBegin(st, out);
    if (st.op == "write" || st.op == "patch" || st.op == "refresh" ||
        st.op == "set_kernel_identity" || st.op == "reserve" || st.op == "land" ||
        st.op == "poke" || st.op == "load_checkpoint") {
      return ForRanks(st, out);
    }
    if (st.op == "commit") return DoCommit(st, out);
    if (st.op == "abort") return DoAbort(st, out);
    if (st.op == "crash") return DoCrash(st, out);
    if (st.op == "restart") return DoRestart(st, out);
  }

  void DoBegin(const Step& st, json& out) {
    if (!procs_.CoordinatorAlive()) {
      return Fail(out, {{-1, Status(ErrorCode::kCrashed, "the coordinator is down")}});
    }
    BeginRequest req = st.begin;
    req.base = ResolveBase(st.base_ref);
    BeginOutcome o = procs_.Begin(req);
    if (o.status.ok()) {
      out["ok"] = true;
      if (!o.lineage.empty()) out["lineage"] = o.lineage;
      if (o.step) out["step"] = *o.step;
      scope_ = req;
      return;
    }
    std::vector<std::pair<int, Status>> errs;
    for (const auto& e : o.errors) errs.emplace_back(e.rank, e.status);
    if (errs.empty()) errs.emplace_back(-1, o.status);
    Fail(out, errs);
  }

  static json VoteJson(const VoteReport& v) {
    json j = {{"rank", v.rank}, {"vote", VoteKindName(v.kind)}};
    switch (v.kind) {
      case VoteReport::Kind::kYes:
        j["wrote"] = v.vote.wrote;
        return j;
      case VoteReport::Kind::kTimeout:
        j["error"] = "E_TIMEOUT";
        j["message"] = v.status.message();
        return j;
      case VoteReport::Kind::kCrashed:
        j["error"] = "E_CRASHED";
        j["message"] = v.status.message();
        return j;
      case VoteReport::Kind::kNo:
        break;
    }
    j["wrote"] = v.vote.wrote;
    j["error"] = ErrorCodeName(v.vote.error);
    json errors = json::array();
    for (auto e : v.vote.errors) errors.push_back(ErrorCodeName(e));
    j["errors"] = errors;
    j["message"] = v.vote.message;
    if (!v.vote.missing.empty()) {
      json missing = json::array();
      for (const auto& m : v.vote.missing) {
        json jm = {{"param", m.param},
                   {"shard", m.shard},
                   {"box", BoxToJson(m.box)},
                   {"source", m.source}};
        if (m.boxes != 1) jm["boxes"] = m.boxes;  // box bounds that many merged gaps
        jm["elements"] = m.elements;
        if (!m.missing_parts.empty()) {
          jm["missing_parts"] = m.missing_parts;
          jm["parts"] = m.parts;
        }
        missing.push_back(std::move(jm));
      }
      j["missing"] = std::move(missing);
      j["missing_total"] = v.vote.missing_total;
    }
    if (!v.vote.stale.empty()) {
      json stale = json::array();
      for (const auto& s : v.vote.stale) {
        stale.push_back(
            {{"derived", s.name}, {"phase", PhaseName(s.phase)}, {"sources", s.written_sources}});
      }
      j["stale"] = std::move(stale);
    }
    return j;
  }

  void DoCommit(const Step& st, json& out) {
    if (!procs_.CoordinatorAlive()) {
      return Fail(out, {{-1, Status(ErrorCode::kCrashed, "the coordinator is down")}});
    }
    bool coordinator_died = false;
    Step resolved = st;
    if (!st.expect_version_ref.empty()) {
      resolved.commit_options.expect_version = ResolveBase(st.expect_version_ref);
      // "$tx": each rank's digest in that transaction too, so a mismatch names the ranks.
      if (st.expect_version_ref[0] == '$') {
        auto it = committed_digests_.find(st.expect_version_ref.substr(1));
        if (it != committed_digests_.end())
          resolved.commit_options.expect_rank_digests = it->second;
      }
    }
    CommitOutcome o = procs_.Commit(resolved, &coordinator_died);
    json votes = json::array();
    std::vector<int> failing;
    for (const auto& v : o.votes) {
      votes.push_back(VoteJson(v));
      if (v.kind != VoteReport::Kind::kYes) failing.push_back(v.rank);
    }
    if (!o.votes.empty()) out["votes"] = std::move(votes);
    if (o.decision) out["decision"] = DecisionName(*o.decision);
    if (o.decision == Decision::kCommit) {
      committed_[st.tx] = o.version;
      std::vector<std::string> digests;
      for (const auto& v : o.votes) digests.push_back(v.vote.digest);
      committed_digests_[st.tx] = std::move(digests);
      out["version"] = o.version;
      out["served_digest"] = o.served_digest;
    }
    if (o.step) out["step"] = *o.step;
    if (!o.lineage.empty()) out["lineage"] = o.lineage;
    if (coordinator_died) {
      out["ok"] = false;
      out["outcome"] = "in_doubt";
      out["error"] = "E_CRASHED";
      out["message"] = o.status.message();
      out["ranks"] = json::array();
      return;
    }
    if (o.status.ok() && o.decision) {
      out["ok"] = true;
      out["outcome"] = *o.decision == Decision::kNoop ? "noop" : "committed";
      if (!o.unacknowledged.empty()) out["unacknowledged"] = o.unacknowledged;
      scope_.reset();
      return;
    }
    out["ok"] = false;
    if (o.decision) {
      out["outcome"] = "aborted";
      scope_.reset();
    }
    out["error"] = ErrorCodeName(o.status.code());
    out["message"] = o.status.message();
    if (o.status.code() == ErrorCode::kVersionMismatch) {
      // Every rank voted yes: the failing ranks are those whose digest is not the expected one.
      const auto& want = resolved.commit_options.expect_rank_digests;
      for (const auto& v : o.votes) {
        if (want.size() != o.votes.size() || v.vote.digest != want[static_cast<size_t>(v.rank)]) {
          failing.push_back(v.rank);
        }
      }
    }
    out["ranks"] = failing;
  }

  void DoAbort(const Step& st, json& out) {
    if (!procs_.CoordinatorAlive()) {
      return Fail(out, {{-1, Status(ErrorCode::kCrashed, "the coordinator is down")}});
    }
    BeginOutcome o = procs_.Abort(st.tx);
    if (o.status.ok()) {
      out["ok"] = true;
      out["outcome"] = "aborted";
      scope_.reset();
    } else {
      Fail(out, {{-1, o.status}});
    }
  }

  void DoCrash(const Step& st, json& out) {
    const CrashSpec& c = *st.crash;
    const bool alive =
        c.who == "coordinator" ? procs_.CoordinatorAlive() : procs_.RankAlive(c.rank);
    if (!alive) {
      return Fail(out, {{c.rank, Status(ErrorCode::kCrashed, c.who + " is already down")}});
    }
    if (c.who == "coordinator") {
      procs_.KillCoordinator(c.power_loss);
    } else {
      procs_.KillRank(c.rank, c.power_loss);
    }
    out["ok"] = true;
  }

  void DoRestart(const Step& st, json& out) {
    const CrashSpec& c = *st.crash;
    Status s = c.who == "coordinator" ? procs_.RestartCoordinator() : procs_.RestartRank(c.rank);
    if (s.ok()) {
      out["ok"] = true;
    } else {
      Fail(out, {{c.rank, s}});
    }
  }

  json RankJson(int r) {
    json j = {{"rank", r}};
    if (procs_.RankAlive(r)) {
      RankStatus s = procs_.RankState(r);
      j["version"] = s.version ? json(*s.version) : json();
      j["served_digest"] = s.served_digest ? json(*s.served_digest) : json();
      j["digest"] = s.digest ? json(*s.digest) : json();
      j["dirty"] = s.dirty;
      j["loaded"] = s.loaded;
      j["serving"] = s.serving;
      j["in_doubt"] = s.in_doubt ? json(*s.in_doubt) : json();
      j["active_tx"] = s.active_tx ? json(*s.active_tx) : json();
      j["stale_derived"] = s.stale_derived;
      j["lineage"] = s.lineage;
      j["step"] = s.step ? json(*s.step) : json();
      j["crashed"] = false;
      return j;
    }
    // A dead process: report what its journal says.
    JournalOptions o;
    o.read_only = true;
    json st;
    if (auto jr = Journal::Open(dir_ + "/rank-" + std::to_string(r), o); jr.ok()) {
      st = jr.value()->state();
    }
    const json act = st.is_object() ? st.value("active", json()) : json();
    j["version"] = st.is_object() ? st.value("version", json()) : json();
    j["digest"] = st.is_object() ? st.value("digest", json()) : json();
    j["lineage"] = st.is_object() ? st.value("lineage", json("")) : json("");
    j["step"] = st.is_object() ? st.value("step", json()) : json();
    j["dirty"] = true;
    j["loaded"] = false;
    j["serving"] = false;
    j["in_doubt"] = (act.is_object() && act.value("vote", json()) == "yes") ? act["tx"] : json();
    j["crashed"] = true;
    return j;
  }

  json RanksJson() {
    json a = json::array();
    for (int r = 0; r < sc_.ranks; ++r) a.push_back(RankJson(r));
    return a;
  }

  json CoordinatorJson() {
    std::vector<DecisionEntry> ds;
    const bool alive = procs_.CoordinatorAlive();
    if (alive) {
      ds = procs_.Decisions();
    } else {
      JournalOptions o;
      o.read_only = true;
      if (auto jr = Journal::Open(dir_ + "/coordinator", o); jr.ok()) {
        jr.value()
            ->ForEachRecord([&](const json& r) {
              auto rec = DecodeCoordinatorRecord(r);
              if (!rec.ok()) return rec.status();
              if (const auto* d = std::get_if<DecisionRecord>(&rec.value())) {
                ds.push_back({d->tx, d->decision, d->version.value_or(""), d->reason, d->ts,
                              d->lineage, d->step});
              }
              return Status::OK();
            })
            .ok();
      }
    }
    json a = json::array();
    for (const auto& d : ds) {
      json e = {{"tx", d.tx}, {"decision", DecisionName(d.decision)}};
      e["version"] = d.version.empty() ? json() : json(d.version);
      if (!d.reason.empty()) e["reason"] = d.reason;
      if (!d.lineage.empty()) e["lineage"] = d.lineage;
      if (d.step) e["step"] = *d.step;
      a.push_back(std::move(e));
    }
    return {{"alive", alive}, {"decisions", std::move(a)}};
  }

  const Scenario& sc_;
  SimProcesses& procs_;
  std::string dir_;
  std::optional<BeginRequest> scope_;
  std::map<std::string, std::string> committed_;
  std::map<std::string, std::vector<std::string>> committed_digests_;  // tx -> rank digests
};

}  // namespace

json RunSteps(const Scenario& scenario, SimProcesses& processes, const std::string& journal_dir) {
  Runner runner(scenario, processes, journal_dir);
  return runner.Run();
}

}  // namespace wtx::sim
