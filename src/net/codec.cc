#include "src/net/codec.h"

#include "src/manifest/box_json.h"

#include "src/util/json_fields.h"
#include "src/util/json_number.h"
#include "wtx/limits.h"

namespace wtx::net {

using nlohmann::json;

namespace {

// Decoders run inside one try block: nlohmann throws json::exception on a type mismatch,
// which becomes kInvalidArgument here and never crosses the API.
template <typename T, typename Fn>
Result<T> Decode(const char* what, const json& j, Fn&& fn) {
  if (!j.is_object()) return Status::InvalidArgument(std::string(what) + ": expected a map");
  try {
    return fn();
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string(what) + ": malformed: " + e.what());
  }
}

// Checked integers (Decode reports the throw naming the field): 2^32+1 is never truncated to 1.
int64_t IntOrThrow(const json& v, const char* field, int64_t min, int64_t max) {
  return JsonIntOrThrow(v, field, min, max);
}
// A rank id, or -1 (the protocol structs' "no rank": a vote that never came).
int RankOrThrow(const json& obj) {
  return static_cast<int>(IntOrThrow(obj.at("rank"), "rank", -1, kMaxRanks - 1));
}

json OptStr(const std::optional<std::string>& s) { return s ? json(*s) : json(); }
std::optional<std::string> GetOptStr(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<std::string>();
}

Phase PhaseFromNameOrThrow(const json& j) {
  const std::string& n = j.get_ref<const std::string&>();
  for (Phase p : {Phase::kPostLoad, Phase::kAttention, Phase::kKernel}) {
    if (PhaseName(p) == n) return p;
  }
  throw json::type_error::create(302, "unknown phase '" + n + "'", &j);
}

ErrorCode CodeFromJson(const json& j) {
  if (!j.is_string()) return ErrorCode::kIOError;
  return ErrorCodeFromName(j.get_ref<const std::string&>()).value_or(ErrorCode::kIOError);
}

}  // namespace

json BeginRequestToJson(const BeginRequest& r) {
  json j = {{"tx", r.tx},
            {"kind", TxKindName(r.kind)},
            {"base", r.base},
            {"modules", r.modules},
            {"sources", r.sources},
            {"rollback", r.rollback},
            {"verify", VerifyModeName(r.verify)}};
  if (!r.lineage.empty()) j["lineage"] = r.lineage;
  if (r.step) j["step"] = *r.step;
  return j;
}

Result<BeginRequest> BeginRequestFromJson(const json& j) {
  return Decode<BeginRequest>("begin request", j, [&]() -> Result<BeginRequest> {
    // verify: the begin option of in-place landings (VerifyMode), when a peer sends it.
    WTX_RETURN_IF_ERROR(CheckFields(
        j, "begin request",
        {"tx", "kind", "base", "modules", "sources", "rollback", "verify", "lineage", "step"}));
    BeginRequest r;
    r.tx = j.at("tx").get<std::string>();
    auto kind = TxKindFromName(j.at("kind").get<std::string>());
    if (!kind) return Status::InvalidArgument("begin request: unknown kind");
    r.kind = *kind;
    r.base = j.at("base").get<std::string>();
    r.modules = j.at("modules").get<std::vector<std::string>>();
    r.sources = j.at("sources").get<std::vector<std::string>>();
    r.rollback = j.at("rollback").get<bool>();
    // Absent from older peers: the default.
    auto verify = VerifyModeFromName(j.value("verify", std::string("touched")));
    if (!verify) return Status::InvalidArgument("begin request: unknown verify mode");
    r.verify = *verify;
    // Absent from older peers and where none was named.
    r.lineage = j.value("lineage", std::string());
    if (j.contains("step")) r.step = IntOrThrow(j.at("step"), "step", 0, INT64_MAX);
    return r;
  });
}

json VoteToJson(const Vote& v) {
  json errors = json::array();
  for (ErrorCode e : v.errors) errors.push_back(ErrorCodeName(e));
  // Grouped by parameter so that a name is sent once, not once per shard (docs/protocol.md:
  // the size bound of a vote).
  json missing = json::array();
  for (const auto& m : v.missing) {
    if (missing.empty() || missing.back()["param"] != m.param) {
      missing.push_back({{"param", m.param}, {"shards", json::array()}});
    }
    json piece = {{"shard", m.shard}, {"box", BoxToJson(m.box)}, {"source", m.source}};
    if (m.boxes != 1) piece["boxes"] = m.boxes;
    piece["elements"] = m.elements;
    if (!m.missing_parts.empty() || m.parts != 0) {
      piece["missing_parts"] = m.missing_parts;
      piece["parts"] = m.parts;
    }
    missing.back()["shards"].push_back(std::move(piece));
  }
  json stale = json::array();
  for (const auto& s : v.stale) {
    stale.push_back(
        {{"name", s.name}, {"phase", PhaseName(s.phase)}, {"sources", s.written_sources}});
  }
  json out = {{"rank", v.rank},       {"tx", v.tx},
              {"yes", v.yes},         {"wrote", v.wrote},
              {"digest", v.digest},   {"error", ErrorCodeName(v.error)},
              {"message", v.message}, {"errors", errors},
              {"missing", missing},   {"missing_total", v.missing_total},
              {"stale", stale}};
  // Only where it differs: a coordinator of an older wtx refuses fields it does not know.
  if (v.served() != v.digest) {
    out["served_digest"] = v.served_digest;
  }
  return out;
}

