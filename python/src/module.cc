// wtx._wtx: the Python binding of wtx (python/wtx/ wraps it; docs/python.md). Manifests,
// participants over borrowed torch tensors, coordinators over the in-process transport or over
// a message carrier (wtx.torch_dist), and the journal history. Every wtx error is raised as
// wtx.Error; a transaction that aborts is an outcome dict, not an exception.
//
// Thread-safety: the wrapped C++ objects are thread-safe; every call that copies, hashes,
// journals or runs the protocol releases the GIL.
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "journal/journal.h"
#include "py_common.h"
#include "py_storage.h"
#include "src/history/history.h"
#include "src/net/message_transport.h"
#include "src/txn/logged_decision_json.h"
#include "src/txn/resolve_from_log.h"
#include "src/txn/test_hooks.h"
#include "wtx/coordinator.h"
#include "wtx/device_live_memory.h"
#include "wtx/expected_version.h"
#include "wtx/hf_manifest.h"
#include "wtx/inproc_transport.h"
#include "wtx/limits.h"
#include "wtx/participant.h"

namespace wtx::python {

using nlohmann::json;

namespace {

// Runs fn() with the GIL released (copies, hashing, journal syncs, the protocol) and returns
// its result; the caller raises on failure with the GIL held again.
template <typename Fn>
auto WithoutGil(Fn&& fn) {
  py::gil_scoped_release nogil;
  return fn();
}

// ---------------------------------------------------------------------------------- Manifest

struct PyManifest {
  ManifestPtr m;
};

py::dict ShardToPy(const ShardSpec& s) {
  py::dict d;
  d["id"] = s.id;
  d["source"] = s.source;
  d["source_shape"] = s.source_shape;
  d["box"] = BoxToPy(s.box);
  d["source_box"] = BoxToPy(s.source_box);
  d["packed"] = s.packed;
  return d;
}

py::list ParamsToPy(const Manifest& m) {
  py::list out;
  for (const ParamSpec& p : m.params()) {
    py::dict d;
    d["name"] = p.name;
    d["dtype"] = std::string(DTypeName(p.dtype));
    d["shape"] = p.shape;
    py::list shards;
    for (const ShardSpec& s : p.shards) shards.append(ShardToPy(s));
    d["shards"] = shards;
    out.append(d);
  }
  return out;
}

PyManifest FromHfConfig(py::object config, py::object tp, py::object rank,
                        std::optional<std::string> dtype) {
  HfManifestOptions o;
  o.tp = static_cast<int>(IntArg(tp, "tp", 1, kMaxRanks));
  o.rank = static_cast<int>(IntArg(rank, "rank", 0, kMaxRanks - 1));
  if (dtype) {
    auto d = DTypeFromName(*dtype);
    if (!d) Raise(Status::InvalidArgument("dtype: unknown '" + *dtype + "'"));
    o.dtype = *d;
  }
  if (py::isinstance<py::dict>(config)) return {Unwrap(ManifestFromHfConfig(FromPy(config), o))};
  std::string path = py::str(py::module_::import("os").attr("fspath")(config));
  if (py::module_::import("os.path").attr("isdir")(path).cast<bool>()) path += "/config.json";
  return {Unwrap(ManifestFromHfConfigFile(path, o))};
}

// ------------------------------------------------------------------------------- Participant

// Kills the process (exit status 137, as SIGKILL) at an armed protocol point
// ("before_prepare_logged", "after_prepare_logged", "before_decision_logged",
// "after_decision_logged"): the fault injection of `test_crash_at` (a real process death, for
// multi-process tests), as `wtx rank --test-hooks` offers over its control connection.
class ExitAtCrashPoint : public CrashPoints {
 public:
  explicit ExitAtCrashPoint(std::string point) : point_(std::move(point)) {}
  bool ShouldCrash(std::string_view point) override {
    if (point == point_) ::_exit(137);
    return false;
  }

 private:
  std::string point_;
};

class PyOracle : public DecisionOracle {
 public:
  explicit PyOracle(py::function fn) : fn_(std::move(fn)) {}
  Result<std::pair<Decision, std::string>> QueryDecision(const std::string& tx) override {
    py::gil_scoped_acquire gil;
    try {
      py::tuple r = fn_(tx);
      const std::string name = r[0].cast<std::string>();
      auto d = DecisionFromName(name);
      if (!d) return Status::InvalidArgument("oracle answered unknown decision '" + name + "'");
      return std::make_pair(*d, r[1].is_none() ? std::string() : r[1].cast<std::string>());
    } catch (const std::exception& e) {
      return Status(ErrorCode::kCrashed, std::string("the decision oracle failed: ") + e.what());
    }
  }

