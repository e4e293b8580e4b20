// The data-plane steps of a scenario on one participant (ApplyRankStep, simulator.h): write,
// patch, reserve, land, poke, refresh, load_checkpoint and set_kernel_identity, with the bytes
// they write generated here from the step's fill. The in-process simulator calls it for each
// targeted rank, and so does the TCP rank control service in a `wtx rank` process.
//
// Thread-safety: ApplyRankStep holds no state of its own; it is as safe as the Participant it
// is given (one step at a time per participant).
#include "src/conformance/simulator.h"

#include <cstring>
#include <new>
#include <set>

#include "src/checkpoint/checkpoint_slices.h"
#include "wtx/participant.h"
#include "wtx/safetensors.h"

namespace wtx::sim {

namespace {

// The parameters `param: "*"` means on a rank: those in the current transaction's scope.
std::vector<uint32_t> StarParams(const Manifest& m, const std::optional<BeginRequest>& scope) {
  std::vector<uint32_t> out;
  std::set<uint32_t> in;
  if (scope && scope->kind == TxKind::kPartial) {
    for (const auto& mod : scope->modules) {
      if (auto mi = m.FindModule(mod)) {
        for (const auto& pn : m.modules()[*mi].params) in.insert(*m.FindParam(pn));
      }
    }
    return {in.begin(), in.end()};
  }
  if (scope && scope->kind == TxKind::kDelta) {
    for (const auto& s : scope->sources) {
      for (const auto& ref : m.ShardsOfSource(s)) in.insert(ref.param);
    }
    return {in.begin(), in.end()};
  }
  for (uint32_t i = 0; i < m.params().size(); ++i) out.push_back(i);
  return out;
}

// How FillBox fills padding rows (elements no source feeds).
enum class PaddingFill {
  kZeros,  // a declared write or landing: zeros, as vLLM's loader leaves them
  kFill,   // an undeclared write (poke): the fill, keyed on the parameter and the live index,
           // so that the bytes really change there
};

// Bytes of `box` (live coordinates) of parameter `pi`, filled through the shards' mapping.
std::vector<uint8_t> FillBox(const Manifest& m, uint32_t pi, const Box& box, const FillSpec& fill,
                             PaddingFill padding = PaddingFill::kZeros) {
  const ParamSpec& p = m.params()[pi];
  const size_t esz = DTypeSize(p.dtype);
  std::vector<uint8_t> data(static_cast<size_t>(NumElements(box)) * esz);
  uint8_t* out = data.data();
  std::vector<uint64_t> src_hash(p.shards.size());
  std::vector<std::vector<int64_t>> src_strides(p.shards.size());
  for (size_t k = 0; k < p.shards.size(); ++k) {
    src_hash[k] = SourceNameHash(p.shards[k].source);
    src_strides[k] = Strides(p.shards[k].source_shape);
  }
  std::vector<int64_t> idx(box.size());
  for (size_t d = 0; d < box.size(); ++d) idx[d] = box[d].begin;
  const int64_t n = NumElements(box);
  for (int64_t e = 0; e < n; ++e) {
    // Which shard holds this live element?
    size_t k = 0;
    for (; k < p.shards.size(); ++k) {
      const Box& sb = p.shards[k].box;
      bool in = true;
      for (size_t d = 0; d < idx.size() && in; ++d) {
        in = idx[d] >= sb[d].begin && idx[d] < sb[d].end;
      }
      if (in) break;
    }
    int64_t src_flat = 0;
    uint64_t h = 0;
    if (k < p.shards.size() && p.shards[k].padding) {
      if (padding == PaddingFill::kZeros) {
        std::memset(out, 0, esz);
      } else {
        int64_t flat = 0;
        for (size_t d = 0; d < idx.size(); ++d) flat = flat * p.shape[d] + idx[d];
        FillElement(fill, SourceNameHash(p.name), flat, p.dtype, out);
      }
    } else {
      if (k < p.shards.size()) {
        const ShardSpec& s = p.shards[k];
        const size_t extra = s.box.size() - s.source_box.size();
        if (s.box.size() >= s.source_box.size()) {
          for (size_t d = 0; d < s.source_box.size(); ++d) {
            src_flat += (s.source_box[d].begin + idx[extra + d] - s.box[extra + d].begin) *
                        src_strides[k][d];
          }
        }
        h = src_hash[k];
      }
      FillElement(fill, h, src_flat, p.dtype, out);
    }
    out += esz;
    for (size_t d = box.size(); d-- > 0;) {
      if (++idx[d] < box[d].end) break;
      idx[d] = box[d].begin;
    }
  }
  return data;
}

// The rank holds `source` and every parameter it feeds has one dtype.
bool SingleDType(const Manifest& m, const std::string& source) {
  const auto& refs = m.ShardsOfSource(source);
  if (refs.empty()) return false;
  for (const ShardRef& r : refs) {
    if (m.params()[r.param].dtype != m.params()[refs[0].param].dtype) return false;
  }
  return true;
}

// `write` by `source` (every shard the rank holds of it): the whole source tensor is filled,
// and the participant slices it (Participant::WriteSource), as a checkpoint loader does.
Status WriteWholeSource(const Step& st, Participant& p) {
  const Manifest& m = p.manifest();
  const ShardRef& first = m.ShardsOfSource(st.source).front();
  const DType dtype = m.params()[first.param].dtype;
  const size_t esz = DTypeSize(dtype);
  const int64_t n = NumElements(*m.SourceShape(st.source));
  std::vector<uint8_t> full(static_cast<size_t>(n) * esz);
  const uint64_t h = SourceNameHash(st.source);
  for (int64_t i = 0; i < n; ++i)
    FillElement(st.fill, h, i, dtype, &full[static_cast<size_t>(i) * esz]);
  return p.WriteSource(st.source, full.data(), full.size()).status();
}

Status DoWrite(const Step& st, const std::optional<BeginRequest>& scope, Participant& p) {
  const Manifest& m = p.manifest();
  std::vector<WritePiece> pieces;
  std::vector<std::vector<uint8_t>> buffers;
  auto add = [&](uint32_t pi, const std::string& shard, const Box& box) {
    buffers.push_back(FillBox(m, pi, box, st.fill));
    WritePiece w;
    w.param = m.params()[pi].name;
    w.shard = shard;
    w.box = box;
    w.data = buffers.back().data();
    w.bytes = buffers.back().size();
    pieces.push_back(std::move(w));
  };
  if (!st.source.empty() && st.param == "*" && !st.box && SingleDType(m, st.source)) {
    return WriteWholeSource(st, p);
  }
  if (!st.source.empty()) {
    // The participant resolves the source (and checks the box against what it feeds); the
    // bytes are generated here for the region it will resolve to.
    WritePiece w;
    w.source = st.source;
    if (st.param != "*") w.param = st.param;
    if (st.box) {
      w.box = st.box;
      auto pi = m.FindParam(st.param);
      if (pi && BoxInsideShape(*st.box, m.params()[*pi].shape) && !BoxIsEmpty(*st.box)) {
        buffers.push_back(FillBox(m, *pi, *st.box, st.fill));
      }
    } else {
      std::vector<uint8_t> all;
      for (const auto& ref : m.ShardsOfSource(st.source)) {
        const ParamSpec& ps = m.params()[ref.param];
        if (st.param != "*" && ps.name != st.param) continue;
        std::vector<uint8_t> b = FillBox(m, ref.param, ps.shards[ref.shard].box, st.fill);
        all.insert(all.end(), b.begin(), b.end());
      }
      buffers.push_back(std::move(all));
    }
    if (!buffers.empty()) {
      w.data = buffers.back().data();
      w.bytes = buffers.back().size();
    }
    pieces.push_back(std::move(w));
  } else if (st.param == "*") {
    for (uint32_t pi : StarParams(m, scope)) add(pi, "", WholeBox(m.params()[pi].shape));
  } else {
    auto pi = m.FindParam(st.param);
    if (!pi) return Status(ErrorCode::kUnknownParam, "unknown parameter '" + st.param + "'");
    const ParamSpec& ps = m.params()[*pi];
    std::optional<uint32_t> si;
    if (!st.shard.empty()) {
      si = m.FindShard(*pi, st.shard);
      if (!si) {
        return Status(ErrorCode::kUnknownParam,
                      "parameter '" + st.param + "' has no shard '" + st.shard + "'");
      }
    }
    Box box = st.box ? *st.box : (si ? ps.shards[*si].box : WholeBox(ps.shape));
    // Boxes that do not fit are the participant's to refuse; generate no bytes for them.
    if (!BoxInsideShape(box, ps.shape) || BoxIsEmpty(box)) {
      WritePiece w;
      w.param = st.param;
      w.shard = st.shard;
      w.box = box;
      pieces.push_back(std::move(w));
    } else {
      add(*pi, st.shard, box);
    }
  }
  return p.Write(pieces);
}

// The regions a reserve/land/poke step names, as Reserve would take them: one per source,
// per parameter of "*", or the single param/shard/box.
std::vector<LandingRegion> StepRegions(const Step& st, const std::optional<BeginRequest>& scope,
                                       const Manifest& m) {
  std::vector<LandingRegion> out;
  if (!st.source.empty()) {
    LandingRegion r;
    r.source = st.source;
    if (st.param != "*") r.param = st.param;
    r.box = st.box;
    out.push_back(std::move(r));
  } else if (st.param == "*") {
    for (uint32_t pi : StarParams(m, scope)) out.push_back({m.params()[pi].name, "", "", {}, {}});
  } else {
    out.push_back({st.param, st.shard, "", st.box, {}});
  }
  return out;
}

// The engine's own copy into live memory, bypassing the participant: into the host bytes
// when the memory is host-addressable, else through the backend's raw Store (the engine's
// host-to-device copy).
Status EngineCopy(Participant& p, uint32_t pi, const Box& box, const FillSpec& fill,
                  PaddingFill padding = PaddingFill::kZeros) {
  const Manifest& m = p.manifest();
  const ParamSpec& ps = m.params()[pi];
  const std::vector<uint8_t> bytes = FillBox(m, pi, box, fill, padding);
  const size_t esz = DTypeSize(ps.dtype);
  LiveMemory& mem = p.memory();
  const uint8_t* src = bytes.data();
  Status st;
  ForEachFlatRun(ps.shape, box, [&](int64_t b, int64_t len) {
    const size_t off = static_cast<size_t>(b) * esz, n = static_cast<size_t>(len) * esz;
    if (st.ok()) st = mem.Store(pi, off, src, n);
    src += n;
  });
  return st;
}

// land: Reserve, the engine writes `fill` into the live tensor itself, Landed.
Status DoLand(const Step& st, const std::optional<BeginRequest>& scope, Participant& p, bool land) {
  const Manifest& m = p.manifest();
  for (const LandingRegion& region : StepRegions(st, scope, m)) {
    auto res = p.Reserve(region);
    if (!res.ok()) return res.status();
    if (!land) continue;
    for (const Reservation& r : res.value()) {
      const ParamSpec& ps = m.params()[r.param_index];
      if (r.host != nullptr) {  // write through the returned address, as an engine would
        const std::vector<uint8_t> bytes = FillBox(m, r.param_index, r.box, st.fill);
        const size_t esz = DTypeSize(ps.dtype);
        const uint8_t* src = bytes.data();
        ForEachFlatRun(ps.shape, r.box, [&](int64_t b, int64_t len) {
          std::memcpy(static_cast<uint8_t*>(r.host) + b * esz, src, len * esz);
          src += len * esz;
        });
      } else {
        WTX_RETURN_IF_ERROR(EngineCopy(p, r.param_index, r.box, st.fill));
      }
    }
    WTX_RETURN_IF_ERROR(p.Landed(region));
  }
  return Status::OK();
}

// poke: the bytes of a region change and wtx is not told (an undeclared write).
Status DoPoke(const Step& st, Participant& p) {
  const Manifest& m = p.manifest();
  for (const LandingRegion& region : StepRegions(st, std::nullopt, m)) {
    std::vector<std::pair<uint32_t, Box>> boxes;
    if (!region.source.empty()) {
      for (const auto& ref : m.ShardsOfSource(region.source)) {
        const ParamSpec& ps = m.params()[ref.param];
        if (!region.param.empty() && ps.name != region.param) continue;
        boxes.emplace_back(ref.param, region.box ? *region.box : ps.shards[ref.shard].box);
      }
      if (boxes.empty()) {
        return Status(ErrorCode::kUnknownParam,
                      "poke: no shard fed by source '" + region.source + "'");
      }
    } else {
      auto pi = m.FindParam(region.param);
      if (!pi)
        return Status(ErrorCode::kUnknownParam, "poke: unknown parameter '" + region.param + "'");
      const ParamSpec& ps = m.params()[*pi];
      std::optional<uint32_t> si;
      if (!region.shard.empty() && !(si = m.FindShard(*pi, region.shard))) {
        return Status(ErrorCode::kUnknownParam,
                      "poke: parameter '" + region.param + "' has no shard '" + region.shard + "'");
      }
      boxes.emplace_back(*pi, region.box ? *region.box
                              : si       ? ps.shards[*si].box
                                         : WholeBox(ps.shape));
    }
    for (const auto& [pi, box] : boxes) {
      const ParamSpec& ps = m.params()[pi];
      if (!BoxInsideShape(box, ps.shape) || BoxIsEmpty(box)) {
        return Status(ErrorCode::kOutOfRange,
                      "poke: box " + BoxToString(box) + " lies outside '" + ps.name + "'");
      }
      WTX_RETURN_IF_ERROR(EngineCopy(p, pi, box, st.fill, PaddingFill::kFill));
    }
  }
  return Status::OK();
}

Status DoPatch(const Step& st, Participant& p) {
  const Manifest& m = p.manifest();
  const auto& refs = m.ShardsOfSource(st.source);
  std::vector<uint8_t> values;
  if (!refs.empty()) {
    const DType dt = m.params()[refs[0].param].dtype;
    const size_t esz = DTypeSize(dt);
    values.resize(st.indices.size() * esz);
    const uint64_t h = SourceNameHash(st.source);
    for (size_t i = 0; i < st.indices.size(); ++i) {
      FillElement(st.fill, h, st.indices[i], dt, values.data() + i * esz);
    }
  }
  PatchRequest req;
  req.source = st.source;
  req.indices = st.indices;
  req.values = values.data();
  req.value_bytes = values.size();
  req.part = st.part;
  req.parts = st.parts;
  return p.Patch(req);
}

}  // namespace

Status ApplyRankStep(const Step& st, const std::optional<BeginRequest>& scope, Participant& p,
                     const std::function<void(uint64_t)>& on_checkpoint_read) {
  if (st.op == "write") {
    // The bytes of a write are generated here: a box of a valid but huge parameter may not fit
    // in this machine's memory, which is the step's error, not a crash.
    try {
      return DoWrite(st, scope, p);
    } catch (const std::bad_alloc&) {
      return Status::InvalidArgument("steps[" + std::to_string(st.index) +
                                     "]: out of memory generating the bytes of the write");
    }
  }
  if (st.op == "patch") return DoPatch(st, p);
  if (st.op == "reserve") return DoLand(st, scope, p, false);
  if (st.op == "land") return DoLand(st, scope, p, true);
  if (st.op == "poke") return DoPoke(st, p);
  if (st.op == "refresh") return p.Refresh(st.derived).status();
  if (st.op == "load_checkpoint") {  // `wtx load`: value is the checkpoint's path
    auto c = SafetensorsCheckpoint::Open(st.value);
    if (!c.ok()) return c.status();
    return WriteCheckpointSlices(*c.value(), p, on_checkpoint_read).status();
  }
  if (st.op == "set_kernel_identity") {
    p.SetKernelIdentity(st.value);
    return Status::OK();
  }
  return Status::InvalidArgument("'" + st.op + "' is not a rank step");
}

}  // namespace wtx::sim