json DecideParams(const std::string& tx, Decision d, const DecidedVersion& version) {
  json p = {{"tx", tx}, {"decision", DecisionName(d)}, {"version", version.version}};
  // Only where it differs: a rank of an older wtx refuses fields it does not know.
  if (d == Decision::kCommit && version.served() != version.version) {
    p["served_digest"] = version.served();
  }
  return p;
}

Result<Vote> VoteFromJson(const json& j) {
  return Decode<Vote>("vote", j, [&]() -> Result<Vote> {
    WTX_RETURN_IF_ERROR(
        CheckFields(j, "vote",
                    {"rank", "tx", "yes", "wrote", "digest", "served_digest", "error", "message",
                     "errors", "missing", "missing_total", "stale"}));
    Vote v;
    v.rank = RankOrThrow(j);
    v.tx = j.at("tx").get<std::string>();
    v.yes = j.at("yes").get<bool>();
    v.wrote = j.at("wrote").get<bool>();
    v.digest = j.at("digest").get<std::string>();
    if (j.contains("served_digest")) v.served_digest = j.at("served_digest").get<std::string>();
    v.error = CodeFromJson(j.at("error"));
    v.message = j.at("message").get<std::string>();
    for (const auto& e : j.at("errors").get_ref<const json::array_t&>()) {
      v.errors.push_back(CodeFromJson(e));
    }
    for (const auto& g : j.at("missing").get_ref<const json::array_t&>()) {
      WTX_RETURN_IF_ERROR(CheckFields(g, "vote.missing[]", {"param", "shards"}));
      const std::string param = g.at("param").get<std::string>();
      for (const auto& m : g.at("shards").get_ref<const json::array_t&>()) {
        WTX_RETURN_IF_ERROR(
            CheckFields(m, "vote.missing[].shards[]",
                        {"shard", "box", "source", "boxes", "elements", "missing_parts", "parts"}));
        MissingPiece p;
        p.param = param;
        p.shard = m.at("shard").get<std::string>();
        WTX_ASSIGN_OR_RETURN(box, BoxFromJson(m.at("box"), "vote.missing[].shards[].box"));
        p.box = std::move(box);
        p.source = m.at("source").get<std::string>();
        p.boxes = m.contains("boxes") ? IntOrThrow(m.at("boxes"), "boxes", 1, INT64_MAX) : 1;
        p.elements = IntOrThrow(m.at("elements"), "elements", 0, INT64_MAX);
        if (m.contains("missing_parts")) {
          for (const auto& k : m.at("missing_parts").get_ref<const json::array_t&>()) {
            p.missing_parts.push_back(
                static_cast<int>(IntOrThrow(k, "missing_parts", 0, kMaxPatchParts - 1)));
          }
          p.parts = static_cast<int>(IntOrThrow(m.at("parts"), "parts", 0, kMaxPatchParts));
        }
        v.missing.push_back(std::move(p));
      }
    }
    v.missing_total =
        static_cast<size_t>(IntOrThrow(j.at("missing_total"), "missing_total", 0, INT64_MAX));
    for (const auto& s : j.at("stale").get_ref<const json::array_t&>()) {
      WTX_RETURN_IF_ERROR(CheckFields(s, "vote.stale[]", {"name", "phase", "sources"}));
      StaleDerivedState d;
      d.name = s.at("name").get<std::string>();
      d.phase = PhaseFromNameOrThrow(s.at("phase"));
      d.written_sources = s.at("sources").get<std::vector<std::string>>();
      v.stale.push_back(std::move(d));
    }
    return v;
  });
}

json RankDescriptionToJson(const RankDescription& d) {
  json j = {
      {"rank", d.rank}, {"fingerprint", d.fingerprint}, {"kernel_identity", d.kernel_identity}};
  if (d.active_tx) j["active_tx"] = *d.active_tx;
  if (d.prepared) j["prepared"] = true;
  if (!d.lineage.empty()) j["lineage"] = d.lineage;
  if (d.step) j["step"] = *d.step;
  return j;
}

