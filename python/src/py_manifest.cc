// wtx.Manifest, wtx.expected_version and wtx.history (docs/python.md).
#include "py_binding.h"

namespace wtx::python {

using nlohmann::json;

std::string HfConfigPath(py::handle config) {
  std::string path = py::str(py::module_::import("os").attr("fspath")(config));
  if (py::module_::import("os.path").attr("isdir")(path).cast<bool>()) path += "/config.json";
  return path;
}

namespace {

// ---------------------------------------------------------------------------------- Manifest

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
    if (p.served) {
      py::dict served;
      served["dtype"] = std::string(DTypeName(p.served->dtype));
      served["shape"] = p.served->shape;
      d["served"] = served;
    }
    py::list shards;
    for (const ShardSpec& s : p.shards) shards.append(ShardToPy(s));
    d["shards"] = shards;
    out.append(d);
  }
  return out;
}

PyManifest FromHfConfig(py::object config, py::object tp, py::object rank,
                        std::optional<std::string> dtype, py::object ep) {
  HfManifestOptions o;
  o.tp = static_cast<int>(IntArg(tp, "tp", 1, kMaxRanks));
  o.rank = static_cast<int>(IntArg(rank, "rank", 0, kMaxRanks - 1));
  o.ep = static_cast<int>(IntArg(ep, "ep", 1, kMaxRanks));
  if (dtype) {
    auto d = DTypeFromName(*dtype);
    if (!d) Raise(Status::InvalidArgument("dtype: unknown '" + *dtype + "'"));
    o.dtype = *d;
  }
  if (py::isinstance<py::dict>(config)) return {Unwrap(ManifestFromHfConfig(FromPy(config), o))};
  return {Unwrap(ManifestFromHfConfigFile(HfConfigPath(config), o))};
}

// -------------------------------------------------------------------------- Expected version

// `tensor` as the source `name` of these ranks: converted to the live dtype of the first rank
// that holds it; `keep` holds the converted tensor alive while its bytes are read.
SourceTensor ToSourceTensor(const std::vector<const Manifest*>& ms, const std::string& name,
                            py::object tensor, py::object* keep) {
  for (const Manifest* m : ms) {
    const auto& refs = m->ShardsOfSource(name);
    if (refs.empty()) continue;
    tensor = AsLiveSource(tensor, m->params()[refs[0].param].dtype, "source tensor '" + name + "'");
    break;
  }
  *keep = tensor;
  TensorInfo t = InspectTensor(tensor, "source tensor '" + name + "'");
  if (t.device != "cpu" || !t.contiguous || !t.dtype) {
    Raise(Status(ErrorCode::kBadWrite,
                 "source tensor '" + name + "' must be a contiguous cpu tensor of a wtx dtype"));
  }
  return SourceTensor{name, t.shape, *t.dtype, reinterpret_cast<const void*>(t.ptr), t.bytes};
}

std::vector<const Manifest*> Raw(const std::vector<PyManifest>& manifests) {
  std::vector<const Manifest*> ms;
  for (const PyManifest& m : manifests) ms.push_back(m.m.get());
  return ms;
}

py::dict ExpectedVersionToPy(const ExpectedVersion& ev) {
  py::dict d;
  d["version"] = ev.version;
  d["rank_digests"] = ev.rank_digests;
  return d;
}

// What a full transaction writing exactly `sources` ({name: full tensor}) must commit.
py::dict ExpectedVersionOf(const std::vector<PyManifest>& manifests, py::dict sources) {
  std::vector<const Manifest*> ms = Raw(manifests);
  std::vector<SourceTensor> st;
  std::vector<py::object> keep(sources.size());  // converted sources, alive for the computation
  for (auto item : sources) {
    st.push_back(ToSourceTensor(ms, py::str(item.first),
                                py::reinterpret_borrow<py::object>(item.second), &keep[st.size()]));
  }
  auto r = WithoutGil([&] { return ComputeExpectedVersion(ms, st); });
  return ExpectedVersionToPy(Unwrap(std::move(r)));
}

