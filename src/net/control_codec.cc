#include "src/net/control_codec.h"

#include <algorithm>
#include <iostream>

#include "src/net/codec.h"
#include "src/util/exit_codes.h"
#include "src/util/json_fields.h"
#include "src/util/json_number.h"
#include "wtx/limits.h"

namespace wtx::net {

using nlohmann::json;

namespace {

template <typename T, typename Fn>
Result<T> Guard(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string(what) + ": malformed: " + e.what());
  }
}

}  // namespace

Result<std::string> StringParam(const json& p, const std::string& m, const char* field) {
  auto it = p.is_object() ? p.find(field) : p.end();
  if (it == p.end() || !it->is_string()) {
    return Status::InvalidArgument(m + "." + field + ": expected a string");
  }
  return it->get<std::string>();
}

const json& Param(const json& p, const char* field) {
  static const json kNull;
  auto it = p.is_object() ? p.find(field) : p.end();
  return it == p.end() ? kNull : *it;
}

Status CheckControlParams(const std::string& m, const json& p) {
  if (!p.is_null() && !p.is_object()) {
    return Status::InvalidArgument(m + ": expected a map of parameters");
  }
  if (m == "begin") return CheckFields(p, m, {"req"});
  if (m == "commit") return CheckFields(p, m, {"tx", "options"});
  if (m == "abort" || m == "committed_version") return CheckFields(p, m, {"tx"});
  if (m == "wait_ranks") return CheckFields(p, m, {"ranks", "timeout_ms"});
  if (m == "step") return CheckFields(p, m, {"step", "scope"});
  if (m == "wait_resolved") return CheckFields(p, m, {"timeout_ms"});
  if (m == "read_live") return CheckFields(p, m, {"param", "offset", "length", "version"});
  if (m == "catch_up") return CheckFields(p, m, {"peer", "version"});
  if (m == "arm_crash") return CheckFields(p, m, {"point"});
  if (m == "set_silent") return CheckFields(p, m, {"silent"});
  if (m == "crash") return CheckFields(p, m, {"power_loss"});
  if (m == "status" || m == "ping" || m == "decisions" || m == "recover" || m == "connected" ||
      m == "disarm" || m == "verify" || m == "reattach") {
    return CheckFields(p, m, {});
  }
  return Status::OK();
}

namespace {

// The lineage and step of an outcome or decision (docs/fleet.md): present only where set.
void AddLineageStep(json& j, const std::string& lineage, const std::optional<int64_t>& step) {
  if (!lineage.empty()) j["lineage"] = lineage;
  if (step) j["step"] = *step;
}

// Inside a Guard: a field of the wrong type throws, and the guard names it.
void ReadLineageStep(const json& j, std::string* lineage, std::optional<int64_t>* step) {
  *lineage = j.value("lineage", std::string());
  if (auto s = j.find("step"); s != j.end() && !s->is_null()) {
    *step = JsonIntOrThrow(*s, "step", 0, INT64_MAX);
  }
}

}  // namespace

json BeginOutcomeToJson(const BeginOutcome& o) {
  json errors = json::array();
  for (const auto& e : o.errors) {
    errors.push_back({{"rank", e.rank}, {"status", net::StatusToJson(e.status)}});
  }
  json j = {{"status", net::StatusToJson(o.status)}, {"errors", errors}};
  AddLineageStep(j, o.lineage, o.step);
  return j;
}

Result<BeginOutcome> BeginOutcomeFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("begin outcome: expected a map");
  return Guard<BeginOutcome>("begin outcome", [&]() -> Result<BeginOutcome> {
    WTX_RETURN_IF_ERROR(CheckFields(j, "begin outcome", {"status", "errors", "lineage", "step"}));
    BeginOutcome o;
    ReadLineageStep(j, &o.lineage, &o.step);
    o.status = net::StatusOrOkFromJson(j.at("status"));
    for (const auto& e : j.at("errors")) {
      WTX_RETURN_IF_ERROR(CheckFields(e, "begin outcome.errors[]", {"rank", "status"}));
      o.errors.push_back(
          {static_cast<int>(JsonIntOrThrow(e.at("rank"), "errors[].rank", -1, kMaxRanks - 1)),
           net::StatusOrOkFromJson(e.at("status"))});
    }
    return o;
  });
}

json CommitOptionsToJson(const CommitOptions& o) {
  json j = {{"expect_version", o.expect_version ? json(*o.expect_version) : json()},
            {"expect_rank_digests", o.expect_rank_digests}};
  if (o.expect_served_digest) j["expect_served_digest"] = *o.expect_served_digest;
  return j;
}

Result<CommitOptions> CommitOptionsFromJson(const json& j) {
  CommitOptions o;
  if (j.is_null()) return o;
  if (!j.is_object()) return Status::InvalidArgument("commit options: expected a map");
  WTX_RETURN_IF_ERROR(CheckFields(
      j, "commit.options", {"expect_version", "expect_rank_digests", "expect_served_digest"}));
  return Guard<CommitOptions>("commit options", [&]() -> Result<CommitOptions> {
    if (auto v = j.find("expect_version"); v != j.end() && !v->is_null()) {
      if (!v->is_string() || v->get_ref<const std::string&>().empty()) {
        return Status::InvalidArgument("commit.options.expect_version: expected a version string");
      }
      o.expect_version = v->get<std::string>();
    }
    if (auto v = j.find("expect_served_digest"); v != j.end() && !v->is_null()) {
      if (!v->is_string() || v->get_ref<const std::string&>().empty()) {
        return Status::InvalidArgument(
            "commit.options.expect_served_digest: expected a digest string");
      }
      o.expect_served_digest = v->get<std::string>();
    }
    if (auto d = j.find("expect_rank_digests"); d != j.end() && !d->is_null()) {
      if (!d->is_array() ||
          !std::all_of(d->begin(), d->end(), [](const json& x) { return x.is_string(); })) {
        return Status::InvalidArgument(
            "commit.options.expect_rank_digests: expected an array of digest strings");
      }
      o.expect_rank_digests = d->get<std::vector<std::string>>();
    }
    return o;
  });
}