 private:
  py::function fn_;
};

struct PyParticipant {
  std::shared_ptr<Participant> p;
  ManifestPtr manifest;
  std::string journal_dir;
  int rank = 0;
  // Where the engine's parameters are now (py_storage.h); null for participant-owned memory.
  std::shared_ptr<PyStorageResolver> resolver;
  bool identity_checks = true;  // the resolver is consulted at every phase
  bool device = false;          // the borrowed tensors are CUDA tensors (device live memory)
  std::string live_device;      // their device ("cpu", "cuda:0")
  std::unique_ptr<CrashPoints> crash;
  pid_t pid = ::getpid();  // the process that opened it

  PyParticipant() = default;
  PyParticipant(const PyParticipant&) = delete;
  PyParticipant& operator=(const PyParticipant&) = delete;
  ~PyParticipant() {
    // A forked child (multiprocessing, a data loader) inherits the Python object but not the
    // journal's or the data path's threads: destroying it there would join threads that do
    // not exist. It is left to the process that opened it.
    if (::getpid() != pid && p) new std::shared_ptr<Participant>(std::move(p));  // NOLINT
  }

  Participant& get() const {
    if (!p) {
      Raise(Status::InvalidArgument("participant of rank " + std::to_string(rank) +
                                    " is closed (open a new one: wtx.Participant.open)"));
    }
    return *p;
  }
};

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
  CheckTensor(info, ps.dtype, ps.shape, what, /*allow_cuda=*/true);
  return info;
}

std::shared_ptr<PyParticipant> OpenParticipant(
    const std::string& journal_dir, const PyManifest& m, py::object rank_arg, py::object tensors,
    const std::string& kernel_identity, py::object rollback_budget_bytes_arg,
    py::object landing_hash_threads_arg, py::object threads_arg, bool accept_unverified_journal,
    std::optional<std::string> test_crash_at, bool identity_checks) {
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
  if (test_crash_at) {
    out->crash = std::make_unique<ExitAtCrashPoint>(*test_crash_at);
    hooks.crash_points = out->crash.get();
  }
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

Shape Extents(const Box& b) {
  Shape s;
  for (const Range& r : b) s.push_back(r.extent());
  return s;
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
  CheckTensor(t, m.params()[*pi].dtype, Extents(target), what, /*allow_cuda=*/self.device);
  WritePiece piece;
  if (t.device != "cpu") piece.location = BufferLocation::kDevice;
  piece.param = param;
  piece.shard = shard.value_or("");
  piece.box = box;
  piece.data = reinterpret_cast<const void*>(t.ptr);
  piece.bytes = t.bytes;
  return piece;
}

// The engine's storage of `params` (all parameters when `all`), resolved with the GIL held for
// the participant call that follows (PyStorageResolver::Prefetch); nothing without a resolver.
std::optional<PyStorageResolver::Prefetched> PrefetchFor(PyParticipant& self,
                                                         std::vector<uint32_t> params,
                                                         bool all = false) {
  if (!self.resolver || !self.identity_checks) return std::nullopt;
  if (all) {
    params.resize(self.manifest->params().size());
    for (uint32_t i = 0; i < params.size(); ++i) params[i] = i;
  }
  return self.resolver->Prefetch(std::move(params));
}

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

int WriteSource(PyParticipant& self, const std::string& source, py::object given) {
  Participant& p = self.get();
  const Manifest& m = *self.manifest;
  const auto& refs = m.ShardsOfSource(source);
  if (refs.empty()) return NotHeldHere(self, source);
  const std::string what = "source tensor '" + source + "'";
  py::object tensor = AsLiveSource(std::move(given), m.params()[refs[0].param].dtype, what);
  TensorInfo t = InspectTensor(tensor, what);
  CheckHostTensor(t, m.params()[refs[0].param].dtype, *m.SourceShape(source), what);
  auto pre = PrefetchFor(self, m.ParamsOfSource(source));
  auto r = WithoutGil(
      [&] { return p.WriteSource(source, reinterpret_cast<const void*>(t.ptr), t.bytes); });
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
           py::object part_arg) {
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
  auto pre = PrefetchFor(self, m.ParamsOfSource(source));
  Check(WithoutGil([&] { return p.Patch(req); }));
}

py::dict StatusToPy(const RankStatus& s) {
  py::dict d;
  d["rank"] = s.rank;
  d["version"] = s.version ? py::object(py::str(*s.version)) : py::none();
  d["committed_tx"] = s.committed_tx ? py::object(py::str(*s.committed_tx)) : py::none();
  d["dirty"] = s.dirty;
  d["loaded"] = s.loaded;
  d["serving"] = s.serving;
  d["in_doubt"] = s.in_doubt ? py::object(py::str(*s.in_doubt)) : py::none();
  d["active_tx"] = s.active_tx ? py::object(py::str(*s.active_tx)) : py::none();
  d["stale_derived"] = s.stale_derived;
  d["storage_moved"] = s.storage_moved;
  return d;
}

// ------------------------------------------------------------------------- In-place landings

LandingRegion RegionFromPy(const std::optional<std::string>& param,
                           const std::optional<std::string>& shard, py::handle box,
                           const std::optional<std::string>& source, const char* call) {
  LandingRegion r;
  r.param = param.value_or("");
  r.shard = shard.value_or("");
  r.source = source.value_or("");
  if (!box.is_none()) r.box = BoxFromPy(box, std::string(call) + " " + r.param + ": box");
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
                 std::optional<std::string> source) {
  Participant& p = self.get();
  const LandingRegion region = RegionFromPy(param, shard, box, source, "reserve");
  auto pre = PrefetchFor(self, RegionParams(*self.manifest, region));
  auto r = WithoutGil([&] { return p.Reserve(region); });
  py::list out;
  for (const Reservation& v : Unwrap(std::move(r))) {
    const ParamSpec& ps = self.manifest->params()[v.param_index];
    py::dict d;
    d["param"] = v.param;
    d["shard"] = v.shard;
    d["box"] = BoxToPy(v.box);
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
            py::object box, std::optional<std::string> source) {
  Participant& p = self.get();
  const LandingRegion region = RegionFromPy(param, shard, box, source, "landed");
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

// ------------------------------------------------------------------------------- Coordinator

py::list MissingToPy(const std::vector<MissingPiece>& missing) {
  py::list out;
  for (const MissingPiece& mp : missing) {
    py::dict d;
    d["param"] = mp.param;
    d["shard"] = mp.shard;
    d["box"] = BoxToPy(mp.box);
    d["source"] = mp.source;
    d["missing_parts"] = mp.missing_parts;
    d["parts"] = mp.parts;
    out.append(d);
  }
  return out;
}

py::object StatusOrNone(const Status& s) {
  if (s.ok()) return py::none();
  py::dict d;
  d["code"] = std::string(s.code_name());
  d["message"] = s.message();
  return d;
}

py::dict VoteToPy(const VoteReport& v) {
  py::dict d;
  d["rank"] = v.rank;
  d["error"] = py::none();
  d["message"] = "";
  d["missing"] = py::list();
  d["missing_total"] = 0;
  d["stale"] = py::list();
  d["vote"] = std::string(VoteKindName(v.kind));
  switch (v.kind) {
    case VoteReport::Kind::kYes:
      d["wrote"] = v.vote.wrote;
      d["digest"] = v.vote.digest;
      break;
    case VoteReport::Kind::kNo: {
      d["wrote"] = v.vote.wrote;
      d["error"] = std::string(ErrorCodeName(v.vote.error));
      d["message"] = v.vote.message;
      py::list errors;
      for (ErrorCode e : v.vote.errors) errors.append(std::string(ErrorCodeName(e)));
      d["errors"] = errors;
      d["missing"] = MissingToPy(v.vote.missing);
      d["missing_total"] = v.vote.missing_total;
      py::list stale;
      for (const auto& s : v.vote.stale) stale.append(s.name);
      d["stale"] = stale;
      break;
    }
    case VoteReport::Kind::kTimeout:
    case VoteReport::Kind::kCrashed:
      d["error"] = std::string(v.status.code_name());
      d["message"] = v.status.message();
      break;
  }
  return d;
}

py::dict OutcomeToPy(const CommitOutcome& o) {
  py::dict d;
  std::string outcome = "in_doubt";  // the coordinator died before a decision was known
  if (o.decision) {
    switch (*o.decision) {
      case Decision::kCommit:
        outcome = "committed";
        break;
      case Decision::kNoop:
        outcome = "noop";
        break;
      case Decision::kAbort:
        outcome = "aborted";
        break;
    }
  }
  d["outcome"] = outcome;
  d["version"] = o.version.empty() ? py::object(py::none()) : py::object(py::str(o.version));
  d["error"] = StatusOrNone(o.status);
  py::list votes;
  for (const VoteReport& v : o.votes) {
    py::dict vd = VoteToPy(v);
    if (outcome == "noop" && v.kind == VoteReport::Kind::kNo && !v.vote.wrote) {
      // Nothing was written anywhere: this rank's "no" only said its coverage is empty. The
      // transaction is a noop, and so is the rank's part in it.
      vd["vote"] = "noop";
      vd["error"] = py::none();
      vd["errors"] = py::list();
      vd["message"] = "rank " + std::to_string(v.rank) + ": nothing written";
      vd["missing"] = py::list();
      vd["missing_total"] = 0;
    }
    votes.append(vd);
  }
  d["votes"] = votes;
  d["unacknowledged"] = o.unacknowledged;
  return d;
}

py::dict BeginErrorsToPy(const BeginOutcome& o) {
  py::list errors;
  for (const RankError& e : o.errors) {
    py::dict d;
    d["rank"] = e.rank;
    d["code"] = std::string(e.status.code_name());
    d["message"] = e.status.message();
    errors.append(d);
  }
  py::dict details;
  details["errors"] = errors;
  return details;
}

// A message carrier implemented in Python: carrier(rank, request: bytes, timeout_s) -> bytes.
// Raising wtx.Error with code E_TIMEOUT means "no answer in time"; any other exception means the
// rank is gone.
net::MessageCarrier PyCarrier(py::function fn) {
  auto shared = std::make_shared<py::function>(std::move(fn));
  return [shared](int rank, const std::string& req,
                  std::chrono::milliseconds timeout) -> Result<std::string> {
    py::gil_scoped_acquire gil;
    try {
      py::object r = (*shared)(rank, py::bytes(req), timeout.count() / 1000.0);
      return std::string(r.cast<py::bytes>());
    } catch (py::error_already_set& e) {
      const bool timeout_error = e.value() && py::hasattr(e.value(), "code") &&
                                 py::str(e.value().attr("code")).cast<std::string>() == "E_TIMEOUT";
      return Status(timeout_error ? ErrorCode::kTimeout : ErrorCode::kCrashed, e.what());
    } catch (const std::exception& e) {
      return Status(ErrorCode::kCrashed, e.what());
    }
  };
}

struct PyCoordinator {
  std::unique_ptr<CrashPoints> crash;  // declared first: outlives the coordinator
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Coordinator> c;
  std::vector<std::shared_ptr<PyParticipant>> participants;  // kept alive (in-process)
  std::string journal_dir;
  pid_t pid = ::getpid();  // the process that opened it

  PyCoordinator() = default;
  PyCoordinator(const PyCoordinator&) = delete;
  PyCoordinator& operator=(const PyCoordinator&) = delete;
  ~PyCoordinator() {
    // As ~PyParticipant: a forked child never joins the parent's threads.
    if (::getpid() != pid) {
      if (c) c.release();                  // NOLINT(bugprone-unused-return-value): leaked
      if (transport) transport.release();  // NOLINT(bugprone-unused-return-value): leaked
    }
  }

  Coordinator& get() const {
    if (!c) Raise(Status::InvalidArgument("coordinator is closed"));
    return *c;
  }
};

// The shared decision log of a coordinator (decision_log="etcd://..."), its lease and wait.
struct PyDecisionLogArgs {
  std::optional<std::string> url;
  double lease_ttl_s = 2.0;
  double leader_wait_s = 5.0;
  double request_timeout_s = 2.0;
};

std::shared_ptr<DecisionLog> OpenPyDecisionLog(const std::string& url, double request_timeout_s,
                                               bool create = false) {
  SecondsArg(request_timeout_s, "decision_log_timeout", kMaxTimeoutMs / 1000.0);
  DecisionLogOptions o;
  o.url = url;
  o.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000));
  o.create = create;
  auto r = WithoutGil([&] { return OpenDecisionLog(o); });
  return Unwrap(std::move(r));
}

CoordinatorOptions CoordOptions(PyCoordinator& self, const std::string& dir,
                                double prepare_timeout_s, bool accept_unverified_journal,
                                const std::optional<std::string>& test_crash_at,
                                const PyDecisionLogArgs& log = {}) {
  CoordinatorOptions o;
  o.journal_dir = dir;
  o.accept_unverified_journal = accept_unverified_journal;
  if (log.url) {
    SecondsArg(log.lease_ttl_s, "lease_ttl", 600.0);
    SecondsArg(log.leader_wait_s, "leader_wait", kMaxTimeoutMs / 1000.0);
    o.decision_log = OpenPyDecisionLog(*log.url, log.request_timeout_s, /*create=*/true);
    o.lease_ttl = std::chrono::milliseconds(static_cast<int64_t>(log.lease_ttl_s * 1000));
    o.leader_wait = std::chrono::milliseconds(static_cast<int64_t>(log.leader_wait_s * 1000));
  }
  if (test_crash_at) {
    self.crash = std::make_unique<ExitAtCrashPoint>(*test_crash_at);
  }
  SecondsArg(prepare_timeout_s, "prepare_timeout", kMaxTimeoutMs / 1000.0);
  o.prepare_timeout = std::chrono::milliseconds(static_cast<int64_t>(prepare_timeout_s * 1000));
  return o;
}

std::unique_ptr<Coordinator> OpenCoordinator(const CoordinatorOptions& o, Transport* t,
                                             CrashPoints* crash) {
  CoordinatorHooks hooks;  // src/txn/test_hooks.h: test_crash_at only
  hooks.crash_points = crash;
  auto r = WithoutGil([&] { return OpenCoordinatorWithHooks(o, t, hooks); });
  return Unwrap(std::move(r));
}

std::shared_ptr<PyCoordinator> OpenInProc(const std::string& dir,
                                          std::vector<std::shared_ptr<PyParticipant>> ps,
                                          double prepare_timeout_s, bool accept_unverified_journal,
                                          std::optional<std::string> test_crash_at,
                                          std::optional<std::string> decision_log, double lease_ttl,
                                          double leader_wait) {
  if (ps.empty()) Raise(Status::InvalidArgument("coordinator: participants is empty"));
  auto out = std::make_shared<PyCoordinator>();
  auto t = std::make_unique<InProcTransport>(static_cast<int>(ps.size()));
  for (size_t i = 0; i < ps.size(); ++i) {
    if (ps[i]->rank != static_cast<int>(i)) {
      Raise(Status::InvalidArgument("coordinator: participants[" + std::to_string(i) +
                                    "] is rank " + std::to_string(ps[i]->rank) +
                                    " (list them in rank order)"));
    }
    t->SetParticipant(static_cast<int>(i), &ps[i]->get());
  }
  out->participants = std::move(ps);
  out->journal_dir = dir;
  // CoordOptions arms out->crash: called first (argument order is unspecified).
  const CoordinatorOptions o =
      CoordOptions(*out, dir, prepare_timeout_s, accept_unverified_journal, test_crash_at,
                   PyDecisionLogArgs{decision_log, lease_ttl, leader_wait});
  out->c = OpenCoordinator(o, t.get(), out->crash.get());
  out->transport = std::move(t);
  return out;
}

std::shared_ptr<PyCoordinator> OpenCarried(const std::string& dir, py::object num_ranks_arg,
                                           py::function carrier, double prepare_timeout_s,
                                           double request_timeout_s, bool accept_unverified_journal,
                                           std::optional<std::string> test_crash_at,
                                           std::optional<std::string> decision_log,
                                           double lease_ttl, double leader_wait) {
  const int num_ranks = static_cast<int>(IntArg(num_ranks_arg, "num_ranks", 1, kMaxRanks));
  SecondsArg(request_timeout_s, "request_timeout", kMaxTimeoutMs / 1000.0);
  auto out = std::make_shared<PyCoordinator>();
  out->journal_dir = dir;
  out->transport = std::make_unique<net::MessageTransport>(
      num_ranks, PyCarrier(std::move(carrier)),
      std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000)));
  // CoordOptions arms out->crash: called first (argument order is unspecified).
  const CoordinatorOptions o =
      CoordOptions(*out, dir, prepare_timeout_s, accept_unverified_journal, test_crash_at,
                   PyDecisionLogArgs{decision_log, lease_ttl, leader_wait});
  out->c = OpenCoordinator(o, out->transport.get(), out->crash.get());
  return out;
}

