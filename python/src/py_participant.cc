// wtx.Participant: a rank's participant over the engine's tensors (docs/python.md): writes by
// parameter or source, patches, in-place landings, verification and identity.
#include "py_binding.h"
#include "py_crash_points.h"

namespace wtx::python {

using nlohmann::json;

namespace {

// ------------------------------------------------------------------------------- Participant

// The tensor the engine holds for parameter `ps` now, checked against the manifest as at open:
// dtype, shape, contiguity and device. `what` names it in errors (E_BAD_WRITE).
TensorInfo CheckLiveTensor(py::handle t, const ParamSpec& ps, const std::string& what,
                           const std::string& device) {
  TensorInfo info = InspectTensor(t, what);
  if (!device.empty() && info.device != device) {
    Raise(Status(ErrorCode::kBadWrite,
                 what + " is on " + info.device + ", the other live tensors on " + device));
  }
  const bool cuda = info.device.rfind("cuda", 0) == 0;
  if (!cuda && info.device != "cpu") {
    Raise(Status(ErrorCode::kBadWrite,
                 what + " is on " + info.device + "; live tensors must be cpu or cuda tensors"));
  }
  if (ps.served) {
    CheckTensor(info, ps.served->dtype, ps.served->shape, what + " (its served form)",
                /*allow_cuda=*/true);
  } else {
    CheckTensor(info, ps.dtype, ps.shape, what, /*allow_cuda=*/true);
  }
  return info;
}

std::shared_ptr<PyParticipant> OpenParticipant(
    const std::string& journal_dir, const PyManifest& m, py::object rank_arg, py::object tensors,
    const std::string& kernel_identity, py::object rollback_budget_bytes_arg,
    py::object landing_hash_threads_arg, py::object threads_arg, bool accept_unverified_journal,
    std::optional<std::string> test_crash_at, bool identity_checks,
    const std::optional<std::map<std::string, std::string>>& metric_labels,
    std::optional<std::string> lineage, bool new_lineage) {
  const int rank = static_cast<int>(IntArg(rank_arg, "rank", 0, kMaxRanks - 1));
  const auto rollback_budget_bytes =
      static_cast<size_t>(IntArg(rollback_budget_bytes_arg, "rollback_budget_bytes", 0, INT64_MAX));
  const int landing_hash_threads = static_cast<int>(
      IntArg(landing_hash_threads_arg, "landing_hash_threads", 0, kMaxDataThreads));
  const int threads = static_cast<int>(IntArg(threads_arg, "threads", 0, kMaxDataThreads));
  auto out = std::make_shared<PyParticipant>();
  out->manifest = m.m;
  out->journal_dir = journal_dir;
  out->rank = rank;
  out->identity_checks = identity_checks;
  ParticipantOptions o;
  ParticipantHooks hooks;  // src/txn/test_hooks.h: test_crash_at only
  o.rank = rank;
  o.journal_dir = journal_dir;
  o.kernel_identity = kernel_identity;
  o.rollback_budget_bytes = rollback_budget_bytes;
  o.landing_hash_threads = landing_hash_threads;
  o.threads = threads;
  o.accept_unverified_journal = accept_unverified_journal;
  o.metric_labels = MetricLabelsArg(metric_labels);
  o.lineage = lineage.value_or("");
  o.new_lineage = new_lineage;
  out->crash = ArmTestCrashPoint(test_crash_at);
  hooks.crash_points = out->crash.get();
  if (!tensors.is_none()) {
    const Manifest& man = *m.m;
    out->resolver = std::make_shared<PyStorageResolver>(man, tensors);
    std::vector<std::span<uint8_t>> spans;
    std::vector<DeviceSpan> device_spans;
    py::object first;
    for (uint32_t i = 0; i < man.params().size(); ++i) {
      const ParamSpec& ps = man.params()[i];
      py::object t = out->resolver->Current(i);
      TensorInfo info = CheckLiveTensor(t, ps, "live tensor '" + ps.name + "'", out->live_device);
      if (out->live_device.empty()) {
        out->live_device = info.device;
        first = t;
      }
      if (info.device.rfind("cuda", 0) == 0) {
        device_spans.push_back(DeviceSpan{static_cast<uint64_t>(info.ptr), info.bytes});
      } else {
        spans.emplace_back(reinterpret_cast<uint8_t*>(info.ptr), info.bytes);
      }
    }
    if (!device_spans.empty()) {
      // The engine's current stream orders every copy and kernel wtx issues.
      DeviceLiveMemoryOptions dopts;
      py::object dev = first.attr("device");
      dopts.stream = reinterpret_cast<void*>(py::module_::import("torch")
                                                 .attr("cuda")
                                                 .attr("current_stream")(dev)
                                                 .attr("cuda_stream")
                                                 .cast<uintptr_t>());
      o.memory = Unwrap(NewBorrowedDeviceLiveMemory(man, device_spans, dopts));
      out->device = true;
    } else {
      o.memory = Unwrap(NewBorrowedLiveMemory(man, std::move(spans)));
    }
    if (identity_checks) o.storage_resolver = out->resolver;
  }
  out->p = Unwrap(WithoutGil([&] { return OpenParticipantWithHooks(std::move(o), m.m, hooks); }));
  return out;
}

// The parameters `names` names (None: all of them; a str: one) as manifest indices.
std::vector<std::string> ParamNames(const PyParticipant& self, const py::object& names) {
  std::vector<std::string> out;
  if (names.is_none()) return out;
  if (py::isinstance<py::str>(names)) {
    out.push_back(names.cast<std::string>());
  } else {
    for (py::handle n : names) out.push_back(py::str(n).cast<std::string>());
  }
  for (const std::string& n : out) {
    if (!self.manifest->FindParam(n)) {
      Raise(Status(ErrorCode::kUnknownParam, "rebind: unknown parameter '" + n + "'"));
    }
  }
  return out;
}

py::dict StorageToPy(const ParamStorage& s) {
  py::dict d;
  d["address"] = s.address;
  d["bytes"] = s.bytes;
  if (!s.released.empty()) d["released"] = s.released;
  return d;
}

// Participant.rebind: the engine's current tensors (checked against the manifest first), adopted.
py::list Rebind(PyParticipant& self, const py::object& names) {
  Participant& p = self.get();
  if (!self.resolver) {
    Raise(
        Status::InvalidArgument("rebind: this participant owns its live memory (opened "
                                "without tensors); there is nothing to rebind"));
  }
  if (!self.identity_checks) {
    Raise(
        Status::InvalidArgument("rebind: this participant was opened with "
                                "identity_checks=False; reopen it over the new tensors"));
  }
  const std::vector<std::string> wanted = ParamNames(self, names);
  const Manifest& m = *self.manifest;
  std::vector<uint32_t> indices;
  for (const std::string& n : wanted) indices.push_back(*m.FindParam(n));
  if (wanted.empty()) {
    for (uint32_t i = 0; i < m.params().size(); ++i) indices.push_back(i);
  }
  for (uint32_t i : indices) {
    py::object t = self.resolver->Current(i);
    if (t.is_none()) continue;  // removed: Participant::Rebind names it
    const ParamSpec& ps = m.params()[i];
    CheckLiveTensor(t, ps, "rebind: the engine's tensor for '" + ps.name + "'", self.live_device);
  }

  // The engine's current storage is pinned before it is adopted, so that the participant binds
  // to exactly what stays pinned (a parameter rebind refuses is moved already: never touched).
  for (uint32_t i : indices) self.resolver->Pin(i);
  auto r = WithoutGil([&] { return p.Rebind(wanted); });
  py::list out;
  for (const StorageChange& c : Unwrap(std::move(r))) {
    py::dict d;
    d["param"] = c.param;
    d["was"] = StorageToPy(c.was);
    d["now"] = StorageToPy(c.now);
    out.append(d);
  }
  return out;
}

// The live box a write of (param, shard, box) covers, for the shape check.
Box TargetBox(const Manifest& m, uint32_t pi, const std::optional<std::string>& shard,
              const std::optional<Box>& box) {
  const ParamSpec& ps = m.params()[pi];
  if (box) return *box;
  if (shard && !shard->empty()) {
    auto si = m.FindShard(pi, *shard);
    if (!si) {
      Raise(Status(ErrorCode::kUnknownParam,
                   "parameter '" + ps.name + "' has no shard '" + *shard + "'"));
    }
    return ps.shards[*si].box;
  }
  return WholeBox(ps.shape);
}

// One checked piece: the tensor must match the live dtype and the extents of what it covers.
WritePiece MakePiece(const PyParticipant& self, const std::string& param, py::handle tensor,
                     const std::optional<std::string>& shard, py::handle box_obj) {
  const Manifest& m = *self.manifest;
  auto pi = m.FindParam(param);
  if (!pi) Raise(Status(ErrorCode::kUnknownParam, "write: unknown parameter '" + param + "'"));
  std::optional<Box> box;
  if (!box_obj.is_none()) box = BoxFromPy(box_obj, "write " + param + ": box");
  if (box && !BoxInsideShape(*box, m.params()[*pi].shape)) {
    Raise(Status(ErrorCode::kOutOfRange,
                 "write " + param + ": box " + BoxToString(*box) + " is outside the parameter"));
  }
  const Box target = TargetBox(m, *pi, shard, box);
  const std::string what =
      "tensor for '" + param + "'" + (shard && !shard->empty() ? " shard " + *shard : "");
  TensorInfo t = InspectTensor(tensor, what);
  CheckTensor(t, m.params()[*pi].dtype, BoxExtents(target), what, /*allow_cuda=*/self.device);
  WritePiece piece;
  if (t.device != "cpu") piece.location = BufferLocation::kDevice;
  piece.param = param;
  piece.shard = shard.value_or("");
  piece.box = box;
  piece.data = reinterpret_cast<const void*>(t.ptr);
  piece.bytes = t.bytes;
  return piece;
}

}  // namespace

// The engine's storage of `params` (all parameters when `all`), resolved with the GIL held for
// the participant call that follows (PyStorageResolver::Prefetch); nothing without a resolver.
std::optional<PyStorageResolver::Prefetched> PrefetchFor(PyParticipant& self,
                                                         std::vector<uint32_t> params, bool all) {
  if (!self.resolver || !self.identity_checks) return std::nullopt;
  if (all) {
    params.resize(self.manifest->params().size());
    for (uint32_t i = 0; i < params.size(); ++i) params[i] = i;
  }
  return self.resolver->Prefetch(std::move(params));
}

namespace {

void WritePieces(PyParticipant& self, const std::vector<WritePiece>& pieces) {
  Participant& p = self.get();
  std::vector<uint32_t> params;
  for (const WritePiece& w : pieces) {
    if (auto i = self.manifest->FindParam(w.param)) params.push_back(*i);
  }
  auto pre = PrefetchFor(self, std::move(params));
  Check(WithoutGil([&] { return p.Write(pieces); }));
}

void Write(PyParticipant& self, const std::string& param, py::object tensor,
           std::optional<std::string> shard, py::object box) {
  WritePieces(self, {MakePiece(self, param, tensor, shard, box)});
}

// pieces: [(param, tensor, shard or None, box or None), ...], all checked before any lands.
void WriteMany(PyParticipant& self, py::list pieces) {
  std::vector<WritePiece> out;
  for (py::handle h : pieces) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(h);
    if (t.size() != 4) {
      Raise(Status::InvalidArgument("write_many: each piece is (param, tensor, shard, box)"));
    }
    std::optional<std::string> shard;
    if (!t[2].is_none()) shard = t[2].cast<std::string>();
    out.push_back(MakePiece(self, t[0].cast<std::string>(), t[1], shard, t[3]));
  }
  WritePieces(self, out);
}

// The full source tensor; this rank writes its slices of it (Participant::WriteSource).
// "experts.#" for "experts.17": the parts of a source name that differ between the ranks of an
// expert-parallel group (every other source is held, in part, by every rank).
std::string RankInvariantName(const std::string& name) {
  static const std::string kExperts = "experts.";
  std::string out;
  size_t i = 0;
  while (i < name.size()) {
    const size_t at = name.find(kExperts, i);
    if (at == std::string::npos) break;
    out.append(name, i, at + kExperts.size() - i);
    i = at + kExperts.size();
    const size_t digits_begin = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    if (i > digits_begin) out += '#';
  }
  out.append(name, i, std::string::npos);
  return out;
}

// write_source of a name this rank does not hold: 0 when another rank of the model may hold it
// (an expert of another expert-parallel rank), else E_UNKNOWN_SOURCE naming the closest names.
int NotHeldHere(const PyParticipant& self, const std::string& source) {
  const Manifest& m = *self.manifest;
  std::vector<std::string> held;
  const std::string wanted = RankInvariantName(source);
  // A parameter of this rank fed by that name elsewhere (a vocabulary slice that is all padding
  // here) is part of the model too.
  if (m.FindParam(source)) return 0;
  for (const ParamSpec& p : m.params()) {
    for (const ShardSpec& sh : p.shards) {
      if (RankInvariantName(sh.source) == wanted) return 0;
      held.push_back(sh.source);
    }
  }
  py::list close = py::module_::import("difflib").attr("get_close_matches")(source, held, 3, 0.6);
  std::string names;
  for (py::handle c : close)
    names += (names.empty() ? "" : ", ") + ("'" + py::str(c).cast<std::string>() + "'");
  Raise(Status(ErrorCode::kUnknownSource,
               "write_source: no rank of this model has a source tensor '" + source + "'" +
                   (names.empty() ? "" : "; closest: " + names)));
}

}  // namespace

