#include "wtx/manifest.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "src/manifest/box_json.h"
#include "src/util/checked_math.h"
#include "src/util/hash_util.h"
#include "src/util/json_fields.h"

namespace wtx {

using nlohmann::json;

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kPostLoad:
      return "post_load";
    case Phase::kAttention:
      return "attention";
    case Phase::kKernel:
      return "kernel";
  }
  return "post_load";
}

namespace {

std::optional<Phase> PhaseFromName(std::string_view s) {
  if (s == "post_load") return Phase::kPostLoad;
  if (s == "attention") return Phase::kAttention;
  if (s == "kernel") return Phase::kKernel;
  return std::nullopt;
}

Status Invalid(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + ": " + what);
}

// A tensor that can exist: at most kMaxTensorDims dimensions, no negative extent, and an
// element count and byte size (in `dtype`) that neither overflow nor exceed kMaxTensorBytes.
// `kind` and `name` name the tensor in errors ("parameter 'w'", "source 's'").
Status ValidateTensorSize(const Shape& shape, DType dtype, const char* kind,
                          const std::string& name, const std::string& where, int64_t* bytes_out) {
  auto what = [&] { return std::string(kind) + " '" + name + "'"; };
  if (shape.size() > kMaxTensorDims) {
    return Invalid(where, what() + " has " + std::to_string(shape.size()) +
                              " dimensions (at most " + std::to_string(kMaxTensorDims) + ")");
  }
  const std::optional<int64_t> elements = CheckedProduct(shape);
  const std::optional<int64_t> bytes =
      elements ? CheckedBytes(*elements, DTypeSize(dtype)) : std::nullopt;
  if (!bytes || *bytes > kMaxTensorBytes) {
    return Invalid(where, what() + " of shape " + ShapeToString(shape) + " (" +
                              std::string(DTypeName(dtype)) + ") cannot exist: its byte size " +
                              (bytes ? "is " + std::to_string(*bytes) : std::string("overflows")) +
                              " (at most " + std::to_string(kMaxTensorBytes) +
                              " bytes per tensor)");
  }
  if (bytes_out) *bytes_out = *bytes;
  return Status::OK();
}

// Checks one shard against its parameter.
Status ValidateShard(const ParamSpec& p, const ShardSpec& s, const std::string& where) {
  if (s.id.empty()) return Invalid(where + ".id", "empty shard id");
  if (s.padding) {
    if (!s.source.empty() || !s.source_shape.empty() || !s.source_box.empty()) {
      return Invalid(where + ".source", "a padding shard has no source");
    }
    if (s.packed) return Invalid(where + ".layout", "a padding shard cannot be packed");
    if (!BoxInsideShape(s.box, p.shape)) {
      return Invalid(where + ".box", "box " + BoxToString(s.box) + " lies outside shape " +
                                         ShapeToString(p.shape) + " of " + p.name);
    }
    return Status::OK();
  }
  if (s.source.empty()) return Invalid(where + ".source", "empty source name");
  for (int64_t d : s.source_shape) {
    if (d < 0) return Invalid(where + ".source_shape", "negative extent");
    if (d == 0) {
      return Invalid(where + ".source_shape", "source '" + s.source + "' has shape " +
                                                  ShapeToString(s.source_shape) +
                                                  ": zero-extent sources are refused");
    }
  }
  // Every shard holds at least one element (a zero-extent shard could never be written).
  if (!p.shape.empty() && BoxIsEmpty(s.box)) {
    return Invalid(where + ".box",
                   "shard '" + s.id + "' of " + p.name + " has an empty box " + BoxToString(s.box));
  }
  if (!s.source_shape.empty() && BoxIsEmpty(s.source_box)) {
    return Invalid(where + ".source_box", "shard '" + s.id + "' of " + p.name +
                                              " has an empty source_box " +
                                              BoxToString(s.source_box));
  }
  WTX_RETURN_IF_ERROR(ValidateTensorSize(s.source_shape, p.dtype, "source", s.source,
                                         where + ".source_shape", nullptr));
  if (!BoxInsideShape(s.box, p.shape)) {
    return Invalid(where + ".box", "box " + BoxToString(s.box) + " lies outside shape " +
                                       ShapeToString(p.shape) + " of " + p.name);
  }
  if (!BoxInsideShape(s.source_box, s.source_shape)) {
    return Invalid(where + ".source_box", "box " + BoxToString(s.source_box) +
                                              " lies outside source_shape " +
                                              ShapeToString(s.source_shape));
  }
  if (s.packed) return Status::OK();  // a packed layout is not a translation: extents may differ
  if (s.box.size() < s.source_box.size()) {
    return Invalid(where + ".box", "box has fewer dimensions than source_box");
  }
  const size_t extra = s.box.size() - s.source_box.size();
  for (size_t i = 0; i < extra; ++i) {
    if (s.box[i].extent() != 1) {
      return Invalid(where + ".box", "extra leading dimension " + std::to_string(i) +
                                         " must have extent 1, has " +
                                         std::to_string(s.box[i].extent()));
    }
  }
  for (size_t i = 0; i < s.source_box.size(); ++i) {
    if (s.box[extra + i].extent() != s.source_box[i].extent()) {
      return Invalid(where + ".box", "extent of dimension " + std::to_string(extra + i) + " (" +
                                         std::to_string(s.box[extra + i].extent()) +
                                         ") differs from source_box (" +
                                         std::to_string(s.source_box[i].extent()) + ")");
    }
  }
  return Status::OK();
}

