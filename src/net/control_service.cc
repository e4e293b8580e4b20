#include "src/net/control_service.h"

#include <algorithm>
#include <iostream>

#include "src/net/codec.h"

namespace wtx::sim {

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

json StatusJson(const Status& s) {
  return {{"code", ErrorCodeName(s.code())}, {"message", s.message()}};
}

Status StatusFromJson(const json& j) {
  if (j.is_object() && j.value("code", "") == ErrorCodeName(ErrorCode::kOk)) return Status::OK();
  return net::StatusFromJson(j);
}

json RankStepToJson(const Step& st) {
  json fill;
  if (st.fill.zeros) {
    fill = "zeros";
  } else {
    fill = {{"seed", st.fill.seed}};
    if (st.fill.has_override) {
      std::vector<int64_t> idx(st.fill.override_indices.begin(), st.fill.override_indices.end());
      std::sort(idx.begin(), idx.end());
      fill["override"] = {{"seed", st.fill.override_seed}, {"indices", idx}};
    }
  }
  json j = {{"op", st.op},         {"param", st.param}, {"shard", st.shard},
            {"source", st.source}, {"fill", fill},      {"indices", st.indices},
            {"part", st.part},     {"parts", st.parts}, {"derived", st.derived},
            {"value", st.value},   {"index", st.index}};
  if (st.box) j["box"] = net::BoxToJson(*st.box);
  return j;
}

Result<Step> RankStepFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("step: expected a map");
  // Fields default as in a scenario step, so that a hand-written {"op": "write", "param": "*",
  // "fill": {"seed": 1}} works too.
  return Guard<Step>("step", [&]() -> Result<Step> {
    Step st;
    st.op = j.at("op").get<std::string>();
    st.index = j.value("index", 0);
    const bool region_op = st.op == "write" || st.op == "reserve" || st.op == "land" ||
                           st.op == "poke";
    st.param = j.value("param", region_op ? std::string("*") : std::string());
    st.shard = j.value("shard", std::string());
    st.source = j.value("source", std::string());
    WTX_ASSIGN_OR_RETURN(fill, ParseFill(j.value("fill", json("zeros")), "step.fill"));
    st.fill = std::move(fill);
    st.indices = j.value("indices", std::vector<int64_t>());
    st.part = j.value("part", 0);
    st.parts = j.value("parts", 1);
    st.derived = j.value("derived", std::string());
    st.value = j.value("value", std::string());
    if (auto b = j.find("box"); b != j.end()) {
      WTX_ASSIGN_OR_RETURN(box, net::BoxFromJson(*b));
      st.box = std::move(box);
    }
    return st;
  });
}

json BeginOutcomeToJson(const BeginOutcome& o) {
  json errors = json::array();
  for (const auto& e : o.errors) {
    errors.push_back({{"rank", e.rank}, {"status", StatusJson(e.status)}});
  }
  return {{"status", StatusJson(o.status)}, {"errors", errors}};
}

Result<BeginOutcome> BeginOutcomeFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("begin outcome: expected a map");
  return Guard<BeginOutcome>("begin outcome", [&]() -> Result<BeginOutcome> {
    BeginOutcome o;
    o.status = StatusFromJson(j.at("status"));
    for (const auto& e : j.at("errors")) {
      o.errors.push_back({e.at("rank").get<int>(), StatusFromJson(e.at("status"))});
    }
    return o;
  });
}

json CommitOptionsToJson(const CommitOptions& o) {
  return {{"expect_version", o.expect_version ? json(*o.expect_version) : json()},
          {"expect_rank_digests", o.expect_rank_digests}};
}

Result<CommitOptions> CommitOptionsFromJson(const json& j) {
  CommitOptions o;
  if (j.is_null()) return o;
  if (!j.is_object()) return Status::InvalidArgument("commit options: expected a map");
  return Guard<CommitOptions>("commit options", [&]() -> Result<CommitOptions> {
    if (auto v = j.find("expect_version"); v != j.end() && !v->is_null()) {
      o.expect_version = v->get<std::string>();
    }
    o.expect_rank_digests = j.value("expect_rank_digests", std::vector<std::string>());
    return o;
  });
}

json CommitOutcomeToJson(const CommitOutcome& o) {
  json votes = json::array();
  for (const auto& v : o.votes) {
    const char* kind = v.kind == VoteReport::Kind::kYes       ? "yes"
                       : v.kind == VoteReport::Kind::kNo      ? "no"
                       : v.kind == VoteReport::Kind::kTimeout ? "timeout"
                                                              : "crashed";
    votes.push_back({{"rank", v.rank},
                     {"kind", kind},
                     {"vote", net::VoteToJson(v.vote)},
                     {"status", StatusJson(v.status)}});
  }
  return {{"status", StatusJson(o.status)},
          {"decision", o.decision ? json(DecisionName(*o.decision)) : json()},
          {"decision_logged", o.decision_logged},
          {"version", o.version},
          {"votes", votes},
          {"unacknowledged", o.unacknowledged}};
}

Result<CommitOutcome> CommitOutcomeFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("commit outcome: expected a map");
  return Guard<CommitOutcome>("commit outcome", [&]() -> Result<CommitOutcome> {
    CommitOutcome o;
    o.status = StatusFromJson(j.at("status"));
    if (!j.at("decision").is_null()) {
      auto d = DecisionFromName(j.at("decision").get<std::string>());
      if (!d) return Status::InvalidArgument("commit outcome: unknown decision");
      o.decision = *d;
    }
    o.decision_logged = j.at("decision_logged").get<bool>();
    o.version = j.at("version").get<std::string>();
    for (const auto& v : j.at("votes")) {
      VoteReport r;
      r.rank = v.at("rank").get<int>();
      const std::string kind = v.at("kind").get<std::string>();
      r.kind = kind == "yes"       ? VoteReport::Kind::kYes
               : kind == "no"      ? VoteReport::Kind::kNo
               : kind == "timeout" ? VoteReport::Kind::kTimeout
                                   : VoteReport::Kind::kCrashed;
      WTX_ASSIGN_OR_RETURN(vote, net::VoteFromJson(v.at("vote")));
      r.vote = std::move(vote);
      r.status = StatusFromJson(v.at("status"));
      o.votes.push_back(std::move(r));
    }
    o.unacknowledged = j.at("unacknowledged").get<std::vector<int>>();
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
  }
  return a;
}

Result<std::vector<DecisionEntry>> DecisionsFromJson(const json& j) {
  if (!j.is_array()) return Status::InvalidArgument("decisions: expected an array");
  return Guard<std::vector<DecisionEntry>>(
      "decisions", [&]() -> Result<std::vector<DecisionEntry>> {
        std::vector<DecisionEntry> out;
        for (const auto& e : j) {
          DecisionEntry d;
          d.tx = e.at("tx").get<std::string>();
          d.decision =
              DecisionFromName(e.at("decision").get<std::string>()).value_or(Decision::kAbort);
          d.version = e.at("version").get<std::string>();
          d.reason = e.at("reason").get<std::string>();
          d.time_micros = e.at("ts").get<int64_t>();
          out.push_back(std::move(d));
        }
        return out;
      });
}

void PrintReadyLine(const nlohmann::json& line) { std::cout << line.dump() << std::endl; }

int FailToStart(std::string_view command, const Status& s) {
  PrintReadyLine({{"ready", false}, {"error", StatusJson(s)}});
  std::cerr << "wtx " << command << ": " << s.ToString() << "\n";
  return 1;
}

}  // namespace wtx::sim