// A source tensor as the live dtype and layout need it: a floating tensor of another floating
// dtype (f32, f16, bf16) is converted by torch's own .to() (round to nearest even), a
// non-contiguous one made contiguous. The object returned owns the bytes for the call.
py::object AsLiveSource(py::object tensor, DType live, const std::string& what) {
  TensorInfo t = InspectTensor(tensor, what);
  auto floating = [](std::optional<DType> d) {
    return d && (*d == DType::kF32 || *d == DType::kF16 || *d == DType::kBF16);
  };
  const bool convert = t.dtype != live && floating(t.dtype) && floating(live);
  if (!convert && t.contiguous) return tensor;
  if (!py::hasattr(tensor, "contiguous")) return tensor;  // a buffer: CheckTensor names it
  py::object out = tensor;
  if (convert) {
    static const std::map<DType, const char*> kTorch = {
        {DType::kF32, "float32"}, {DType::kF16, "float16"}, {DType::kBF16, "bfloat16"}};
    out = out.attr("to")(py::module_::import("torch").attr(kTorch.at(live)));
  }
  return out.attr("contiguous")();
}

namespace {

// `given` as the participant takes source `source` (held here): converted to the dtype of the
// parameters it feeds (AsLiveSource), with that dtype.
std::pair<py::object, DType> HeldSourceTensor(const Manifest& m, const std::string& source,
                                              py::object given, const std::string& what) {
  const DType live = m.params()[m.ShardsOfSource(source)[0].param].dtype;
  return {AsLiveSource(std::move(given), live, what), live};
}

int WriteSource(PyParticipant& self, const std::string& source, py::object given,
                const py::object& source_box) {
  Participant& p = self.get();
  const Manifest& m = *self.manifest;
  if (!m.HoldsSource(source)) return NotHeldHere(self, source);
  const std::string what = "source tensor '" + source + "'";
  auto [tensor, live] = HeldSourceTensor(m, source, std::move(given), what);
  TensorInfo t = InspectTensor(tensor, what);
  const Shape shape = *m.SourceShape(source);  // SourceShape returns by value
  auto pre = PrefetchFor(self, m.ParamsOfSource(source));
  if (source_box.is_none()) {
    CheckHostTensor(t, live, shape, what);
    auto r = WithoutGil(
        [&] { return p.WriteSource(source, reinterpret_cast<const void*>(t.ptr), t.bytes); });
    return Unwrap(std::move(r));
  }
  // A piece: its tensor has the box's extents (checked when the box lies in the source; one
  // outside it is E_OUT_OF_RANGE from the participant, naming the box).
  const Box box = BoxFromPy(source_box, "source_box");
  if (box.size() == shape.size() && BoxInsideShape(box, shape) && !BoxIsEmpty(box)) {
    CheckHostTensor(t, live, BoxExtents(box), what + " piece " + BoxToString(box));
  }
  auto r = WithoutGil(
      [&] { return p.WriteSource(source, reinterpret_cast<const void*>(t.ptr), t.bytes, box); });
  return Unwrap(std::move(r));
}

// A processed parameter's checkpoint bytes on their way to the engine's loader
// (Participant::DeclareSource): hashed from host memory (a device tensor is copied to the host
// first), never written to live memory.
int DeclareSource(PyParticipant& self, const std::string& source, py::object given) {
  Participant& p = self.get();
  const Manifest& m = *self.manifest;
  if (!m.HoldsSource(source)) return NotHeldHere(self, source);
  const std::string what = "source tensor '" + source + "'";
  auto [tensor, live] = HeldSourceTensor(m, source, std::move(given), what);
  if (InspectTensor(tensor, what).device != "cpu" && py::hasattr(tensor, "cpu")) {
    tensor = tensor.attr("cpu")();
  }
  TensorInfo t = InspectTensor(tensor, what);
  CheckHostTensor(t, live, *m.SourceShape(source), what);
  auto r = WithoutGil(
      [&] { return p.DeclareSource(source, reinterpret_cast<const void*>(t.ptr), t.bytes); });
  return Unwrap(std::move(r));
}

// The source read from a file straight into the live tensors (Participant::WriteSourceFromFile):
// `file` an open file object (its fileno() and name) or a descriptor, `offset` where the
// source's first byte is, in the live dtype.
int WriteSourceFromFile(PyParticipant& self, const std::string& source, const py::object& file,
                        const py::object& offset) {
  SourceFile f;
  if (py::hasattr(file, "fileno")) {
    f.fd = static_cast<int>(IntArg(file.attr("fileno")(), "file.fileno()", 0, INT32_MAX));
    f.name = py::hasattr(file, "name") ? py::str(file.attr("name")).cast<std::string>()
                                       : "fd " + std::to_string(f.fd);
  } else {
    f.fd = static_cast<int>(IntArg(file, "file", 0, INT32_MAX));
    f.name = "fd " + std::to_string(f.fd);
  }
  f.offset = static_cast<uint64_t>(IntArg(offset, "offset", 0, INT64_MAX));
  Participant& p = self.get();
  auto pre = PrefetchFor(self, self.manifest->ParamsOfSource(source));
  auto r = WithoutGil([&] { return p.WriteSourceFromFile(source, f); });
  return Unwrap(std::move(r));
}

std::vector<int64_t> IndicesFromPy(py::handle obj, const std::string& what) {
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    std::vector<int64_t> out;
    for (py::handle v : obj) {
      out.push_back(IntArg(v, what + "[" + std::to_string(out.size()) + "]", INT64_MIN, INT64_MAX));
    }
    return out;
  }
  TensorInfo t = InspectTensor(obj, what);
  if (t.device != "cpu" || !t.is_int64 || !t.contiguous) {
    Raise(Status(ErrorCode::kBadWrite,
                 what + " must be a contiguous cpu int64 tensor or a list of ints (got " +
                     t.dtype_name + " on " + t.device + ")"));
  }
  const auto* p = reinterpret_cast<const int64_t*>(t.ptr);
  return std::vector<int64_t>(p, p + t.bytes / sizeof(int64_t));
}