// Shards of a parameter must be pairwise disjoint and cover it exactly. Sweep over the first
// dimension so that stacked-expert and fused layouts check in near-linear time.
Status ValidateShardCover(const ParamSpec& p, const std::string& where) {
  // Each box lies inside the (size-checked) shape; the sum may still overflow when shards
  // overlap many times over, which the sweep below reports.
  int64_t volume = 0;
  bool volume_overflow = false;
  for (const auto& s : p.shards) {
    if (!CheckedAdd(volume, NumElements(s.box), &volume)) volume_overflow = true;
  }
  if (p.shape.empty()) {
    if (p.shards.size() != 1) return Invalid(where, "a scalar parameter has exactly one shard");
    return Status::OK();
  }
  std::vector<uint32_t> order(p.shards.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return p.shards[a].box[0].begin < p.shards[b].box[0].begin;
  });
  std::vector<uint32_t> active;
  for (uint32_t i : order) {
    const Box& bi = p.shards[i].box;
    std::erase_if(active, [&](uint32_t a) { return p.shards[a].box[0].end <= bi[0].begin; });
    for (uint32_t a : active) {
      if (Overlaps(p.shards[a].box, bi)) {
        return Invalid(where, "shards '" + p.shards[a].id + "' and '" + p.shards[i].id + "' of " +
                                  p.name + " overlap");
      }
    }
    if (!BoxIsEmpty(bi)) active.push_back(i);
  }
  if (volume_overflow || volume != p.num_elements()) {
    return Invalid(where, "shards of " + p.name + " cover " + std::to_string(volume) + " of " +
                              std::to_string(p.num_elements()) + " elements");
  }
  return Status::OK();
}

Result<Shape> ParseShape(const json& j, const std::string& where) {
  if (!j.is_array()) return Invalid(where, "expected an array of non-negative integers");
  Shape s;
  for (const json& d : j) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return Invalid(where, "expected non-negative integer extents");
    }
    s.push_back(d.get<int64_t>());
  }
  return s;
}

Result<std::string> ParseString(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    return Invalid(where + "." + key, "missing or not a non-empty string");
  }
  return it->get<std::string>();
}

