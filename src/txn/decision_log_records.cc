#include "src/txn/decision_log_records.h"

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <vector>

#include "src/etcd/stored_record.h"
#include "src/util/json_fields.h"

namespace wtx {

namespace {

using etcd::DumpRecord;
using etcd::RecordCorrupt;
using etcd::RecordInt;
using etcd::RecordString;
using nlohmann::json;

constexpr std::string_view kMetaFormat = "wtx-decision-log";
constexpr std::string_view kLeaderFormat = "wtx-leader";
constexpr std::string_view kDecisionFormat = "wtx-decision";
constexpr std::string_view kEndFormat = "wtx-end";
constexpr std::string_view kBeatFormat = "wtx-beat";
constexpr int64_t kRecordVersion = 1;

// A record of `format` at kRecordVersion (etcd::ParseRecord).
Result<json> ParseRecord(std::string_view value, std::string_view format,
                         std::initializer_list<std::string_view> allowed) {
  return etcd::ParseRecord(value, format, kRecordVersion, allowed);
}

Status ReadVote(const json& j, LoggedVote* vote) {
  if (!j.is_object()) return RecordCorrupt(kDecisionFormat, "a vote is not an object");
  const Status fields = CheckFields(j, "votes[]", {"rank", "vote", "error"});
  if (!fields.ok()) return RecordCorrupt(kDecisionFormat, fields.message());
  int64_t rank = 0;
  WTX_RETURN_IF_ERROR(RecordInt(j, kDecisionFormat, "rank", &rank));
  if (rank < -1 || rank > INT32_MAX) return RecordCorrupt(kDecisionFormat, "a vote's rank");
  vote->rank = static_cast<int>(rank);
  WTX_RETURN_IF_ERROR(RecordString(j, kDecisionFormat, "vote", &vote->vote));
  return RecordString(j, kDecisionFormat, "error", &vote->error);
}

}  // namespace

std::string EncodeDecisionLogMeta(const DecisionLogMeta& meta) {
  return json{
      {"format", kMetaFormat}, {"v", kRecordVersion}, {"created_micros", meta.created_micros}}
      .dump();
}

Result<DecisionLogMeta> DecodeDecisionLogMeta(std::string_view value) {
  WTX_ASSIGN_OR_RETURN(j, ParseRecord(value, kMetaFormat, {"format", "v", "created_micros"}));
  DecisionLogMeta meta;
  WTX_RETURN_IF_ERROR(RecordInt(j, kMetaFormat, "created_micros", &meta.created_micros));
  return meta;
}

Result<std::string> EncodeLeaderRecord(const LeaderRecord& leader) {
  return DumpRecord(json{{"format", kLeaderFormat},
                         {"v", kRecordVersion},
                         {"holder", leader.holder},
                         {"lease", std::to_string(leader.lease)}},
                    "leader record of '" + leader.holder + "'");
}

Result<LeaderRecord> DecodeLeaderRecord(std::string_view value) {
  WTX_ASSIGN_OR_RETURN(j, ParseRecord(value, kLeaderFormat, {"format", "v", "holder", "lease"}));
  LeaderRecord leader;
  WTX_RETURN_IF_ERROR(RecordString(j, kLeaderFormat, "holder", &leader.holder));
  std::string lease;
  WTX_RETURN_IF_ERROR(RecordString(j, kLeaderFormat, "lease", &lease));
  size_t used = 0;
  try {
    leader.lease = std::stoll(lease, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (lease.empty() || used != lease.size()) {
    return RecordCorrupt(kLeaderFormat, "\"lease\" is not a decimal lease id");
  }
  return leader;
}

Result<std::string> EncodeDecisionRecord(const LoggedDecision& d) {
  json votes = json::array();
  for (const LoggedVote& v : d.votes) {
    votes.push_back({{"rank", v.rank}, {"vote", v.vote}, {"error", v.error}});
  }
  json j = {{"format", kDecisionFormat},
            {"v", kRecordVersion},
            {"tx", d.tx},
            {"decision", DecisionName(d.decision)},
            {"version", d.version},
            {"reason", d.reason},
            {"writer", d.writer},
            {"epoch", d.epoch},
            {"time_micros", d.time_micros},
            {"votes", std::move(votes)}};
  if (d.prepare_us) j["prepare_us"] = *d.prepare_us;
  if (!d.lineage.empty()) j["lineage"] = d.lineage;
  if (d.step) j["step"] = *d.step;
  if (const DecidedVersion v(d.version, d.served_digest); v.served() != v.version) {
    j["served_digest"] = v.served();
  }
  return DumpRecord(j, "decision on tx '" + d.tx + "'");
}

Result<LoggedDecision> DecodeDecisionRecord(std::string_view value, std::string_view tx) {
  WTX_ASSIGN_OR_RETURN(
      j, ParseRecord(value, kDecisionFormat,
                     {"format", "v", "tx", "decision", "version", "reason", "writer", "epoch",
                      "time_micros", "prepare_us", "votes", "lineage", "step", "served_digest"}));
  LoggedDecision d;
  WTX_RETURN_IF_ERROR(RecordString(j, kDecisionFormat, "tx", &d.tx));
  if (d.tx != tx) {
    return RecordCorrupt(kDecisionFormat,
                         "\"tx\" is '" + d.tx + "', not the key's '" + std::string(tx) + "'");
  }
  std::string decision;
  WTX_RETURN_IF_ERROR(RecordString(j, kDecisionFormat, "decision", &decision));
  const std::optional<Decision> parsed = DecisionFromName(decision);
  if (!parsed) return RecordCorrupt(kDecisionFormat, "unknown decision '" + decision + "'");
  d.decision = *parsed;
  WTX_RETURN_IF_ERROR(RecordString(j, kDecisionFormat, "version", &d.version));
  WTX_RETURN_IF_ERROR(RecordString(j, kDecisionFormat, "reason", &d.reason));
  WTX_RETURN_IF_ERROR(RecordString(j, kDecisionFormat, "writer", &d.writer));
  WTX_RETURN_IF_ERROR(RecordInt(j, kDecisionFormat, "epoch", &d.epoch));
  WTX_RETURN_IF_ERROR(RecordInt(j, kDecisionFormat, "time_micros", &d.time_micros));
  if (j.contains("prepare_us")) {
    int64_t prepare_us = 0;
    WTX_RETURN_IF_ERROR(RecordInt(j, kDecisionFormat, "prepare_us", &prepare_us));
    d.prepare_us = prepare_us;
  }
  if (j.contains("lineage")) {
    WTX_RETURN_IF_ERROR(RecordString(j, kDecisionFormat, "lineage", &d.lineage));
  }
  if (j.contains("served_digest")) {
    WTX_RETURN_IF_ERROR(RecordString(j, kDecisionFormat, "served_digest", &d.served_digest));
    if (d.version.empty())
      return RecordCorrupt(kDecisionFormat, "\"served_digest\" without a version");
  }
  if (j.contains("step")) {
    int64_t step = 0;
    WTX_RETURN_IF_ERROR(RecordInt(j, kDecisionFormat, "step", &step));
    if (step < 0) return RecordCorrupt(kDecisionFormat, "\"step\" is negative");
    d.step = step;
  }
  const auto votes = j.find("votes");
  if (votes == j.end() || !votes->is_array()) {
    return RecordCorrupt(kDecisionFormat, "\"votes\" is missing or not an array");
  }
  for (const json& v : *votes) {
    LoggedVote vote;
    WTX_RETURN_IF_ERROR(ReadVote(v, &vote));
    d.votes.push_back(std::move(vote));
  }
  return d;
}

std::string EncodeBeatRecord(const BeatRecord& beat) {
  return json{{"format", kBeatFormat},
              {"v", kRecordVersion},
              {"epoch", beat.epoch},
              {"ttl_ms", beat.ttl_ms}}
      .dump();
}

Result<BeatRecord> DecodeBeatRecord(std::string_view value) {
  WTX_ASSIGN_OR_RETURN(j, ParseRecord(value, kBeatFormat, {"format", "v", "epoch", "ttl_ms"}));
  BeatRecord beat;
  WTX_RETURN_IF_ERROR(RecordInt(j, kBeatFormat, "epoch", &beat.epoch));
  WTX_RETURN_IF_ERROR(RecordInt(j, kBeatFormat, "ttl_ms", &beat.ttl_ms));
  if (beat.ttl_ms <= 0) return RecordCorrupt(kBeatFormat, "\"ttl_ms\" is not positive");
  return beat;
}

std::string EncodeEndRecord() { return json{{"format", kEndFormat}, {"v", kRecordVersion}}.dump(); }

Status DecodeEndRecord(std::string_view value) {
  return ParseRecord(value, kEndFormat, {"format", "v"}).status();
}

Status NameStoredKey(const Status& status, std::string_view key, std::string_view endpoint) {
  return Status(status.code(), "etcd key '" + std::string(key) + "' (member " +
                                   std::string(endpoint) + "): " + status.message());
}

}  // namespace wtx