void Patch(PyParticipant& self, const std::string& source, py::object indices, py::object values,
           py::object part_arg, py::object source_box) {
  // part = (k, n): any 32-bit integers here; the participant checks 0 <= k < n <= 65536.
  if (!py::isinstance<py::tuple>(part_arg) && !py::isinstance<py::list>(part_arg)) {
    Raise(Status::InvalidArgument("part: expected (k, n)"));
  }
  py::sequence part_seq = py::reinterpret_borrow<py::sequence>(part_arg);
  if (part_seq.size() != 2) Raise(Status::InvalidArgument("part: expected (k, n)"));
  const std::pair<int, int> part{
      static_cast<int>(IntArg(part_seq[0], "part[0]", INT32_MIN, INT32_MAX)),
      static_cast<int>(IntArg(part_seq[1], "part[1]", INT32_MIN, INT32_MAX))};
  Participant& p = self.get();
  const Manifest& m = *self.manifest;
  const auto& refs = m.ShardsOfSource(source);
  if (refs.empty()) {
    Raise(Status(ErrorCode::kUnknownParam,
                 "patch: rank " + std::to_string(self.rank) + " holds no source '" + source + "'"));
  }
  const std::vector<int64_t> idx = IndicesFromPy(indices, "patch " + source + ": indices");
  const std::string what = "patch values for '" + source + "'";
  TensorInfo t = InspectTensor(values, what);
  CheckHostTensor(t, m.params()[refs[0].param].dtype, Shape{static_cast<int64_t>(idx.size())},
                  what);
  PatchRequest req;
  req.source = source;
  req.indices = idx;
  req.values = reinterpret_cast<const void*>(t.ptr);
  req.value_bytes = t.bytes;
  req.part = part.first;
  req.parts = part.second;
  if (!source_box.is_none())
    req.source_box = BoxFromPy(source_box, "patch " + source + ": source_box");
  auto pre = PrefetchFor(self, m.ParamsOfSource(source));
  Check(WithoutGil([&] { return p.Patch(req); }));
}