Result<std::vector<std::string>> ParseStringList(const json& obj, const char* key,
                                                 const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) return Invalid(where + "." + key, "missing array");
  std::vector<std::string> out;
  for (const json& e : *it) {
    if (!e.is_string()) return Invalid(where + "." + key, "expected strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<ShardSpec> ParseShard(const json& j, const std::string& where) {
  if (!j.is_object()) return Invalid(where, "expected an object");
  WTX_RETURN_IF_ERROR(
      CheckFields(j, where, {"id", "source", "source_shape", "box", "source_box", "layout"}));
  ShardSpec s;
  if (auto it = j.find("layout"); it != j.end() && it->is_string() && *it == "padding") {
    // Rows no source feeds: an id and a live box only.
    for (const char* key : {"source", "source_shape", "source_box"}) {
      if (j.contains(key)) return Invalid(where + "." + key, "a padding shard has no source");
    }
    WTX_ASSIGN_OR_RETURN(pid, ParseString(j, "id", where));
    s.id = std::move(pid);
    if (!j.contains("box")) return Invalid(where + ".box", "missing");
    WTX_ASSIGN_OR_RETURN(pbox, BoxFromJson(j["box"], where + ".box"));
    s.box = std::move(pbox);
    s.padding = true;
    return s;
  }
  WTX_ASSIGN_OR_RETURN(id, ParseString(j, "id", where));
  WTX_ASSIGN_OR_RETURN(source, ParseString(j, "source", where));
  s.id = std::move(id);
  s.source = std::move(source);
  if (!j.contains("source_shape")) return Invalid(where + ".source_shape", "missing");
  WTX_ASSIGN_OR_RETURN(ss, ParseShape(j["source_shape"], where + ".source_shape"));
  s.source_shape = std::move(ss);
  if (!j.contains("box")) return Invalid(where + ".box", "missing");
  WTX_ASSIGN_OR_RETURN(box, BoxFromJson(j["box"], where + ".box"));
  s.box = std::move(box);
  if (!j.contains("source_box")) return Invalid(where + ".source_box", "missing");
  WTX_ASSIGN_OR_RETURN(sbox, BoxFromJson(j["source_box"], where + ".source_box"));
  s.source_box = std::move(sbox);
  if (auto it = j.find("layout"); it != j.end()) {
    if (!it->is_string()) return Invalid(where + ".layout", "expected a string");
    const auto& l = it->get_ref<const std::string&>();
    if (l == "packed") {
      s.packed = true;
    } else if (l != "translate") {
      return Invalid(where + ".layout", "unknown layout '" + l + "' (packed|translate|padding)");
    }
  }
  return s;
}

}  // namespace

Result<ManifestPtr> Manifest::Build(std::vector<ParamSpec> params, std::vector<ModuleSpec> modules,
                                    std::vector<DerivedSpec> derived) {
  std::shared_ptr<Manifest> m(new Manifest());
  m->params_ = std::move(params);
  m->modules_ = std::move(modules);
  m->derived_ = std::move(derived);
  for (auto& p : m->params_) {
    if (p.shards.empty()) {
      ShardSpec s;
      s.id = "0";
      s.source = p.name;
      s.source_shape = p.shape;
      s.box = WholeBox(p.shape);
      s.source_box = WholeBox(p.shape);
      p.shards.push_back(std::move(s));
    }
  }
  WTX_RETURN_IF_ERROR(m->Index());
  return ManifestPtr(std::move(m));
}