Result<RankDescription> RankDescriptionFromJson(const json& j) {
  return Decode<RankDescription>("rank description", j, [&]() -> Result<RankDescription> {
    WTX_RETURN_IF_ERROR(CheckFields(
        j, "rank description",
        {"rank", "fingerprint", "kernel_identity", "active_tx", "prepared", "lineage", "step"}));
    RankDescription d;
    d.rank = RankOrThrow(j);
    d.fingerprint = j.at("fingerprint").get<std::string>();
    d.kernel_identity = j.at("kernel_identity").get<std::string>();
    if (j.contains("active_tx")) d.active_tx = j.at("active_tx").get<std::string>();
    if (j.contains("prepared")) d.prepared = j.at("prepared").get<bool>();
    d.lineage = j.value("lineage", std::string());
    if (j.contains("step")) d.step = IntOrThrow(j.at("step"), "step", 0, INT64_MAX);
    return d;
  });
}

json VerifyReportToJson(const VerifyReport& r) {
  json diffs = json::array();
  for (const auto& d : r.differences) {
    diffs.push_back({{"param", d.param},
                     {"chunks", {d.first_chunk, d.first_chunk + d.chunks}},
                     {"box", BoxToJson(d.box)}});
  }
  return {{"ok", r.ok},
          {"comparable", r.comparable},
          {"params", r.params},
          {"differences", std::move(diffs)},
          {"chunks_checked", r.chunks_checked},
          {"chunks_differing", r.chunks_differing},
          {"message", r.message}};
}

json RankStatusToJson(const RankStatus& s) {
  return {{"rank", s.rank},
          {"version", OptStr(s.version)},
          {"served_digest", OptStr(s.served_digest)},
          {"committed_tx", OptStr(s.committed_tx)},
          {"digest", OptStr(s.digest)},
          {"dirty", s.dirty},
          {"loaded", s.loaded},
          {"serving", s.serving},
          {"in_doubt", OptStr(s.in_doubt)},
          {"active_tx", OptStr(s.active_tx)},
          {"stale_derived", s.stale_derived},
          {"storage_moved", s.storage_moved},
          {"lineage", s.lineage},
          {"step", s.step ? json(*s.step) : json()},
          {"held", OptStr(s.held)}};
}

Result<RankStatus> RankStatusFromJson(const json& j) {
  return Decode<RankStatus>("rank status", j, [&]() -> Result<RankStatus> {
    // digest: a rank's own digest as of its last commit, when a peer reports it.
    WTX_RETURN_IF_ERROR(CheckFields(
        j, "rank status",
        {"rank", "version", "committed_tx", "dirty", "loaded", "serving", "in_doubt", "active_tx",
         "stale_derived", "digest", "storage_moved", "lineage", "step", "held", "served_digest"}));
    RankStatus s;
    s.rank = RankOrThrow(j);
    s.version = GetOptStr(j, "version");
    // Absent from ranks of an older wtx: the version's.
    s.served_digest = j.contains("served_digest") ? GetOptStr(j, "served_digest") : s.version;
    s.committed_tx = GetOptStr(j, "committed_tx");
    s.digest = GetOptStr(j, "digest");
    s.dirty = j.at("dirty").get<bool>();
    s.loaded = j.at("loaded").get<bool>();
    s.serving = j.at("serving").get<bool>();
    s.in_doubt = GetOptStr(j, "in_doubt");
    s.active_tx = GetOptStr(j, "active_tx");
    s.stale_derived = j.at("stale_derived").get<std::vector<std::string>>();
    if (j.contains("storage_moved")) {  // absent from ranks of an older wtx
      s.storage_moved = j.at("storage_moved").get<std::vector<std::string>>();
    }
    s.lineage = j.value("lineage", std::string());  // absent from ranks of an older wtx
    if (j.contains("step") && !j.at("step").is_null()) {
      s.step = IntOrThrow(j.at("step"), "step", 0, INT64_MAX);
    }
    s.held = GetOptStr(j, "held");  // absent from ranks of an older wtx
    return s;
  });
}

json StatusToJson(const Status& s) {
  return {{"code", ErrorCodeName(s.code())}, {"message", s.message()}};
}

Status StatusFromJson(const json& j) {
  if (!j.is_object()) return Status::IOError("malformed error frame");
  ErrorCode c = CodeFromJson(j.value("code", json()));
  auto m = j.find("message");
  std::string msg = (m != j.end() && m->is_string()) ? m->get<std::string>() : "";
  if (c == ErrorCode::kOk) return Status::IOError("error frame with code OK: " + msg);
  return Status(c, std::move(msg));
}

Status StatusOrOkFromJson(const json& j) {
  if (Status s = CheckFields(j, "status", {"code", "message"}); !s.ok()) return s;
  if (j.is_object() && j.value("code", json()) == ErrorCodeName(ErrorCode::kOk)) {
    return Status::OK();
  }
  return StatusFromJson(j);
}

}  // namespace wtx::net