py::dict StatusToPy(const RankStatus& s) {
  py::dict d;
  d["rank"] = s.rank;
  d["version"] = s.version ? py::object(py::str(*s.version)) : py::none();
  d["served_digest"] = s.served_digest ? py::object(py::str(*s.served_digest)) : py::none();
  d["committed_tx"] = s.committed_tx ? py::object(py::str(*s.committed_tx)) : py::none();
  d["dirty"] = s.dirty;
  d["loaded"] = s.loaded;
  d["serving"] = s.serving;
  d["in_doubt"] = s.in_doubt ? py::object(py::str(*s.in_doubt)) : py::none();
  d["active_tx"] = s.active_tx ? py::object(py::str(*s.active_tx)) : py::none();
  d["stale_derived"] = s.stale_derived;
  d["storage_moved"] = s.storage_moved;
  d["lineage"] = s.lineage;
  d["step"] = s.step ? py::object(py::int_(*s.step)) : py::object(py::none());
  d["held"] = s.held ? py::object(py::str(*s.held)) : py::none();
  return d;
}

// ------------------------------------------------------------------------- In-place landings

LandingRegion RegionFromPy(const std::optional<std::string>& param,
                           const std::optional<std::string>& shard, py::handle box,
                           const std::optional<std::string>& source, py::handle source_box,
                           const char* call) {
  LandingRegion r;
  r.param = param.value_or("");
  r.shard = shard.value_or("");
  r.source = source.value_or("");
  if (!box.is_none()) r.box = BoxFromPy(box, std::string(call) + " " + r.param + ": box");
  if (!source_box.is_none()) {
    r.source_box = BoxFromPy(source_box, std::string(call) + " " + r.source + ": source_box");
  }
  return r;
}