Status Manifest::Index() {
  int64_t total_bytes = 0;
  for (uint32_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    const std::string where = "params[" + std::to_string(i) + "]";
    if (p.name.empty()) return Invalid(where + ".name", "empty parameter name");
    if (!param_index_.emplace(p.name, i).second) {
      return Invalid(where + ".name", "duplicate parameter '" + p.name + "'");
    }
    // Zero-extent parameters are refused: they hold no bytes, so no write, coverage, version or
    // "*" could mean anything for them (docs/manifest.md).
    for (size_t d = 0; d < p.shape.size(); ++d) {
      if (p.shape[d] == 0) {
        return Invalid(where + ".shape", "parameter '" + p.name + "' has shape " +
                                             ShapeToString(p.shape) + ": dimension " +
                                             std::to_string(d) +
                                             " is zero; zero-extent parameters are refused");
      }
    }
    int64_t bytes = 0;
    WTX_RETURN_IF_ERROR(
        ValidateTensorSize(p.shape, p.dtype, "parameter", p.name, where + ".shape", &bytes));
    if (!CheckedAdd(total_bytes, bytes, &total_bytes) || total_bytes > kMaxManifestBytes) {
      return Invalid(where + ".shape", "parameter '" + p.name + "' brings the manifest above " +
                                           std::to_string(kMaxManifestBytes) + " bytes");
    }
    if (p.served) {
      for (int64_t d : p.served->shape) {
        if (d == 0) {
          return Invalid(where + ".served.shape", "parameter '" + p.name + "' is served as " +
                                                      ShapeToString(p.served->shape) +
                                                      ": a zero-extent served form");
        }
      }
      WTX_RETURN_IF_ERROR(ValidateTensorSize(p.served->shape, p.served->dtype, "served form of",
                                             p.name, where + ".served.shape", nullptr));
    }
    std::unordered_map<std::string_view, int> ids;
    ids.reserve(p.shards.size());
    for (uint32_t k = 0; k < p.shards.size(); ++k) {
      const ShardSpec& s = p.shards[k];
      // Error locations are built only when something is wrong (hundreds of thousands of
      // shards in a large MoE manifest).
      if (Status st = ValidateShard(p, s, std::string()); !st.ok()) {
        const std::string sw = where + ".shards[" + std::to_string(k) + "]";
        return ValidateShard(p, s, sw);
      }
      if (!ids.emplace(s.id, 0).second) {
        const std::string sw = where + ".shards[" + std::to_string(k) + "]";
        return Invalid(sw + ".id", "duplicate shard id '" + s.id + "' in " + p.name);
      }
      if (s.padding) continue;  // no source to index
      auto& refs = source_index_[s.source];
      if (!refs.empty()) {
        const std::string sw = where + ".shards[" + std::to_string(k) + "]";
        const ShardRef& first = refs.front();
        const ShardSpec& other = params_[first.param].shards[first.shard];
        if (other.source_shape != s.source_shape) {
          return Invalid(sw + ".source_shape", "source '" + s.source + "' has shape " +
                                                   ShapeToString(s.source_shape) + " here but " +
                                                   ShapeToString(other.source_shape) + " in " +
                                                   params_[first.param].name);
        }
      }
      refs.push_back({i, k});
    }
    WTX_RETURN_IF_ERROR(ValidateShardCover(p, where + ".shards"));
  }
  for (uint32_t i = 0; i < modules_.size(); ++i) {
    const std::string where = "modules[" + std::to_string(i) + "]";
    if (modules_[i].name.empty()) return Invalid(where + ".name", "empty module name");
    if (!module_index_.emplace(modules_[i].name, i).second) {
      return Invalid(where + ".name", "duplicate module '" + modules_[i].name + "'");
    }
    for (const auto& pn : modules_[i].params) {
      if (!param_index_.count(pn)) {
        return Invalid(where + ".params", "unknown parameter '" + pn + "'");
      }
    }
  }
  derived_of_param_.assign(params_.size(), {});
  for (uint32_t i = 0; i < derived_.size(); ++i) {
    const std::string where = "derived[" + std::to_string(i) + "]";
    if (derived_[i].name.empty()) return Invalid(where + ".name", "empty derived name");
    if (!derived_index_.emplace(derived_[i].name, i).second) {
      return Invalid(where + ".name", "duplicate derived state '" + derived_[i].name + "'");
    }
    if (derived_[i].sources.empty()) return Invalid(where + ".sources", "no source parameter");
    for (const auto& pn : derived_[i].sources) {
      auto it = param_index_.find(pn);
      if (it == param_index_.end()) {
        return Invalid(where + ".sources", "unknown parameter '" + pn + "'");
      }
      derived_of_param_[it->second].push_back(i);
    }
  }
  canonical_order_.resize(params_.size());
  for (uint32_t i = 0; i < params_.size(); ++i) canonical_order_[i] = i;
  std::sort(canonical_order_.begin(), canonical_order_.end(),
            [&](uint32_t a, uint32_t b) { return params_[a].name < params_[b].name; });

  Hasher128 h;
  h.Str("wtx-manifest-v1");
  h.U64(params_.size());
  for (uint32_t i : canonical_order_) {
    const ParamSpec& p = params_[i];
    h.Str(p.name);
    h.Str(DTypeName(p.dtype));
    h.U64(p.shape.size());
    for (int64_t d : p.shape) h.U64(static_cast<uint64_t>(d));
    std::vector<std::string_view> ids;
    for (const auto& s : p.shards) ids.push_back(s.id);
    std::sort(ids.begin(), ids.end());
    h.U64(ids.size());
    for (auto id : ids) h.Str(id);
  }
  // Served forms only where some parameter has one: the fingerprints of manifests without
  // processed parameters are those of wtx before them (journals store them).
  if (std::any_of(params_.begin(), params_.end(), [](const ParamSpec& p) { return p.served; })) {
    h.Str("served-forms");
    for (uint32_t i : canonical_order_) {
      const ParamSpec& p = params_[i];
      if (!p.served) continue;
      h.Str(p.name);
      h.Str(DTypeName(p.served->dtype));
      h.U64(p.served->shape.size());
      for (int64_t d : p.served->shape) h.U64(static_cast<uint64_t>(d));
    }
  }
  std::vector<uint32_t> mo(modules_.size());
  for (uint32_t i = 0; i < mo.size(); ++i) mo[i] = i;
  std::sort(mo.begin(), mo.end(),
            [&](uint32_t a, uint32_t b) { return modules_[a].name < modules_[b].name; });
  h.U64(mo.size());
  for (uint32_t i : mo) {
    h.Str(modules_[i].name);
    std::vector<std::string_view> ps(modules_[i].params.begin(), modules_[i].params.end());
    std::sort(ps.begin(), ps.end());
    h.U64(ps.size());
    for (auto p : ps) h.Str(p);
  }
  std::vector<uint32_t> dord(derived_.size());
  for (uint32_t i = 0; i < dord.size(); ++i) dord[i] = i;
  std::sort(dord.begin(), dord.end(),
            [&](uint32_t a, uint32_t b) { return derived_[a].name < derived_[b].name; });
  h.U64(dord.size());
  for (uint32_t i : dord) {
    h.Str(derived_[i].name);
    h.Str(PhaseName(derived_[i].phase));
    std::vector<std::string_view> ss(derived_[i].sources.begin(), derived_[i].sources.end());
    std::sort(ss.begin(), ss.end());
    h.U64(ss.size());
    for (auto s : ss) h.Str(s);
  }
  fingerprint_ = h.HexDigest();
  return Status::OK();
}

