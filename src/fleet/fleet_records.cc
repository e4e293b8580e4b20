#include "src/fleet/fleet_records.h"

#include <nlohmann/json.hpp>

#include "src/etcd/stored_record.h"

namespace wtx {

const char* ReplicaStateName(ReplicaState state) {
  switch (state) {
    case ReplicaState::kServing:
      return "serving";
    case ReplicaState::kUpdating:
      return "updating";
    case ReplicaState::kHeld:
      return "held";
    case ReplicaState::kCatchingUp:
      return "catching_up";
  }
  return "held";
}

namespace fleet {

namespace {

using etcd::RecordCorrupt;
using etcd::RecordInt;
using etcd::RecordString;
using nlohmann::json;

constexpr std::string_view kPolicyFormat = "wtx-fleet-policy";
constexpr std::string_view kStepFormat = "wtx-fleet-step";
constexpr std::string_view kRankFormat = "wtx-fleet-rank";
constexpr int64_t kRecordVersion = 1;
constexpr size_t kMaxNameLength = 128;

json Header(std::string_view format) { return {{"format", format}, {"v", kRecordVersion}}; }

Status ReadStep(const json& j, std::string_view format, const char* name, int64_t* out) {
  WTX_RETURN_IF_ERROR(RecordInt(j, format, name, out));
  if (*out < 0) return RecordCorrupt(format, std::string("\"") + name + "\" is negative");
  return Status::OK();
}

// An optional field: absent from nothing, null, or read by `read`.
template <typename T, typename Read>
Status ReadNullable(const json& j, const char* name, std::optional<T>* out, Read read) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return Status::OK();
  T value{};
  WTX_RETURN_IF_ERROR(read(&value));
  *out = std::move(value);
  return Status::OK();
}

}  // namespace

FleetKeys::FleetKeys(std::string_view prefix, std::string_view fleet)
    : base(std::string(prefix) + "/fleet/" + std::string(fleet) + "/") {}

std::string FleetKeys::rank(std::string_view replica, int rank) const {
  return ranks() + std::string(replica) + "/" + std::to_string(rank);
}

Status CheckFleetName(std::string_view what, std::string_view name) {
  const std::string quoted = std::string(what) + " '" + std::string(name) + "'";
  if (name.empty()) return Status::InvalidArgument(std::string(what) + ": empty");
  if (name.size() > kMaxNameLength) {
    return Status::InvalidArgument(quoted + ": longer than " + std::to_string(kMaxNameLength) +
                                   " characters");
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument(quoted +
                                     ": only letters, digits, '.', '_' and '-' may "
                                     "name it");
    }
  }
  if (name == "." || name == "..") return Status::InvalidArgument(quoted + ": not a name");
  return Status::OK();
}

std::optional<ReplicaState> ReplicaStateFromName(std::string_view name) {
  for (ReplicaState s : {ReplicaState::kServing, ReplicaState::kUpdating, ReplicaState::kHeld,
                         ReplicaState::kCatchingUp}) {
    if (name == ReplicaStateName(s)) return s;
  }
  return std::nullopt;
}

Result<std::string> EncodePolicy(const FleetPolicy& policy) {
  json j = Header(kPolicyFormat);
  j["max_lag"] = policy.max_lag ? json(*policy.max_lag) : json();
  j["quorum"] = policy.quorum;
  j["lineage"] = policy.lineage;
  return etcd::DumpRecord(j, "fleet policy");
}

Result<FleetPolicy> DecodePolicy(std::string_view value) {
  WTX_ASSIGN_OR_RETURN(j, etcd::ParseRecord(value, kPolicyFormat, kRecordVersion,
                                            {"format", "v", "max_lag", "quorum", "lineage"}));
  FleetPolicy policy;
  WTX_RETURN_IF_ERROR(ReadNullable<int64_t>(j, "max_lag", &policy.max_lag, [&](int64_t* v) {
    return ReadStep(j, kPolicyFormat, "max_lag", v);
  }));
  int64_t quorum = 0;
  WTX_RETURN_IF_ERROR(ReadStep(j, kPolicyFormat, "quorum", &quorum));
  if (quorum > INT32_MAX) return RecordCorrupt(kPolicyFormat, "\"quorum\" is too large");
  policy.quorum = static_cast<int>(quorum);
  WTX_RETURN_IF_ERROR(RecordString(j, kPolicyFormat, "lineage", &policy.lineage));
  return policy;
}