// The parameters a landing region names (by parameter, or every one its source feeds).
std::vector<uint32_t> RegionParams(const Manifest& m, const LandingRegion& region) {
  if (!region.param.empty()) {
    auto i = m.FindParam(region.param);
    return i ? std::vector<uint32_t>{*i} : std::vector<uint32_t>{};
  }
  return m.ParamsOfSource(region.source);
}

py::list Reserve(PyParticipant& self, std::optional<std::string> param,
                 std::optional<std::string> shard, py::object box,
                 std::optional<std::string> source, py::object source_box) {
  Participant& p = self.get();
  const LandingRegion region = RegionFromPy(param, shard, box, source, source_box, "reserve");
  auto pre = PrefetchFor(self, RegionParams(*self.manifest, region));
  auto r = WithoutGil([&] { return p.Reserve(region); });
  py::list out;
  for (const Reservation& v : Unwrap(std::move(r))) {
    const ParamSpec& ps = self.manifest->params()[v.param_index];
    py::dict d;
    d["param"] = v.param;
    d["shard"] = v.shard;
    d["box"] = BoxToPy(v.box);
    if (!v.source_box.empty()) d["source_box"] = BoxToPy(v.source_box);
    d["dtype"] = std::string(DTypeName(ps.dtype));
    d["shape"] = ps.shape;
    d["host"] = reinterpret_cast<uintptr_t>(v.host);
    d["device_ptr"] = v.device_ptr;
    d["param_bytes"] = v.param_bytes;
    out.append(d);
  }
  return out;
}

