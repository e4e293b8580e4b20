#include "src/conformance/expectations.h"

namespace wtx::sim {

using nlohmann::json;

namespace {

bool IsSubset(const json& want, const json& have) {
  if (want.is_object()) {
    if (!have.is_object()) return false;
    for (const auto& [k, v] : want.items()) {
      if (!have.contains(k) || !IsSubset(v, have[k])) return false;
    }
    return true;
  }
  return want == have;
}

bool ContainsString(const json& j, const std::string& s) {
  if (j.is_string()) return j.get<std::string>() == s;
  if (j.is_array() || j.is_object()) {
    for (const auto& e : j) {
      if (ContainsString(e, s)) return true;
    }
  }
  return false;
}

bool HasMissing(const json& j, const std::string& param, const std::string& shard) {
  if (j.is_object()) {
    if (auto it = j.find("missing"); it != j.end() && it->is_array()) {
      for (const auto& m : *it) {
        if (m.value("param", "") == param && m.value("shard", "") == shard) return true;
      }
    }
    for (const auto& [k, v] : j.items()) {
      if (HasMissing(v, param, shard)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& e : j) {
      if (HasMissing(e, param, shard)) return true;
    }
  }
  return false;
}

const json* StepAt(const json& out, const json& idx) {
  if (!idx.is_number_integer() || !out.contains("steps")) return nullptr;
  for (const auto& s : out["steps"]) {
    if (s.value("i", -1) == idx.get<int>()) return &s;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> CheckExpectations(const json& out, const json& exp) {
  std::vector<std::string> fails;
  if (!exp.is_array()) return {"expectations: expected a list of assertions"};
  for (const auto& a : exp) {
    const std::string text = a.dump();
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      fails.push_back("malformed assertion " + text);
      continue;
    }
    const std::string kind = a[0].get<std::string>();
    if (kind == "step" && a.size() == 3) {
      const json* s = StepAt(out, a[1]);
      if (!s) {
        fails.push_back(text + ": no such step");
      } else if (!IsSubset(a[2], *s)) {
        fails.push_back(text + ": step is " + s->dump());
      }
    } else if (kind == "error_somewhere" && a.size() == 3 && a[2].is_string()) {
      const json* s = StepAt(out, a[1]);
      if (!s || !ContainsString(*s, a[2].get<std::string>())) {
        fails.push_back(text + ": step is " + (s ? s->dump() : "absent"));
      }
    } else if (kind == "missing" && a.size() == 4 && a[2].is_string() && a[3].is_string()) {
      const json* s = StepAt(out, a[1]);
      if (!s || !HasMissing(*s, a[2].get<std::string>(), a[3].get<std::string>())) {
        fails.push_back(text + ": step is " + (s ? s->dump() : "absent"));
      }
    } else if (kind == "rank" && a.size() == 3) {
      bool any = false;
      for (const auto& r : out.value("ranks", json::array())) {
        if (a[1] == "*" || r.value("rank", -1) == a[1]) {
          any = true;
          if (!IsSubset(a[2], r)) fails.push_back(text + ": rank is " + r.dump());
        }
      }
      if (!any) fails.push_back(text + ": no such rank");
    } else if (kind == "decision" && a.size() == 3) {
      bool found = false;
      for (const auto& d : out["coordinator"].value("decisions", json::array())) {
        if (d.value("tx", "") == a[1] && d.value("decision", "") == a[2]) found = true;
      }
      if (!found) fails.push_back(text + ": decisions are " + out["coordinator"].dump());
    } else {
      fails.push_back("unknown assertion " + text);
    }
  }
  return fails;
}

}  // namespace wtx::sim