Result<std::string> EncodeStepMark(const StepMark& mark) {
  json j = Header(kStepFormat);
  j["lineage"] = mark.lineage;
  j["step"] = mark.step;
  j["version"] = mark.version;
  j["replica"] = mark.replica;
  j["time_micros"] = mark.time_micros;
  return etcd::DumpRecord(j, "fleet step of lineage '" + mark.lineage + "'");
}

Result<StepMark> DecodeStepMark(std::string_view value) {
  WTX_ASSIGN_OR_RETURN(j, etcd::ParseRecord(value, kStepFormat, kRecordVersion,
                                            {"format", "v", "lineage", "step", "version", "replica",
                                             "time_micros"}));
  StepMark mark;
  WTX_RETURN_IF_ERROR(RecordString(j, kStepFormat, "lineage", &mark.lineage));
  WTX_RETURN_IF_ERROR(ReadStep(j, kStepFormat, "step", &mark.step));
  WTX_RETURN_IF_ERROR(RecordString(j, kStepFormat, "version", &mark.version));
  WTX_RETURN_IF_ERROR(RecordString(j, kStepFormat, "replica", &mark.replica));
  WTX_RETURN_IF_ERROR(RecordInt(j, kStepFormat, "time_micros", &mark.time_micros));
  return mark;
}

Result<std::string> EncodeRankRecord(const RankRecord& r) {
  json j = Header(kRankFormat);
  j["replica"] = r.replica;
  j["rank"] = r.rank;
  j["world"] = r.world;
  j["lineage"] = r.lineage;
  j["step"] = r.step ? json(*r.step) : json();
  j["version"] = r.version ? json(*r.version) : json();
  j["state"] = ReplicaStateName(r.state);
  j["reason"] = r.reason;
  j["time_micros"] = r.time_micros;
  j["control"] = r.control;
  return etcd::DumpRecord(j, "fleet record of replica '" + r.replica + "'");
}

Result<RankRecord> DecodeRankRecord(std::string_view value) {
  WTX_ASSIGN_OR_RETURN(
      j, etcd::ParseRecord(value, kRankFormat, kRecordVersion,
                           {"format", "v", "replica", "rank", "world", "lineage", "step", "version",
                            "state", "reason", "time_micros", "control"}));
  RankRecord r;
  WTX_RETURN_IF_ERROR(RecordString(j, kRankFormat, "replica", &r.replica));
  int64_t rank = 0;
  int64_t world = 0;
  WTX_RETURN_IF_ERROR(ReadStep(j, kRankFormat, "rank", &rank));
  WTX_RETURN_IF_ERROR(ReadStep(j, kRankFormat, "world", &world));
  if (rank > INT32_MAX || world > INT32_MAX || (world > 0 && rank >= world)) {
    return RecordCorrupt(kRankFormat, "\"rank\" " + std::to_string(rank) +
                                          " does not fit \"world\" " + std::to_string(world));
  }
  r.rank = static_cast<int>(rank);
  r.world = static_cast<int>(world);
  WTX_RETURN_IF_ERROR(RecordString(j, kRankFormat, "lineage", &r.lineage));
  WTX_RETURN_IF_ERROR(ReadNullable<int64_t>(
      j, "step", &r.step, [&](int64_t* v) { return ReadStep(j, kRankFormat, "step", v); }));
  WTX_RETURN_IF_ERROR(ReadNullable<std::string>(j, "version", &r.version, [&](std::string* v) {
    return RecordString(j, kRankFormat, "version", v);
  }));
  std::string state;
  WTX_RETURN_IF_ERROR(RecordString(j, kRankFormat, "state", &state));
  const std::optional<ReplicaState> parsed = ReplicaStateFromName(state);
  if (!parsed) return RecordCorrupt(kRankFormat, "unknown \"state\" '" + state + "'");
  r.state = *parsed;
  WTX_RETURN_IF_ERROR(RecordString(j, kRankFormat, "reason", &r.reason));
  WTX_RETURN_IF_ERROR(RecordInt(j, kRankFormat, "time_micros", &r.time_micros));
  WTX_RETURN_IF_ERROR(RecordString(j, kRankFormat, "control", &r.control));
  return r;
}

}  // namespace fleet
}  // namespace wtx