void Landed(PyParticipant& self, std::optional<std::string> param, std::optional<std::string> shard,
            py::object box, std::optional<std::string> source, py::object source_box) {
  Participant& p = self.get();
  const LandingRegion region = RegionFromPy(param, shard, box, source, source_box, "landed");
  auto pre = PrefetchFor(self, RegionParams(*self.manifest, region));
  Check(WithoutGil([&] { return p.Landed(region); }));
}

py::dict VerifyReportToPy(const VerifyReport& r) {
  py::dict d;
  d["ok"] = r.ok;
  d["comparable"] = r.comparable;
  d["params"] = r.params;
  py::list diffs;
  for (const ChunkDifference& c : r.differences) {
    py::dict e;
    e["param"] = c.param;
    e["first_chunk"] = c.first_chunk;
    e["chunks"] = c.chunks;
    e["box"] = BoxToPy(c.box);
    diffs.append(e);
  }
  d["differences"] = diffs;
  d["chunks_checked"] = r.chunks_checked;
  d["chunks_differing"] = r.chunks_differing;
  d["message"] = r.message;
  return d;
}

template <typename Fn>
py::dict RunVerify(PyParticipant& self, Fn fn) {
  Participant& p = self.get();
  auto r = WithoutGil([&] { return fn(p); });
  return VerifyReportToPy(Unwrap(std::move(r)));
}

}  // namespace