std::optional<uint32_t> Manifest::FindParam(std::string_view name) const {
  auto it = param_index_.find(name);
  if (it == param_index_.end()) return std::nullopt;
  return it->second;
}
std::optional<uint32_t> Manifest::FindModule(std::string_view name) const {
  auto it = module_index_.find(name);
  if (it == module_index_.end()) return std::nullopt;
  return it->second;
}
std::optional<uint32_t> Manifest::FindDerived(std::string_view name) const {
  auto it = derived_index_.find(name);
  if (it == derived_index_.end()) return std::nullopt;
  return it->second;
}
std::optional<uint32_t> Manifest::FindShard(uint32_t param, std::string_view shard_id) const {
  const auto& shards = params_[param].shards;
  for (uint32_t k = 0; k < shards.size(); ++k) {
    if (shards[k].id == shard_id) return k;
  }
  return std::nullopt;
}
const std::vector<ShardRef>& Manifest::ShardsOfSource(std::string_view source) const {
  static const std::vector<ShardRef> kNone;
  auto it = source_index_.find(source);
  return it == source_index_.end() ? kNone : it->second;
}
std::vector<uint32_t> Manifest::ParamsOfSource(std::string_view source) const {
  std::vector<uint32_t> out;
  for (const ShardRef& r : ShardsOfSource(source)) out.push_back(r.param);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}