BeginRequest MakeBegin(const std::string& tx, const std::string& kind,
                       std::optional<std::string> base,
                       std::optional<std::vector<std::string>> modules,
                       std::optional<std::vector<std::string>> sources, bool rollback,
                       const std::string& verify) {
  BeginRequest req;
  req.tx = tx;
  auto k = TxKindFromName(kind);
  if (!k)
    Raise(
        Status::InvalidArgument("begin: kind must be full, partial or delta, not '" + kind + "'"));
  req.kind = *k;
  req.base = base.value_or("");
  req.modules = modules.value_or(std::vector<std::string>{});
  req.sources = sources.value_or(std::vector<std::string>{});
  req.rollback = rollback;
  auto mode = VerifyModeFromName(verify);
  if (!mode)
    Raise(Status::InvalidArgument("begin: verify must be touched or all, not '" + verify + "'"));
  req.verify = *mode;
  return req;
}

// Every in-process participant's storage, resolved with the GIL held for the coordinator call
// that follows (its ranks' checks then need no GIL on the fan-out threads).
std::vector<PyStorageResolver::Prefetched> PrefetchRanks(PyCoordinator& self) {
  std::vector<PyStorageResolver::Prefetched> out;
  for (auto& p : self.participants) {
    if (auto pre = PrefetchFor(*p, {}, /*all=*/true)) out.push_back(std::move(*pre));
  }
  return out;
}