void DefineParticipant(py::module_& m) {
  py::class_<PyParticipant, std::shared_ptr<PyParticipant>>(m, "Participant", R"(One rank's side of
every transaction: its journal, coverage accounting and the engine's live tensors. Open with
Participant.open; a context manager (close() on leaving). Every refused call raises
wtx.Error naming what was wrong.)")
      .def_static(
          "open", &OpenParticipant, py::arg("journal_dir"), py::arg("manifest"), py::kw_only(),
          py::arg("rank") = 0, py::arg("tensors") = py::none(), py::arg("kernel_identity") = "",
          py::arg("rollback_budget_bytes") = int64_t{1} << 30, py::arg("landing_hash_threads") = 0,
          py::arg("threads") = 0, py::arg("accept_unverified_journal") = false,
          py::arg("test_crash_at") = py::none(), py::arg("identity_checks") = true,
          py::arg("metric_labels") = py::none(), py::arg("lineage") = py::none(),
          py::arg("new_lineage") = false,
          R"(Opens (creating if needed) rank `rank`'s journal at journal_dir and recovers it.

tensors: where the live bytes are. A torch.nn.Module (its named_parameters() and
  named_buffers(), by manifest name) is followed at every phase: a parameter the engine
  rebinds (param.data = t, setattr of a new Parameter, a re-layout) or frees is refused with
  wtx.Error E_STORAGE_MOVED, never written or vouched for. A mapping of name to nn.Parameter
  follows each Parameter's .data. A mapping of name to bare tensor (such as p.data) cannot see
  the Parameter being rebound: only a tensor whose storage nobody but wtx still references is
  reported. None: zeroed buffers the participant owns. Tensors must match the manifest (dtype,
  shape, contiguous, all cpu or all on one cuda device), else E_BAD_WRITE naming the parameter.
threads: data-path threads (0: one per core). rollback_budget_bytes: before-image limit.
identity_checks: False skips the storage checks (benchmarks measure their cost; unsafe).
metric_labels: {"replica": ..., "fleet": ...} added to this rank's metrics (docs/observability.md).
lineage: the lineage (the policy being trained) the journal belongs to. A journal belongs to
  one lineage and one model: one of another model (E_MANIFEST_MISMATCH) or of another lineage
  (E_LINEAGE_MISMATCH) is refused naming both, unless new_lineage=True, which starts `lineage`
  on it (the old committed version and step are forgotten; a full update serves again).
Raises wtx.Error (INVALID_ARGUMENT naming the holder when this process already has the journal
open). Returns the participant; a context manager (close() on leaving the block).)")
      .def_property_readonly("rank", [](const PyParticipant& s) { return s.rank; })
      .def_property_readonly("journal_dir", [](const PyParticipant& s) { return s.journal_dir; })
      .def_property_readonly("manifest",
                             [](const PyParticipant& s) { return PyManifest{s.manifest}; })
      .def_property_readonly(
          "tensors",
          [](const PyParticipant& s) -> py::object {
            if (!s.resolver) return py::none();
            py::dict d;
            for (uint32_t i = 0; i < s.manifest->params().size(); ++i) {
              d[py::str(s.manifest->params()[i].name)] = s.resolver->Current(i);
            }
            return d;
          },
          "{name: the engine's tensor for it now} (None for participant-owned memory).")
      .def(
          "live_tensor",
          [](const PyParticipant& s, const std::string& name) -> py::object {
            auto i = s.manifest->FindParam(name);
            if (!i) Raise(Status(ErrorCode::kUnknownParam, "unknown parameter '" + name + "'"));
            return s.resolver ? s.resolver->Current(*i) : py::object(py::none());
          },
          py::arg("name"),
          "The engine's tensor for parameter `name` now (None for participant-owned memory).")
      .def("rebind", &Rebind, py::arg("names") = py::none())
      .def("check_storage",
           [](PyParticipant& self) {
             Participant& p = self.get();
             Check(WithoutGil([&] { return p.CheckStorage(); }));
           })
      .def("write", &Write, py::arg("param"), py::arg("tensor"), py::kw_only(),
           py::arg("shard") = py::none(), py::arg("box") = py::none())
      .def("write_many", &WriteMany, py::arg("pieces"),
           "Writes [(param, tensor, shard, box), ...] at once: all are checked before any lands.")
      .def("write_source", &WriteSource, py::arg("source"), py::arg("tensor"), py::kw_only(),
           py::arg("source_box") = py::none(),
           "Writes every shard this rank holds of `source` from the full source tensor; "
           "returns the number of shards written (0: this rank holds none). With source_box "
           "([[lo, hi], ...] in source coordinates) `tensor` is that piece of the source: its "
           "intersection with every shard this rank holds is written (0: none intersects); "
           "pieces from many senders cover the source exactly once (an overlap is "
           "E_DUPLICATE_WRITE naming both boxes, a box outside the source E_OUT_OF_RANGE).")
      .def("declare_source", &DeclareSource, py::arg("source"), py::arg("tensor"),
           "A processed parameter's checkpoint bytes (manifest `served`: the engine's post-load "
           "processing turns them into another served form): `tensor` is the full source as the "
           "trainer sent it, on its way to the engine's own loader. Checked and recorded as "
           "write_source is (scope, range, overlap, coverage), hashed into the checkpoint "
           "version, and never written to live memory; the live tensor is rehashed at prepare "
           "(the served digest). Returns the number of shards declared (0: none held here).")
      .def("write_source_from_file", &WriteSourceFromFile, py::arg("source"), py::arg("file"),
           py::arg("offset"),
           "write_source with the source read from `file` (an open file or a descriptor) at "
           "byte `offset`, in the live dtype, straight into the live tensors.")
      .def("patch", &Patch, py::arg("source"), py::arg("indices"), py::arg("values"), py::kw_only(),
           py::arg("part") = py::make_tuple(0, 1), py::arg("source_box") = py::none(),
           "Applies a sparse patch of `source` (delta transactions): values[i] to flat source "
           "index indices[i]. part=(k, n): part k of n of the source's patch. source_box "
           "([[lo, hi], ...]): a patch by piece instead -- every change of that box, which "
           "pieces from any number of senders cover once (an overlap is E_DUPLICATE_WRITE, an "
           "index outside the box E_OUT_OF_RANGE, a gap missing coverage at prepare).")
      .def(
          "expect_piece",
          [](PyParticipant& self, const std::string& source, py::object source_box,
             const std::string& sender, const std::string& digest) {
            ExpectedPiece e{source,
                            BoxFromPy(source_box, "expect_piece " + source + ": source_box"),
                            sender, digest};
            Participant& p = self.get();
            Check(WithoutGil([&] { return p.ExpectPiece(e); }));
          },
          py::arg("source"), py::arg("source_box"), py::arg("sender"), py::arg("digest"),
          "The transaction carries `sender`'s digest (wtx.piece_digest) of the piece "
          "`source_box` of `source`: prepare hashes the piece as it landed in live memory and "
          "votes no with E_VERSION_MISMATCH naming the source, box and sender on a difference. "
          "Raises wtx.Error E_OUT_OF_RANGE when the piece is not inside a shard of this rank "
          "(sent to the wrong rank), E_DUPLICATE_WRITE when it overlaps an expected piece.")
      .def(
          "refresh",
          [](PyParticipant& self, const std::string& name) {
            Participant& p = self.get();
            auto r = WithoutGil([&] { return p.Refresh(name); });
            return Unwrap(std::move(r));
          },
          py::arg("name") = "*")
      // Every call that takes the participant's lock releases the GIL first: the participant may
      // need the GIL under that lock (the storage resolver asks Python where the tensors are)
      // when another thread (a wtx.fleet.Member's) calls it.
      .def("status",
           [](PyParticipant& self) {
             Participant& p = self.get();
             return StatusToPy(WithoutGil([&] { return p.status(); }));
           })
      .def("_reserve", &Reserve, py::arg("param") = py::none(), py::arg("shard") = py::none(),
           py::arg("box") = py::none(), py::arg("source") = py::none(),
           py::arg("source_box") = py::none())
      .def("_landed", &Landed, py::arg("param") = py::none(), py::arg("shard") = py::none(),
           py::arg("box") = py::none(), py::arg("source") = py::none(),
           py::arg("source_box") = py::none())
      .def(
          "verify",
          [](PyParticipant& self) {
            return RunVerify(self, [](Participant& p) { return p.Verify(); });
          },
          "Rehashes every chunk of the live bytes and compares them with the committed chunk "
          "digests; a difference makes a clean rank dirty and is named in the report.")
      .def(
          "reattach",
          [](PyParticipant& self) {
            return RunVerify(self, [](Participant& p) { return p.Reattach(); });
          },
          "After reopening over surviving borrowed tensors: an exact match with the committed "
          "chunk digests makes the rank serve again without a reload.")
      .def("set_kernel_identity",
           [](PyParticipant& self, std::string id) {
             Participant& p = self.get();
             WithoutGil([&] {
               p.SetKernelIdentity(std::move(id));
               return 0;
             });
           })
      .def(
          "set_hold",
          [](PyParticipant& self, std::optional<std::string> reason) {
            Participant& p = self.get();
            WithoutGil([&] {
              p.SetHold(std::move(reason));
              return 0;
            });
          },
          py::arg("reason"),
          "Holds this rank (status()['serving'] False, status()['held'] = reason) whatever its "
          "bytes, or releases it (None): an outside gate such as the fleet's staleness bound "
          "(wtx.fleet.Member). Nothing durable changes.")
      .def("describe",
           [](PyParticipant& self) {
             Participant& p = self.get();
             RankDescription d = WithoutGil([&] { return p.Describe(); });
             py::dict out;
             out["rank"] = d.rank;
             out["fingerprint"] = d.fingerprint;
             out["kernel_identity"] = d.kernel_identity;
             return out;
           })
      .def(
          "serve",
          [](PyParticipant& self, py::bytes request) {
            Participant& p = self.get();
            std::string req = request;
            return py::bytes(WithoutGil([&] { return net::ServeEncodedRequest(p, req); }));
          },
          py::arg("request"),
          "Answers one encoded coordinator request (wtx.torch_dist carries them).")
      .def(
          "resolve_in_doubt",
          [](PyParticipant& self, py::function oracle) {
            Participant& p = self.get();
            PyOracle o(std::move(oracle));
            Check(WithoutGil([&] { return p.ResolveInDoubt(o); }));
          },
          py::arg("oracle"),
          "If in doubt, asks oracle(tx) -> (decision, version) and applies the answer.")
      .def("close", [](PyParticipant& self) {
        std::shared_ptr<Participant> p = std::move(self.p);
        py::gil_scoped_release nogil;
        p.reset();
      });
}

}  // namespace wtx::python