std::optional<Shape> Manifest::SourceShape(std::string_view source) const {
  const auto& refs = ShardsOfSource(source);
  if (refs.empty()) return std::nullopt;
  return params_[refs[0].param].shards[refs[0].shard].source_shape;
}
int64_t Manifest::TotalElements() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.num_elements();
  return n;
}
int64_t Manifest::TotalBytes() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.num_bytes();
  return n;
}
size_t Manifest::TotalShards() const {
  size_t n = 0;
  for (const auto& p : params_) n += p.shards.size();
  return n;
}

json Manifest::ToJson() const {
  json ps = json::array();
  for (const auto& p : params_) {
    json jp = {{"name", p.name}, {"dtype", DTypeName(p.dtype)}, {"shape", p.shape}};
    if (p.served) {
      jp["served"] = {{"dtype", DTypeName(p.served->dtype)}, {"shape", p.served->shape}};
    }
    json sh = json::array();
    for (const auto& s : p.shards) {
      if (s.padding) {
        sh.push_back({{"id", s.id}, {"layout", "padding"}, {"box", BoxToJson(s.box)}});
        continue;
      }
      json js = {{"id", s.id},
                 {"source", s.source},
                 {"source_shape", s.source_shape},
                 {"box", BoxToJson(s.box)},
                 {"source_box", BoxToJson(s.source_box)}};
      if (s.packed) js["layout"] = "packed";
      sh.push_back(std::move(js));
    }
    jp["shards"] = std::move(sh);
    ps.push_back(std::move(jp));
  }
  json ms = json::array();
  for (const auto& m : modules_) ms.push_back({{"name", m.name}, {"params", m.params}});
  json ds = json::array();
  for (const auto& d : derived_) {
    ds.push_back({{"name", d.name}, {"sources", d.sources}, {"phase", PhaseName(d.phase)}});
  }
  return {{"params", std::move(ps)}, {"modules", std::move(ms)}, {"derived", std::move(ds)}};
}