void Begin(PyCoordinator& self, const std::string& tx, const std::string& kind,
           std::optional<std::string> base, std::optional<std::vector<std::string>> modules,
           std::optional<std::vector<std::string>> sources, bool rollback,
           const std::string& verify) {
  BeginRequest req = MakeBegin(tx, kind, base, modules, sources, rollback, verify);
  Coordinator& c = self.get();
  auto pre = PrefetchRanks(self);
  const BeginOutcome o = WithoutGil([&] { return c.Begin(req); });
  if (!o.status.ok()) Raise(o.status, BeginErrorsToPy(o));
}

py::dict Commit(PyCoordinator& self, const std::string& tx,
                std::optional<std::string> expect_version,
                std::optional<std::vector<std::string>> expect_rank_digests) {
  if (expect_version && expect_version->empty()) {
    Raise(Status::InvalidArgument("commit: expect_version must be a version, not empty"));
  }
  Coordinator& c = self.get();
  CommitOptions opts;
  opts.expect_version = std::move(expect_version);
  if (expect_rank_digests) opts.expect_rank_digests = std::move(*expect_rank_digests);
  auto pre = PrefetchRanks(self);
  const CommitOutcome o = WithoutGil([&] { return c.Commit(tx, opts); });
  // Misuse (no such transaction, decided already) is an error; a decision is an outcome.
  if (!o.decision && o.status.code() != ErrorCode::kCrashed) Raise(o.status);
  return OutcomeToPy(o);
}

