// The JSON form of a transfer plan (docs/m2n.md, "Plan format"): one encode, one decode that
// checks every field, index and box, naming it.
#include <charconv>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "src/manifest/box_json.h"
#include "src/util/json_fields.h"
#include "wtx/limits.h"
#include "wtx/transfer_plan.h"

namespace wtx {
namespace {

constexpr std::string_view kPlanFormat = "wtx-transfer-plan/1";

using nlohmann::json;

Result<int> RankCount(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1 ||
      j[key].get<int64_t>() > kMaxRanks) {
    return Status::InvalidArgument(std::string(key) + ": expected an integer in [1, " +
                                   std::to_string(kMaxRanks) + "]");
  }
  return static_cast<int>(j[key].get<int64_t>());
}

Result<std::string> Text(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_string()) {
    return Status::InvalidArgument(FieldPath(where, key) + ": expected a string");
  }
  return j[key].get<std::string>();
}

}  // namespace

json TransferPlan::ToJson() const {
  json engines = json::array();
  for (int n = 0; n < engine_ranks; ++n) {
    engines.push_back({{"fingerprint", engine_fingerprints[n]}, {"layout", engine_layouts[n]}});
  }
  json srcs = json::array();
  for (const PlannedSource& s : sources) {
    srcs.push_back({{"name", s.name}, {"shape", s.shape}, {"dtype", DTypeName(s.dtype)}});
  }
  json ps = json::array();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PlannedPiece& p = pieces[i];
    ps.push_back(json::array({p.trainer, p.engine, p.source, BoxToJson(BoxOf(i))}));
  }
  return {{"format", kPlanFormat},
          {"trainer", trainer_spec},
          {"trainer_ranks", trainer_ranks},
          {"engine_ranks", engine_ranks},
          {"engines", engines},
          {"sources", srcs},
          {"pieces", ps},
          {"bytes", TotalBytes()}};
}

std::string TransferPlan::ToJsonText() const {
  std::string out;
  out.reserve(256 + sources.size() * 96 + pieces.size() * 48);
  auto text = [&](std::string_view s) { out += json(s).dump(); };
  auto num = [&](int64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, r.ptr);
  };
  out += "{\"format\":";
  text(kPlanFormat);
  out += ",\"trainer\":";
  text(trainer_spec);
  out += ",\"trainer_ranks\":";
  num(trainer_ranks);
  out += ",\"engine_ranks\":";
  num(engine_ranks);
  out += ",\"engines\":[";
  for (int n = 0; n < engine_ranks; ++n) {
    out += n ? ",{\"fingerprint\":" : "{\"fingerprint\":";
    text(engine_fingerprints[n]);
    out += ",\"layout\":";
    text(engine_layouts[n]);
    out += '}';
  }
  out += "],\"sources\":[";
  for (size_t i = 0; i < sources.size(); ++i) {
    const PlannedSource& s = sources[i];
    out += i ? ",{\"name\":" : "{\"name\":";
    text(s.name);
    out += ",\"shape\":[";
    for (size_t d = 0; d < s.shape.size(); ++d) {
      if (d) out += ',';
      num(s.shape[d]);
    }
    out += "],\"dtype\":";
    text(DTypeName(s.dtype));
    out += '}';
  }
  out += "],\"pieces\":[";
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PlannedPiece& p = pieces[i];
    out += i ? ",[" : "[";
    num(p.trainer);
    out += ',';
    num(p.engine);
    out += ',';
    num(p.source);
    out += ",[";
    const size_t rank = sources[p.source].shape.size();
    for (size_t d = 0; d < rank; ++d) {
      const Range& r = ranges[p.first_range + d];
      out += d ? ",[" : "[";
      num(r.begin);
      out += ',';
      num(r.end);
      out += ']';
    }
    out += "]]";
  }
  out += "],\"bytes\":";
  num(TotalBytes());
  out += '}';
  return out;
}