Result<ManifestPtr> ParseManifest(const json& j) {
  if (!j.is_object()) return Invalid("manifest", "expected an object");
  // "fingerprint": what `wtx manifest` prints beside the manifest; checked when present.
  WTX_RETURN_IF_ERROR(CheckFields(j, "manifest", {"params", "modules", "derived", "fingerprint"}));
  if (!j.contains("params") || !j["params"].is_array()) {
    return Invalid("manifest.params", "missing array");
  }
  std::vector<ParamSpec> params;
  const json& jp = j["params"];
  params.reserve(jp.size());
  for (size_t i = 0; i < jp.size(); ++i) {
    const std::string where = "params[" + std::to_string(i) + "]";
    const json& e = jp[i];
    if (!e.is_object()) return Invalid(where, "expected an object");
    WTX_RETURN_IF_ERROR(CheckFields(e, where, {"name", "dtype", "shape", "shards", "served"}));
    ParamSpec p;
    WTX_ASSIGN_OR_RETURN(name, ParseString(e, "name", where));
    p.name = std::move(name);
    WTX_ASSIGN_OR_RETURN(dts, ParseString(e, "dtype", where));
    auto dt = DTypeFromName(dts);
    if (!dt) return Invalid(where + ".dtype", "unknown dtype '" + dts + "'");
    p.dtype = *dt;
    if (!e.contains("shape")) return Invalid(where + ".shape", "missing");
    WTX_ASSIGN_OR_RETURN(shape, ParseShape(e["shape"], where + ".shape"));
    p.shape = std::move(shape);
    if (auto it = e.find("served"); it != e.end() && !it->is_null()) {
      const std::string sw = where + ".served";
      if (!it->is_object()) return Invalid(sw, "expected an object {dtype, shape}");
      WTX_RETURN_IF_ERROR(CheckFields(*it, sw, {"dtype", "shape"}));
      WTX_ASSIGN_OR_RETURN(sdts, ParseString(*it, "dtype", sw));
      auto sdt = DTypeFromName(sdts);
      if (!sdt) return Invalid(sw + ".dtype", "unknown dtype '" + sdts + "'");
      if (!it->contains("shape")) return Invalid(sw + ".shape", "missing");
      WTX_ASSIGN_OR_RETURN(sshape, ParseShape((*it)["shape"], sw + ".shape"));
      p.served = ServedForm{*sdt, std::move(sshape)};
    }
    if (auto it = e.find("shards"); it != e.end() && !it->is_null()) {
      if (!it->is_array() || it->empty()) {
        return Invalid(where + ".shards", "expected a non-empty array");
      }
      for (size_t k = 0; k < it->size(); ++k) {
        WTX_ASSIGN_OR_RETURN(s, ParseShard((*it)[k], where + ".shards[" + std::to_string(k) + "]"));
        p.shards.push_back(std::move(s));
      }
    }
    params.push_back(std::move(p));
  }
  std::vector<ModuleSpec> modules;
  if (auto it = j.find("modules"); it != j.end()) {
    if (!it->is_array()) return Invalid("manifest.modules", "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = "modules[" + std::to_string(i) + "]";
      const json& e = (*it)[i];
      if (!e.is_object()) return Invalid(where, "expected an object");
      WTX_RETURN_IF_ERROR(CheckFields(e, where, {"name", "params"}));
      ModuleSpec m;
      WTX_ASSIGN_OR_RETURN(name, ParseString(e, "name", where));
      m.name = std::move(name);
      WTX_ASSIGN_OR_RETURN(ps, ParseStringList(e, "params", where));
      m.params = std::move(ps);
      modules.push_back(std::move(m));
    }
  }
  std::vector<DerivedSpec> derived;
  if (auto it = j.find("derived"); it != j.end()) {
    if (!it->is_array()) return Invalid("manifest.derived", "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = "derived[" + std::to_string(i) + "]";
      const json& e = (*it)[i];
      if (!e.is_object()) return Invalid(where, "expected an object");
      WTX_RETURN_IF_ERROR(CheckFields(e, where, {"name", "sources", "phase"}));
      DerivedSpec d;
      WTX_ASSIGN_OR_RETURN(name, ParseString(e, "name", where));
      d.name = std::move(name);
      WTX_ASSIGN_OR_RETURN(srcs, ParseStringList(e, "sources", where));
      d.sources = std::move(srcs);
      WTX_ASSIGN_OR_RETURN(ph, ParseString(e, "phase", where));
      auto phase = PhaseFromName(ph);
      if (!phase) {
        return Invalid(where + ".phase", "unknown phase '" + ph + "' (post_load|attention|kernel)");
      }
      d.phase = *phase;
      derived.push_back(std::move(d));
    }
  }
  auto m = Manifest::Build(std::move(params), std::move(modules), std::move(derived));
  if (!m.ok()) return m;
  if (auto f = j.find("fingerprint"); f != j.end()) {
    if (!f->is_string()) return Invalid("manifest.fingerprint", "expected a string");
    if (f->get_ref<const std::string&>() != m.value()->Fingerprint()) {
      return Invalid("manifest.fingerprint",
                     "'" + f->get<std::string>() + "' is not this manifest's fingerprint (" +
                         m.value()->Fingerprint() + "): the manifest was edited or is damaged");
    }
  }
  return m;
}

Result<ManifestPtr> ParseManifestText(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("manifest: not valid JSON");
  return ParseManifest(j);
}

}  // namespace wtx