// wtx.ExpectedVersionBuilder: the same version, one source at a time as the sender sends.
class PyExpectedVersionBuilder {
 public:
  explicit PyExpectedVersionBuilder(std::vector<PyManifest> manifests)
      : manifests_(std::move(manifests)),
        builder_(Unwrap(ExpectedVersionBuilder::Create(Raw(manifests_)))) {}

  size_t Add(const std::string& name, py::object tensor) {
    py::object keep;
    SourceTensor t = ToSourceTensor(Raw(manifests_), name, std::move(tensor), &keep);
    auto r = WithoutGil([&]() -> Result<size_t> {
      std::lock_guard<std::mutex> l(mu_);
      if (finished_) return Status::InvalidArgument("add('" + name + "'): already finished");
      return builder_->Add(t);
    });
    return Unwrap(std::move(r));
  }

  py::dict Finish() {
    auto r = WithoutGil([&]() -> Result<ExpectedVersion> {
      std::lock_guard<std::mutex> l(mu_);
      if (finished_) return Status::InvalidArgument("finish: already finished");
      finished_ = true;
      return builder_->Finish();
    });
    return ExpectedVersionToPy(Unwrap(std::move(r)));
  }

  size_t sources_added() {
    std::lock_guard<std::mutex> l(mu_);
    return builder_->sources_added();
  }

 private:
  std::vector<PyManifest> manifests_;                // alive as long as the builder reads them
  std::mutex mu_;                                    // add() runs without the GIL
  std::unique_ptr<ExpectedVersionBuilder> builder_;  // guarded by mu_
  bool finished_ = false;                            // guarded by mu_
};

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

}  // namespace

void DefineManifest(py::module_& m) {
  py::class_<PyManifest>(
      m, "Manifest",
      R"(A rank's manifest: its parameters (name, dtype, shape, shards with their source
boxes), modules and derived states, and its fingerprint. Build one with from_hf_config or
from_json; immutable.)")
      .def_static("from_hf_config", &FromHfConfig, py::arg("config"), py::kw_only(),
                  py::arg("tp") = 1, py::arg("rank") = 0, py::arg("dtype") = py::none(),
                  py::arg("ep") = 1,
                  "Rank `rank` of a vLLM group laid out from a Hugging Face config.json (a path, "
                  "its folder, or the parsed dict): tensor-parallel degree `tp`; with ep > 1, "
                  "expert parallelism over ep ranks (vLLM's --enable-expert-parallel, ep = dp x "
                  "tp); dtype 'bf16'/'f16'/'f32' overrides the config's (docs/manifest.md).")
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

  m.def("expected_version", &ExpectedVersionOf, py::arg("manifests"), py::arg("sources"),
        "The version a full transaction writing exactly `sources` ({name: full tensor}) into "
        "ranks with these manifests must commit: {version, rank_digests}.");
  py::class_<PyExpectedVersionBuilder>(
      m, "ExpectedVersionBuilder",
      "The version a full transaction must commit (what wtx.expected_version returns), computed "
      "one source at a time as the sender sends: add(name, tensor) hashes each piece once, where "
      "it lands in every rank's parameters; finish() returns {version, rank_digests}. A sender "
      "calls add() for each tensor right after it goes out (overlapped with the next send), "
      "then finish(). Errors (wtx.Error): a source given twice, a wrong shape or dtype, a "
      "source missing at finish; a source no rank holds is ignored (add returns 0).")
      .def(py::init<std::vector<PyManifest>>(), py::arg("manifests"))
      .def("add", &PyExpectedVersionBuilder::Add, py::arg("name"), py::arg("tensor"),
           "Hashes `tensor` (a contiguous cpu tensor) as the source `name`; returns the number "
           "of shards it feeds (0: no rank holds it). Releases the GIL while hashing.")
      .def("finish", &PyExpectedVersionBuilder::Finish,
           "{version, rank_digests} once every source has come (wtx.Error NOT_FOUND naming the "
           "first missing one). Once.")
      .def_property_readonly("sources_added", &PyExpectedVersionBuilder::sources_added,
                             "Sources taken so far.");
  m.def("history", &History, py::arg("journal_dir"),
        "The journal's transactions, oldest first (dicts: tx, kind, base, outcome, version, "
        "reason, timings_us, ...).");
}

}  // namespace wtx::python