py::dict Abort(PyCoordinator& self, const std::string& tx) {
  Coordinator& c = self.get();
  const BeginOutcome o = WithoutGil([&] { return c.Abort(tx); });
  if (!o.status.ok()) Raise(o.status, BeginErrorsToPy(o));
  py::dict d;
  d["outcome"] = "aborted";
  d["tx"] = tx;
  return d;
}

// -------------------------------------------------------------------------- Expected version

// What a full transaction writing exactly `sources` ({name: full tensor}) must commit.
py::dict ExpectedVersionOf(const std::vector<PyManifest>& manifests, py::dict sources) {
  std::vector<const Manifest*> ms;
  for (const PyManifest& m : manifests) ms.push_back(m.m.get());
  std::vector<SourceTensor> st;
  std::vector<py::object> keep;  // converted sources, alive for the computation
  for (auto item : sources) {
    const std::string name = py::str(item.first);
    py::object tensor = py::reinterpret_borrow<py::object>(item.second);
    for (const Manifest* m : ms) {  // the live dtype of the first rank that holds it
      const auto& refs = m->ShardsOfSource(name);
      if (refs.empty()) continue;
      tensor =
          AsLiveSource(tensor, m->params()[refs[0].param].dtype, "source tensor '" + name + "'");
      break;
    }
    keep.push_back(tensor);
    TensorInfo t = InspectTensor(tensor, "source tensor '" + name + "'");
    if (t.device != "cpu" || !t.contiguous || !t.dtype) {
      Raise(Status(ErrorCode::kBadWrite,
                   "source tensor '" + name + "' must be a contiguous cpu tensor of a wtx dtype"));
    }
    st.push_back(
        SourceTensor{name, t.shape, *t.dtype, reinterpret_cast<const void*>(t.ptr), t.bytes});
  }
  auto r = WithoutGil([&] { return ComputeExpectedVersion(ms, st); });
  ExpectedVersion ev = Unwrap(std::move(r));
  py::dict d;
  d["version"] = ev.version;
  d["rank_digests"] = ev.rank_digests;
  return d;
}