Result<TransferPlan> PlanFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("transfer plan: expected a JSON object");
  WTX_RETURN_IF_ERROR(CheckFields(j, "",
                                  {"format", "trainer", "trainer_ranks", "engine_ranks", "engines",
                                   "sources", "pieces", "bytes"}));
  WTX_ASSIGN_OR_RETURN(format, Text(j, "format", ""));
  if (format != kPlanFormat) {
    return Status::InvalidArgument("format: '" + format + "', expected '" +
                                   std::string(kPlanFormat) + "'");
  }
  TransferPlan plan;
  WTX_ASSIGN_OR_RETURN(spec, Text(j, "trainer", ""));
  plan.trainer_spec = std::move(spec);
  WTX_ASSIGN_OR_RETURN(k, RankCount(j, "trainer_ranks"));
  WTX_ASSIGN_OR_RETURN(n, RankCount(j, "engine_ranks"));
  plan.trainer_ranks = k;
  plan.engine_ranks = n;
  const json& engines = j.value("engines", json());
  if (!engines.is_array() || engines.size() != static_cast<size_t>(n)) {
    return Status::InvalidArgument("engines: expected an array of engine_ranks (" +
                                   std::to_string(n) + ") entries");
  }
  for (size_t i = 0; i < engines.size(); ++i) {
    const std::string where = "engines[" + std::to_string(i) + "]";
    WTX_RETURN_IF_ERROR(CheckFields(engines[i], where, {"fingerprint", "layout"}));
    WTX_ASSIGN_OR_RETURN(fp, Text(engines[i], "fingerprint", where));
    WTX_ASSIGN_OR_RETURN(layout, Text(engines[i], "layout", where));
    plan.engine_fingerprints.push_back(std::move(fp));
    plan.engine_layouts.push_back(std::move(layout));
  }
  const json& srcs = j.value("sources", json());
  if (!srcs.is_array()) return Status::InvalidArgument("sources: expected an array");
  for (size_t i = 0; i < srcs.size(); ++i) {
    const std::string where = "sources[" + std::to_string(i) + "]";
    WTX_RETURN_IF_ERROR(CheckFields(srcs[i], where, {"name", "shape", "dtype"}));
    PlannedSource s;
    WTX_ASSIGN_OR_RETURN(name, Text(srcs[i], "name", where));
    s.name = std::move(name);
    const json& shape = srcs[i].value("shape", json());
    if (!shape.is_array() || shape.empty() || shape.size() > kMaxTensorDims) {
      return Status::InvalidArgument(where + ".shape: expected 1.." +
                                     std::to_string(kMaxTensorDims) + " dimensions");
    }
    for (const json& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return Status::InvalidArgument(where + ".shape: expected non-negative integers");
      }
      s.shape.push_back(d.get<int64_t>());
    }
    WTX_ASSIGN_OR_RETURN(dtype_name, Text(srcs[i], "dtype", where));
    auto dtype = DTypeFromName(dtype_name);
    if (!dtype) {
      std::string msg = where;
      msg += ".dtype: unknown '" + dtype_name + "'";
      return Status::InvalidArgument(msg);
    }
    s.dtype = *dtype;
    plan.sources.push_back(std::move(s));
  }
  const json& ps = j.value("pieces", json());
  if (!ps.is_array()) return Status::InvalidArgument("pieces: expected an array");
  plan.pieces.reserve(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::string where = "pieces[" + std::to_string(i) + "]";
    const json& p = ps[i];
    if (!p.is_array() || p.size() != 4 || !p[0].is_number_integer() || !p[1].is_number_integer() ||
        !p[2].is_number_integer()) {
      return Status::InvalidArgument(where + ": expected [trainer, engine, source, box]");
    }
    const int64_t t = p[0].get<int64_t>(), e = p[1].get<int64_t>(), s = p[2].get<int64_t>();
    if (t < 0 || t >= k) return Status::InvalidArgument(where + ": trainer rank out of range");
    if (e < 0 || e >= n) return Status::InvalidArgument(where + ": engine rank out of range");
    if (s < 0 || static_cast<size_t>(s) >= plan.sources.size()) {
      return Status::InvalidArgument(where + ": source index out of range");
    }
    WTX_ASSIGN_OR_RETURN(box, BoxFromJson(p[3], where + "[3]"));
    const PlannedSource& src = plan.sources[static_cast<size_t>(s)];
    if (!BoxInsideShape(box, src.shape) || BoxIsEmpty(box)) {
      return Status::InvalidArgument(where + ": box " + BoxToString(box) + " of source '" +
                                     src.name + "' is outside it (shape " +
                                     ShapeToString(src.shape) + ")");
    }
    plan.pieces.push_back({static_cast<int32_t>(t), static_cast<int32_t>(e),
                           static_cast<uint32_t>(s), static_cast<uint32_t>(plan.ranges.size())});
    plan.ranges.insert(plan.ranges.end(), box.begin(), box.end());
  }
  if (j.contains("bytes") &&
      (!j["bytes"].is_number_integer() || j["bytes"].get<int64_t>() != plan.TotalBytes())) {
    return Status::InvalidArgument("bytes: " + j["bytes"].dump() + ", but the pieces hold " +
                                   std::to_string(plan.TotalBytes()));
  }
  return plan;
}

}  // namespace wtx