json CommitOutcomeToJson(const CommitOutcome& o) {
  json votes = json::array();
  for (const auto& v : o.votes) {
    votes.push_back({{"rank", v.rank},
                     {"kind", VoteKindName(v.kind)},
                     {"vote", net::VoteToJson(v.vote)},
                     {"status", net::StatusToJson(v.status)}});
  }
  json j = {{"status", net::StatusToJson(o.status)},
            {"decision", o.decision ? json(DecisionName(*o.decision)) : json()},
            {"decision_logged", o.decision_logged},
            {"version", o.version},
            {"served_digest", o.served_digest},
            {"votes", votes},
            {"unacknowledged", o.unacknowledged}};
  AddLineageStep(j, o.lineage, o.step);
  return j;
}

Result<CommitOutcome> CommitOutcomeFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("commit outcome: expected a map");
  return Guard<CommitOutcome>("commit outcome", [&]() -> Result<CommitOutcome> {
    // crash_fired: added by `wtx coordinator --test-hooks` beside the outcome.
    WTX_RETURN_IF_ERROR(
        CheckFields(j, "commit outcome",
                    {"status", "decision", "decision_logged", "version", "served_digest", "votes",
                     "unacknowledged", "crash_fired", "lineage", "step"}));
    CommitOutcome o;
    ReadLineageStep(j, &o.lineage, &o.step);
    o.status = net::StatusOrOkFromJson(j.at("status"));
    if (!j.at("decision").is_null()) {
      auto d = DecisionFromName(j.at("decision").get<std::string>());
      if (!d) return Status::InvalidArgument("commit outcome: unknown decision");
      o.decision = *d;
    }
    o.decision_logged = j.at("decision_logged").get<bool>();
    o.version = j.at("version").get<std::string>();
    // Absent from a coordinator of an older wtx: the version's.
    o.served_digest =
        j.contains("served_digest") ? j.at("served_digest").get<std::string>() : o.version;
    for (const auto& v : j.at("votes")) {
      WTX_RETURN_IF_ERROR(
          CheckFields(v, "commit outcome.votes[]", {"rank", "kind", "vote", "status"}));
      VoteReport r;
      r.rank = static_cast<int>(JsonIntOrThrow(v.at("rank"), "votes[].rank", -1, kMaxRanks - 1));
      auto kind = VoteKindFromName(v.at("kind").get<std::string>());
      if (!kind) {
        return Status::InvalidArgument(
            "commit outcome.votes[].kind: expected yes, no, timeout "
            "or crashed");
      }
      r.kind = *kind;
      WTX_ASSIGN_OR_RETURN(vote, net::VoteFromJson(v.at("vote")));
      r.vote = std::move(vote);
      r.status = net::StatusOrOkFromJson(v.at("status"));
      o.votes.push_back(std::move(r));
    }
    for (const auto& r : j.at("unacknowledged")) {
      o.unacknowledged.push_back(
          static_cast<int>(JsonIntOrThrow(r, "unacknowledged[]", 0, kMaxRanks - 1)));
    }
    return o;
  });
}

json DecisionsToJson(const std::vector<DecisionEntry>& ds) {
  json a = json::array();
  for (const auto& d : ds) {
    a.push_back({{"tx", d.tx},
                 {"decision", DecisionName(d.decision)},
                 {"version", d.version},
                 {"reason", d.reason},
                 {"ts", d.time_micros}});
    if (!d.served_digest.empty()) a.back()["served_digest"] = d.served_digest;
    AddLineageStep(a.back(), d.lineage, d.step);
  }
  return a;
}

Result<std::vector<DecisionEntry>> DecisionsFromJson(const json& j) {
  if (!j.is_array()) return Status::InvalidArgument("decisions: expected an array");
  return Guard<std::vector<DecisionEntry>>(
      "decisions", [&]() -> Result<std::vector<DecisionEntry>> {
        std::vector<DecisionEntry> out;
        for (const auto& e : j) {
          WTX_RETURN_IF_ERROR(CheckFields(
              e, "decisions[]",
              {"tx", "decision", "version", "served_digest", "reason", "ts", "lineage", "step"}));
          DecisionEntry d;
          ReadLineageStep(e, &d.lineage, &d.step);
          d.tx = e.at("tx").get<std::string>();
          d.decision =
              DecisionFromName(e.at("decision").get<std::string>()).value_or(Decision::kAbort);
          d.version = e.at("version").get<std::string>();
          d.served_digest = e.value("served_digest", std::string());
          d.reason = e.at("reason").get<std::string>();
          d.time_micros = JsonIntOrThrow(e.at("ts"), "ts", INT64_MIN, INT64_MAX);
          out.push_back(std::move(d));
        }
        return out;
      });
}

void PrintReadyLine(const nlohmann::json& line) { std::cout << line.dump() << std::endl; }

int FailToStart(std::string_view command, const Status& s) {
  PrintReadyLine({{"ready", false}, {"error", net::StatusToJson(s)}});
  std::cerr << "wtx " << command << ": " << s.ToString() << "\n";
  return ExitCodeFor(s);
}

}  // namespace wtx::net