// ----------------------------------------------------------------------------------- History

py::list History(const std::string& dir) {
  auto h = WithoutGil([&]() -> Result<std::vector<json>> {
    JournalOptions o;
    o.read_only = true;
    o.create_if_missing = false;
    auto j = Journal::Open(dir, o);
    if (!j.ok()) return j.status();
    return ReadHistory(*j.value());
  });
  py::list out;
  for (const json& e : Unwrap(std::move(h))) out.append(ToPy(e));
  return out;
}

void DefineModule(py::module_& m) {
  m.doc() = "wtx: journaled all-ranks weight-update transactions (docs/python.md)";
  InitErrors(m);

  py::class_<PyManifest>(m, "Manifest")
      .def_static("from_hf_config", &FromHfConfig, py::arg("config"), py::kw_only(),
                  py::arg("tp") = 1, py::arg("rank") = 0, py::arg("dtype") = py::none())
      .def_static(
          "from_json",
          [](const std::string& text) { return PyManifest{Unwrap(ParseManifestText(text))}; },
          py::arg("text"))
      .def("to_json", [](const PyManifest& self) { return self.m->ToJson().dump(); })
      .def_property_readonly("params", [](const PyManifest& self) { return ParamsToPy(*self.m); })
      .def_property_readonly("fingerprint",
                             [](const PyManifest& self) { return self.m->Fingerprint(); })
      .def_property_readonly("total_bytes",
                             [](const PyManifest& self) { return self.m->TotalBytes(); })
      .def_property_readonly("modules",
                             [](const PyManifest& self) {
                               py::dict d;
                               for (const auto& mod : self.m->modules())
                                 d[py::str(mod.name)] = mod.params;
                               return d;
                             })
      .def(
          "source_shards",
          [](const PyManifest& self, const std::string& source) {
            py::list out;
            for (const ShardRef& r : self.m->ShardsOfSource(source)) {
              const ParamSpec& p = self.m->params()[r.param];
              py::dict d = ShardToPy(p.shards[r.shard]);
              d["param"] = p.name;
              d["dtype"] = std::string(DTypeName(p.dtype));
              out.append(d);
            }
            return out;
          },
          py::arg("source"))
      .def("__repr__", [](const PyManifest& self) {
        return "<wtx.Manifest " + std::to_string(self.m->params().size()) + " params, " +
               std::to_string(self.m->TotalBytes()) + " bytes, fingerprint " +
               self.m->Fingerprint().substr(0, 12) + ">";
      });

  py::class_<PyParticipant, std::shared_ptr<PyParticipant>>(m, "Participant")
      .def_static(
          "open", &OpenParticipant, py::arg("journal_dir"), py::arg("manifest"), py::kw_only(),
          py::arg("rank") = 0, py::arg("tensors") = py::none(), py::arg("kernel_identity") = "",
          py::arg("rollback_budget_bytes") = int64_t{1} << 30, py::arg("landing_hash_threads") = 0,
          py::arg("threads") = 0, py::arg("accept_unverified_journal") = false,
          py::arg("test_crash_at") = py::none(), py::arg("identity_checks") = true,
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
      .def("write_source", &WriteSource, py::arg("source"), py::arg("tensor"),
           "Writes every shard this rank holds of `source` from the full source tensor; "
           "returns the number of shards written (0: this rank holds none).")
      .def("write_source_from_file", &WriteSourceFromFile, py::arg("source"), py::arg("file"),
           py::arg("offset"),
           "write_source with the source read from `file` (an open file or a descriptor) at "
           "byte `offset`, in the live dtype, straight into the live tensors.")
      .def("patch", &Patch, py::arg("source"), py::arg("indices"), py::arg("values"), py::kw_only(),
           py::arg("part") = py::make_tuple(0, 1))
      .def(
          "refresh",
          [](PyParticipant& self, const std::string& name) {
            Participant& p = self.get();
            auto r = WithoutGil([&] { return p.Refresh(name); });
            return Unwrap(std::move(r));
          },
          py::arg("name") = "*")
      .def("status", [](PyParticipant& self) { return StatusToPy(self.get().status()); })
      .def("_reserve", &Reserve, py::arg("param") = py::none(), py::arg("shard") = py::none(),
           py::arg("box") = py::none(), py::arg("source") = py::none())
      .def("_landed", &Landed, py::arg("param") = py::none(), py::arg("shard") = py::none(),
           py::arg("box") = py::none(), py::arg("source") = py::none())
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
           [](PyParticipant& self, std::string id) { self.get().SetKernelIdentity(std::move(id)); })
      .def("describe",
           [](PyParticipant& self) {
             RankDescription d = self.get().Describe();
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

  // The shared decision log, read-side and the ranks' cooperative resolution.
  py::class_<DecisionLog, std::shared_ptr<DecisionLog>>(m, "DecisionLog")
      .def_static(
          "open",
          [](const std::string& url, double request_timeout) {
            return OpenPyDecisionLog(url, request_timeout);
          },
          py::arg("url"), py::kw_only(), py::arg("request_timeout") = 2.0,
          "Opens 'etcd://HOST:PORT[,HOST:PORT...]/PREFIX' (every member tried in turn).")
      .def(
          "read",
          [](DecisionLog& log, const std::string& tx) -> py::object {
            auto r = WithoutGil([&] { return log.Read(tx); });
            auto d = Unwrap(std::move(r));
            return d ? ToPy(LoggedDecisionToJson(*d)) : py::object(py::none());
          },
          py::arg("tx"), "The decision on tx as a dict, or None when none was written.")
      .def(
          "list",
          [](DecisionLog& log, bool unended_only) {
            auto r = WithoutGil([&] { return unended_only ? log.ListUnended() : log.List(); });
            py::list out;
            for (const LoggedDecision& d : Unwrap(std::move(r))) {
              out.append(ToPy(LoggedDecisionToJson(d)));
            }
            return out;
          },
          py::kw_only(), py::arg("unended_only") = false,
          "Every decision in the order written (unended_only: those some rank may still need).")
      .def(
          "current_leader",
          [](DecisionLog& log) -> py::object {
            auto r = WithoutGil([&] { return log.CurrentLeader(); });
            auto l = Unwrap(std::move(r));
            return l ? py::object(py::make_tuple(l->first, l->second)) : py::object(py::none());
          },
          "(epoch, holder) of the leading coordinator, or None when none leads.")
      .def(
          "resolve",
          [](DecisionLog& log, PyParticipant& p) -> py::object {
            Participant& part = p.get();
            auto r = WithoutGil([&] { return ResolveFromDecisionLog(part, log, p.rank); });
            auto d = Unwrap(std::move(r));
            return d ? ToPy(LoggedDecisionToJson(*d)) : py::object(py::none());
          },
          py::arg("participant"),
          "Resolves the transaction the participant holds without a coordinator: applies the "
          "logged decision, or aborts it when none exists and no coordinator leads (E_TX_ACTIVE "
          "while one leads). Returns the decision applied, or None with no transaction.")
      .def("__repr__", [](DecisionLog& log) { return "<wtx.DecisionLog " + log.Describe() + ">"; });

  py::class_<PyCoordinator, std::shared_ptr<PyCoordinator>>(m, "Coordinator")
      .def_static("open", &OpenInProc, py::arg("journal_dir"), py::kw_only(),
                  py::arg("participants"), py::arg("prepare_timeout") = 5.0,
                  py::arg("accept_unverified_journal") = false,
                  py::arg("test_crash_at") = py::none(), py::arg("decision_log") = py::none(),
                  py::arg("lease_ttl") = 2.0, py::arg("leader_wait") = 5.0,
                  "decision_log: 'etcd://HOST:PORT[,...]/PREFIX' to decide in etcd (the "
                  "coordinator takes the leadership of it first, waiting up to leader_wait s); "
                  "None: the embedded journal.")
      .def_static("open_carried", &OpenCarried, py::arg("journal_dir"), py::kw_only(),
                  py::arg("num_ranks"), py::arg("carrier"), py::arg("prepare_timeout") = 5.0,
                  py::arg("request_timeout") = 30.0, py::arg("accept_unverified_journal") = false,
                  py::arg("test_crash_at") = py::none(), py::arg("decision_log") = py::none(),
                  py::arg("lease_ttl") = 2.0, py::arg("leader_wait") = 5.0,
                  "A coordinator whose calls travel as encoded messages through "
                  "carrier(rank, request: bytes, timeout_s) -> reply bytes (wtx.torch_dist).")
      .def("begin", &Begin, py::arg("tx"), py::kw_only(), py::arg("kind") = "full",
           py::arg("base") = py::none(), py::arg("modules") = py::none(),
           py::arg("sources") = py::none(), py::arg("rollback") = false,
           py::arg("verify") = "touched")
      .def("commit", &Commit, py::arg("tx"), py::kw_only(), py::arg("expect_version") = py::none(),
           py::arg("expect_rank_digests") = py::none(),
           "Prepares everywhere and decides. With expect_version (wtx.expected_version), a "
           "commit whose combined version differs aborts with E_VERSION_MISMATCH.")
      .def("abort", &Abort, py::arg("tx"))
      .def("recover",
           [](PyCoordinator& self) {
             Coordinator& c = self.get();
             Check(WithoutGil([&] { return c.Recover(); }));
           })
      .def(
          "query_decision",
          [](PyCoordinator& self, const std::string& tx) {
            Coordinator& c = self.get();
            auto r = WithoutGil([&] { return c.QueryDecision(tx); });
            auto d = Unwrap(std::move(r));
            return py::make_tuple(std::string(DecisionName(d.first)), d.second);
          },
          py::arg("tx"))
      .def_property_readonly("epoch", [](PyCoordinator& self) { return self.get().epoch(); })
      .def_property_readonly("leads", [](PyCoordinator& self) { return self.get().leads(); })
      .def_property_readonly("decision_log",
                             [](PyCoordinator& self) { return self.get().decision_log(); })
      .def("committed_version",
           [](PyCoordinator& self, const std::string& tx) -> py::object {
             auto v = self.get().CommittedVersion(tx);
             return v ? py::object(py::str(*v)) : py::object(py::none());
           })
      .def("decisions",
           [](PyCoordinator& self) {
             py::list out;
             for (const DecisionEntry& e : self.get().decisions()) {
               py::dict d;
               d["tx"] = e.tx;
               d["decision"] = std::string(DecisionName(e.decision));
               d["version"] = e.version;
               d["reason"] = e.reason;
               out.append(d);
             }
             return out;
           })
      .def("close", [](PyCoordinator& self) {
        std::unique_ptr<Coordinator> c = std::move(self.c);
        py::gil_scoped_release nogil;
        c.reset();
      });

  m.def("expected_version", &ExpectedVersionOf, py::arg("manifests"), py::arg("sources"),
        "The version a full transaction writing exactly `sources` ({name: full tensor}) into "
        "ranks with these manifests must commit: {version, rank_digests}.");
  m.def("history", &History, py::arg("journal_dir"),
        "The journal's transactions, oldest first (dicts: tx, kind, base, outcome, version, "
        "reason, timings_us, ...).");
}

}  // namespace

}  // namespace wtx::python

PYBIND11_MODULE(_wtx, m) { wtx::python::DefineModule(m); }
