#include "src/net/rank_service.h"

#include "src/net/codec.h"
#include "src/util/json_fields.h"

namespace wtx::net {

using nlohmann::json;

namespace {

Result<std::string> StringField(const json& p, const char* method, const char* field) {
  auto it = p.is_object() ? p.find(field) : p.end();
  if (!p.is_object() || it == p.end() || !it->is_string()) {
    return Status::InvalidArgument(std::string(method) + ": missing string field '" + field + "'");
  }
  return it->get<std::string>();
}

// The parameters each rank method takes; any other field is refused, naming it (a misspelt
// field must never be silently ignored).
Status CheckRankParams(const std::string& m, const json& params) {
  if (params.is_null()) return Status::OK();
  if (!params.is_object()) return Status::InvalidArgument(m + ": expected a map of parameters");
  if (m == "describe" || m == "ping") return CheckFields(params, m, {"epoch"});
  if (m == "check_begin" || m == "begin") return CheckFields(params, m, {"req", "epoch"});
  if (m == "prepare") return CheckFields(params, m, {"tx", "epoch"});
  if (m == "decide")
    return CheckFields(params, m, {"tx", "decision", "version", "served_digest", "epoch"});
  return Status::OK();  // an unknown method is refused by name below
}

}  // namespace

Result<json> ServeRankRequest(Participant& p, const std::string& m, const json& params,
                              EpochFence* fence) {
  WTX_RETURN_IF_ERROR(CheckRankParams(m, params));
  int64_t epoch = 0;
  if (params.is_object()) {
    if (auto it = params.find("epoch"); it != params.end()) {
      if (!it->is_number_integer()) {
        return Status::InvalidArgument(m + ": field 'epoch' is not an integer");
      }
      epoch = it->get<int64_t>();
    }
  }
  if (fence) {
    // describe and ping only read: a stale coordinator may still look, not act (a newer epoch
    // is remembered all the same).
    Status admitted = fence->Admit(epoch, m);
    const bool reads = m == "describe" || m == "ping";
    if (!admitted.ok() && (!reads || admitted.code() != ErrorCode::kStaleCoordinator)) {
      return admitted;
    }
  }
  if (m == "describe") return RankDescriptionToJson(p.Describe());
  if (m == "check_begin" || m == "begin") {
    auto req = BeginRequestFromJson(params.is_object() ? params.value("req", json()) : json());
    if (!req.ok()) return req.status();
    if (m == "begin") {
      WTX_RETURN_IF_ERROR(p.Begin(req.value()));
      return json::object();
    }
    json holds = json::array();
    for (const auto& s : req->sources) holds.push_back(p.manifest().HoldsSource(s));
    WTX_RETURN_IF_ERROR(p.CheckBegin(req.value()));
    return json{{"holds", holds}};
  }
  if (m == "prepare") {
    WTX_ASSIGN_OR_RETURN(tx, StringField(params, "prepare", "tx"));
    auto v = p.Prepare(tx);
    if (!v.ok()) return v.status();
    return VoteToJson(v.value());
  }
  if (m == "decide") {
    WTX_ASSIGN_OR_RETURN(tx, StringField(params, "decide", "tx"));
    WTX_ASSIGN_OR_RETURN(name, StringField(params, "decide", "decision"));
    WTX_ASSIGN_OR_RETURN(version, StringField(params, "decide", "version"));
    auto d = DecisionFromName(name);
    if (!d) return Status::InvalidArgument("decide: unknown decision '" + name + "'");
    // A coordinator from before two digests sends the version alone.
    std::string served;
    if (auto it = params.find("served_digest"); it != params.end()) {
      if (!it->is_string()) return Status::InvalidArgument("decide: served_digest is not a string");
      served = it->get<std::string>();
    }
    WTX_RETURN_IF_ERROR(p.Decide(tx, *d, DecidedVersion{version, served}));
    return json::object();
  }
  if (m == "ping") return json::object();
  return Status::InvalidArgument("unknown method '" + m + "'");
}

}  // namespace wtx::net
