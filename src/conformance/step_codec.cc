#include "src/conformance/step_codec.h"

#include "src/conformance/fill.h"

#include <algorithm>

#include "src/manifest/box_json.h"
#include "src/net/codec.h"
#include "src/util/json_fields.h"
#include "src/util/json_number.h"

namespace wtx::sim {

using nlohmann::json;

namespace {

// The string field `key` of `j` (`dflt` when absent), or an error naming "WHERE.KEY".
Result<std::string> StrField(const json& j, const char* key, const std::string& dflt,
                             const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return dflt;
  if (!it->is_string())
    return Status::InvalidArgument(FieldPath(where, key) + ": expected a string");
  return it->get<std::string>();
}

}  // namespace

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
  if (st.box) j["box"] = BoxToJson(*st.box);
  return j;
}

Result<Step> RankStepFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("step: expected a map");
  // Fields default as in a scenario step, so that a hand-written {"op": "write", "param": "*",
  // "fill": {"seed": 1}} works too.
  try {
    // Checked: an int field is never truncated (2^32+1 is not 1).
    auto int_field = [&](const char* key, int dflt, int min, int max) {
      auto it = j.find(key);
      if (it == j.end()) return dflt;
      return static_cast<int>(JsonIntOrThrow(*it, std::string("step.") + key, min, max));
    };
    WTX_RETURN_IF_ERROR(CheckFields(j, "step",
                                    {"op", "index", "param", "shard", "source", "fill", "indices",
                                     "part", "parts", "derived", "value", "box"}));
    Step st;
    if (!j.contains("op")) return Status::InvalidArgument("step.op: missing");
    WTX_ASSIGN_OR_RETURN(op, StrField(j, "op", "", "step"));
    st.op = op;
    st.index = int_field("index", 0, 0, INT32_MAX);
    const bool region_op =
        st.op == "write" || st.op == "reserve" || st.op == "land" || st.op == "poke";
    WTX_ASSIGN_OR_RETURN(param, StrField(j, "param", region_op ? "*" : "", "step"));
    WTX_ASSIGN_OR_RETURN(shard, StrField(j, "shard", "", "step"));
    WTX_ASSIGN_OR_RETURN(source, StrField(j, "source", "", "step"));
    st.param = param;
    st.shard = shard;
    st.source = source;
    WTX_ASSIGN_OR_RETURN(fill, ParseFill(j.value("fill", json("zeros")), "step.fill"));
    st.fill = std::move(fill);
    if (auto it = j.find("indices"); it != j.end()) {
      if (!it->is_array()) return Status::InvalidArgument("step.indices: expected an array");
      for (const auto& i : it->get_ref<const json::array_t&>()) {
        st.indices.push_back(JsonIntOrThrow(i, "step.indices[]", INT64_MIN, INT64_MAX));
      }
    }
    st.part = int_field("part", 0, INT32_MIN, INT32_MAX);
    st.parts = int_field("parts", 1, INT32_MIN, INT32_MAX);
    WTX_ASSIGN_OR_RETURN(derived, StrField(j, "derived", "", "step"));
    WTX_ASSIGN_OR_RETURN(value, StrField(j, "value", "", "step"));
    st.derived = derived;
    st.value = value;
    if (auto b = j.find("box"); b != j.end()) {
      WTX_ASSIGN_OR_RETURN(box, BoxFromJson(*b, "step.box"));
      st.box = std::move(box);
    }
    return st;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("step: malformed: ") + e.what());
  }
}

net::RankStepHandler ControlStepHandler() {
  return [](const json& step, const std::optional<BeginRequest>& scope,
            Participant& participant) -> Status {
    WTX_ASSIGN_OR_RETURN(st, RankStepFromJson(step));
    return ApplyRankStep(st, scope, participant);
  };
}

}  // namespace wtx::sim
