#include "src/conformance/scenario.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "wtx/hf_manifest.h"

namespace wtx::sim {

using nlohmann::json;

namespace {

Status Bad(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + ": " + what);
}

Result<json> ReadJsonFile(const std::string& path, const std::string& where) {
  std::ifstream in(path);
  if (!in) return Bad(where, "cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return Bad(where, "'" + path + "' is not valid JSON");
  return j;
}

Result<ManifestPtr> ManifestAt(const json& m, const std::string& where) {
  auto r = ParseManifest(m);
  if (!r.ok()) return Bad(where, r.status().message());
  return r;
}

Result<std::string> Str(const json& s, const char* key, const std::string& where, bool required) {
  auto it = s.find(key);
  if (it == s.end()) {
    if (required) return Bad(where + "." + key, "missing");
    return std::string();
  }
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    return Bad(where + "." + key, "expected a non-empty string");
  }
  return it->get<std::string>();
}

Result<RankTarget> ParseTarget(const json& s, const std::string& where, int ranks) {
  RankTarget t;
  auto it = s.find("rank");
  if (it == s.end() || (it->is_string() && it->get<std::string>() == "*")) return t;
  if (!it->is_number_integer()) return Bad(where + ".rank", "expected a rank number or \"*\"");
  int r = it->get<int>();
  if (r < 0 || r >= ranks) {
    return Bad(where + ".rank", "rank " + std::to_string(r) + " outside 0.." + std::to_string(ranks - 1));
  }
  t.all = false;
  t.rank = r;
  return t;
}

Result<CrashSpec> ParseWho(const json& s, const std::string& where, int ranks) {
  CrashSpec c;
  auto it = s.find("who");
  if (it == s.end()) return Bad(where + ".who", "missing (\"coordinator\" or a rank number)");
  if (it->is_string() && it->get<std::string>() == "coordinator") {
    c.who = "coordinator";
  } else if (it->is_number_integer() ||
             (it->is_string() && !it->get<std::string>().empty() &&
              it->get<std::string>().find_first_not_of("0123456789") == std::string::npos)) {
    c.rank = it->is_number_integer() ? it->get<int>() : std::stoi(it->get<std::string>());
    if (c.rank < 0 || c.rank >= ranks) {
      return Bad(where + ".who", "rank " + std::to_string(c.rank) + " outside 0.." +
                                     std::to_string(ranks - 1));
    }
    c.who = std::to_string(c.rank);
  } else {
    return Bad(where + ".who", "expected \"coordinator\" or a rank number");
  }
  if (auto p = s.find("power_loss"); p != s.end()) {
    if (!p->is_boolean()) return Bad(where + ".power_loss", "expected a boolean");
    c.power_loss = p->get<bool>();
  }
  return c;
}

Result<std::vector<std::string>> StrList(const json& s, const char* key, const std::string& where) {
  std::vector<std::string> out;
  auto it = s.find(key);
  if (it == s.end()) return out;
  if (!it->is_array()) return Bad(where + "." + key, "expected an array of strings");
  for (const auto& e : *it) {
    if (!e.is_string()) return Bad(where + "." + key, "expected an array of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<Step> ParseStep(const json& s, int i, int ranks) {
  const std::string where = "steps[" + std::to_string(i) + "]";
  if (!s.is_object()) return Bad(where, "expected an object");
  Step st;
  st.index = i;
  WTX_ASSIGN_OR_RETURN(op, Str(s, "op", where, true));
  st.op = op;
  if (op == "begin") {
    WTX_ASSIGN_OR_RETURN(tx, Str(s, "tx", where, true));
    WTX_ASSIGN_OR_RETURN(kind, Str(s, "kind", where, true));
    auto k = TxKindFromName(kind);
    if (!k) return Bad(where + ".kind", "unknown kind '" + kind + "' (full|partial|delta)");
    st.tx = tx;
    st.begin.tx = tx;
    st.begin.kind = *k;
    WTX_ASSIGN_OR_RETURN(base, Str(s, "base", where, false));
    st.base_ref = base;
    WTX_ASSIGN_OR_RETURN(mods, StrList(s, "modules", where));
    WTX_ASSIGN_OR_RETURN(srcs, StrList(s, "sources", where));
    st.begin.modules = mods;
    st.begin.sources = srcs;
    if (*k == TxKind::kPartial && !s.contains("modules")) {
      return Bad(where + ".modules", "a partial begin names its modules");
    }
    if (*k == TxKind::kDelta && !s.contains("sources")) {
      return Bad(where + ".sources", "a delta begin names its sources");
    }
    if (auto r = s.find("rollback"); r != s.end()) {
      if (!r->is_boolean()) return Bad(where + ".rollback", "expected a boolean");
      st.begin.rollback = r->get<bool>();
    }
    if (auto v = s.find("verify"); v != s.end()) {
      auto mode = v->is_string() ? VerifyModeFromName(v->get<std::string>()) : std::nullopt;
      if (!mode) return Bad(where + ".verify", "expected \"touched\" or \"all\"");
      st.begin.verify = *mode;
    }
  } else if (op == "write" || op == "reserve" || op == "land" || op == "poke") {
    // reserve / land / poke address a region exactly as write does; reserve has no fill.
    WTX_ASSIGN_OR_RETURN(t, ParseTarget(s, where, ranks));
    st.target = t;
    WTX_ASSIGN_OR_RETURN(param, Str(s, "param", where, false));
    WTX_ASSIGN_OR_RETURN(shard, Str(s, "shard", where, false));
    WTX_ASSIGN_OR_RETURN(source, Str(s, "source", where, false));
    if (param.empty() && source.empty()) return Bad(where + ".param", "missing (or give source)");
    if (!shard.empty() && !source.empty()) {
      return Bad(where + ".shard", "give either shard or source, not both");
    }
    if (!shard.empty() && (param.empty() || param == "*")) {
      return Bad(where + ".shard", "a shard needs a single param");
    }
    st.param = param.empty() ? "*" : param;
    st.shard = shard;
    st.source = source;
    if (auto b = s.find("box"); b != s.end()) {
      Box box;
      if (!b->is_array()) return Bad(where + ".box", "expected [[begin, end], ...]");
      for (const auto& r : *b) {
        if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() ||
            !r[1].is_number_integer()) {
          return Bad(where + ".box", "expected [[begin, end], ...] integers");
        }
        box.push_back({r[0].get<int64_t>(), r[1].get<int64_t>()});
      }
      if (st.param == "*") return Bad(where + ".box", "a box needs a single param");
      st.box = std::move(box);
    }
    if (op == "reserve") {
      if (s.contains("fill")) return Bad(where + ".fill", "a reserve writes nothing (use land)");
    } else {
      if (!s.contains("fill")) return Bad(where + ".fill", "missing");
      WTX_ASSIGN_OR_RETURN(f, ParseFill(s["fill"], where + ".fill"));
      st.fill = std::move(f);
    }
  } else if (op == "patch") {
    WTX_ASSIGN_OR_RETURN(t, ParseTarget(s, where, ranks));
    st.target = t;
    WTX_ASSIGN_OR_RETURN(source, Str(s, "source", where, true));
    st.source = source;
    auto it = s.find("indices");
    if (it == s.end() || !it->is_array()) return Bad(where + ".indices", "missing array");
    for (const auto& x : *it) {
      if (!x.is_number_integer()) return Bad(where + ".indices", "expected integers");
      st.indices.push_back(x.get<int64_t>());
    }
    if (!s.contains("fill")) return Bad(where + ".fill", "missing");
    WTX_ASSIGN_OR_RETURN(f, ParseFill(s["fill"], where + ".fill"));
    st.fill = std::move(f);
    if (auto p = s.find("part"); p != s.end()) {
      if (!p->is_array() || p->size() != 2 || !(*p)[0].is_number_integer() ||
          !(*p)[1].is_number_integer()) {
        return Bad(where + ".part", "expected [k, n]");
      }
      st.part = (*p)[0].get<int>();
      st.parts = (*p)[1].get<int>();
    }
  } else if (op == "refresh") {
    WTX_ASSIGN_OR_RETURN(t, ParseTarget(s, where, ranks));
    st.target = t;
    WTX_ASSIGN_OR_RETURN(d, Str(s, "derived", where, true));
    st.derived = d;
  } else if (op == "set_kernel_identity") {
    WTX_ASSIGN_OR_RETURN(t, ParseTarget(s, where, ranks));
    st.target = t;
    auto it = s.find("value");
    if (it == s.end() || !it->is_string()) return Bad(where + ".value", "missing string");
    st.value = it->get<std::string>();
  } else if (op == "commit") {
    WTX_ASSIGN_OR_RETURN(tx, Str(s, "tx", where, true));
    st.tx = tx;
    if (auto it = s.find("silent"); it != s.end()) {
      if (!it->is_array()) return Bad(where + ".silent", "expected an array of rank numbers");
      for (const auto& r : *it) {
        if (!r.is_number_integer() || r.get<int>() < 0 || r.get<int>() >= ranks) {
          return Bad(where + ".silent", "expected rank numbers in 0.." + std::to_string(ranks - 1));
        }
        st.silent.insert(r.get<int>());
      }
    }
    WTX_ASSIGN_OR_RETURN(expect, Str(s, "expect_version", where, false));
    if (s.contains("expect_version") && expect.empty()) {
      return Bad(where + ".expect_version", "expected a version or \"$tx\"");
    }
    st.expect_version_ref = expect;
    if (auto it = s.find("crash"); it != s.end()) {
      if (!it->is_object()) return Bad(where + ".crash", "expected {\"who\": W, \"at\": P}");
      WTX_ASSIGN_OR_RETURN(c, ParseWho(*it, where + ".crash", ranks));
      WTX_ASSIGN_OR_RETURN(at, Str(*it, "at", where + ".crash", true));
      const bool rank_point = at == "before_prepare_logged" || at == "after_prepare_logged";
      const bool coord_point = at == "before_decision_logged" || at == "after_decision_logged";
      if (!rank_point && !coord_point) {
        return Bad(where + ".crash.at", "unknown crash point '" + at +
                                            "' (before_prepare_logged|after_prepare_logged|"
                                            "before_decision_logged|after_decision_logged)");
      }
      if (rank_point && c.who == "coordinator") {
        return Bad(where + ".crash.at", "'" + at + "' is a rank's crash point");
      }
      if (coord_point && c.who != "coordinator") {
        return Bad(where + ".crash.at", "'" + at + "' is the coordinator's crash point");
      }
      c.at = at;
      st.crash = c;
    }
  } else if (op == "abort") {
    WTX_ASSIGN_OR_RETURN(tx, Str(s, "tx", where, true));
    st.tx = tx;
  } else if (op == "crash" || op == "restart") {
    WTX_ASSIGN_OR_RETURN(c, ParseWho(s, where, ranks));
    st.crash = c;
  } else {
    return Bad(where + ".op", "unknown op '" + op +
                                  "' (begin|write|reserve|land|poke|patch|refresh|"
                                  "set_kernel_identity|commit|abort|crash|restart)");
  }
  return st;
}

}  // namespace

Result<Scenario> ParseScenario(const json& j, const std::string& base_dir) {
  if (!j.is_object()) return Bad("scenario", "expected an object");
  Scenario sc;
  auto rit = j.find("ranks");
  if (rit == j.end() || !rit->is_number_integer() || rit->get<int>() < 1) {
    return Bad("ranks", "expected a positive integer");
  }
  sc.ranks = rit->get<int>();
  if (auto k = j.find("kernel_identity"); k != j.end()) {
    if (!k->is_string()) return Bad("kernel_identity", "expected a string");
    sc.kernel_identity = k->get<std::string>();
  }
  if (auto b = j.find("rollback_budget_bytes"); b != j.end()) {
    if (!b->is_number_unsigned()) return Bad("rollback_budget_bytes", "expected a byte count");
    sc.rollback_budget_bytes = b->get<size_t>();
  }
  auto mit = j.find("model");
  if (mit == j.end() || !mit->is_object()) return Bad("model", "missing object");
  const json& model = *mit;
  auto resolve = [&](const std::string& p) {
    std::filesystem::path path(p);
    return path.is_absolute() ? p : (std::filesystem::path(base_dir) / path).string();
  };
  ManifestPtr common;
  if (model.contains("hf_config")) {
    if (!model["hf_config"].is_string()) return Bad("model.hf_config", "expected a path");
    auto tp_it = model.find("tp");
    int tp = 1;
    if (tp_it != model.end()) {
      if (!tp_it->is_number_integer() || tp_it->get<int>() < 1) {
        return Bad("model.tp", "expected a positive integer");
      }
      tp = tp_it->get<int>();
    }
    if (sc.ranks % tp != 0) {
      return Bad("model.tp", "tp " + std::to_string(tp) + " does not divide ranks " +
                                 std::to_string(sc.ranks));
    }
    const std::string path = resolve(model["hf_config"].get<std::string>());
    for (int r = 0; r < sc.ranks; ++r) {
      HfManifestOptions o;
      o.tp = tp;
      o.rank = r % tp;
      auto m = ManifestFromHfConfigFile(path, o);
      if (!m.ok()) return Bad("model.hf_config", m.status().message());
      sc.manifests.push_back(m.value());
    }
  } else {
    if (model.contains("manifest")) {
      WTX_ASSIGN_OR_RETURN(m, ManifestAt(model["manifest"], "model.manifest"));
      common = m;
    } else if (model.contains("manifest_file")) {
      if (!model["manifest_file"].is_string()) return Bad("model.manifest_file", "expected a path");
      WTX_ASSIGN_OR_RETURN(mj, ReadJsonFile(resolve(model["manifest_file"].get<std::string>()),
                                            "model.manifest_file"));
      WTX_ASSIGN_OR_RETURN(m, ManifestAt(mj, "model.manifest_file"));
      common = m;
    } else {
      return Bad("model", "expected manifest, manifest_file or hf_config");
    }
    sc.manifests.assign(sc.ranks, common);
    if (auto rm = model.find("rank_manifests"); rm != model.end()) {
      if (!rm->is_object()) return Bad("model.rank_manifests", "expected an object");
      for (const auto& [key, val] : rm->items()) {
        const std::string where = "model.rank_manifests." + key;
        int r = -1;
        if (!key.empty() && key.find_first_not_of("0123456789") == std::string::npos) {
          r = std::stoi(key);
        }
        if (r < 0 || r >= sc.ranks) return Bad(where, "not a rank of this scenario");
        WTX_ASSIGN_OR_RETURN(m, ManifestAt(val, where));
        sc.manifests[r] = m;
      }
    }
  }
  auto sit = j.find("steps");
  if (sit == j.end() || !sit->is_array()) return Bad("steps", "missing array");
  for (size_t i = 0; i < sit->size(); ++i) {
    WTX_ASSIGN_OR_RETURN(st, ParseStep((*sit)[i], static_cast<int>(i), sc.ranks));
    sc.steps.push_back(std::move(st));
  }
  return sc;
}

Result<Scenario> LoadScenarioFile(const std::string& path) {
  WTX_ASSIGN_OR_RETURN(j, ReadJsonFile(path, "scenario"));
  return ParseScenario(j, std::filesystem::path(path).parent_path().string());
}

}  // namespace wtx::sim
