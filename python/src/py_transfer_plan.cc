// wtx.TransferPlan, wtx.plan_transfer and wtx.piece_digest: M-to-N updates (docs/m2n.md).
#include "wtx/piece_digest.h"
#include "wtx/transfer_plan.h"

#include "py_binding.h"

namespace wtx::python {

namespace {

struct PyTransferPlan {
  std::shared_ptr<const TransferPlan> plan;
};

// trainer: a one-line spec, or one {source: [box, ...]} mapping per trainer rank.
std::unique_ptr<TrainerSharding> TrainerFromPy(py::handle trainer, py::handle hf_config) {
  if (py::isinstance<py::str>(trainer)) {
    const std::string spec = py::str(trainer);
    std::optional<nlohmann::json> config;
    if (!hf_config.is_none()) {
      if (py::isinstance<py::dict>(hf_config)) {
        config = FromPy(hf_config);
      } else {
        py::object f = py::module_::import("builtins").attr("open")(HfConfigPath(hf_config));
        config = FromPy(py::module_::import("json").attr("load")(f));
        f.attr("close")();
      }
    }
    return Unwrap(ParseTrainerSpec(spec, config ? &*config : nullptr));
  }
  if (!py::isinstance<py::sequence>(trainer)) {
    Raise(Status::InvalidArgument(
        "trainer: expected a spec ('fsdp:K', 'tp:K', 'ep:E', 'tp:T,ep:E') or one "
        "{source: [box, ...]} mapping per trainer rank"));
  }
  std::vector<std::map<std::string, std::vector<Box>, std::less<>>> holdings;
  py::sequence ranks = py::reinterpret_borrow<py::sequence>(trainer);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string where = "trainer[" + std::to_string(r) + "]";
    if (!py::isinstance<py::dict>(ranks[r])) {
      Raise(Status::InvalidArgument(where + ": expected {source: [box, ...]}"));
    }
    auto& held = holdings.emplace_back();
    for (auto item : py::reinterpret_borrow<py::dict>(ranks[r])) {
      const std::string source = py::str(item.first);
      if (!py::isinstance<py::sequence>(item.second)) {
        Raise(Status::InvalidArgument(where + "['" + source + "']: expected a list of boxes"));
      }
      py::sequence boxes = py::reinterpret_borrow<py::sequence>(item.second);
      for (size_t i = 0; i < boxes.size(); ++i) {
        held[source].push_back(
            BoxFromPy(boxes[i], where + "['" + source + "'][" + std::to_string(i) + "]"));
      }
    }
  }
  return Unwrap(ExplicitSharding(std::move(holdings)));
}

PyTransferPlan PlanTransferPy(const std::vector<PyManifest>& engine, py::object trainer,
                              py::object hf_config) {
  std::vector<ManifestPtr> ms;
  for (const PyManifest& m : engine) ms.push_back(m.m);
  std::unique_ptr<TrainerSharding> t = TrainerFromPy(trainer, hf_config);
  auto plan = WithoutGil([&] { return PlanTransfer(*t, ms); });
  return {std::make_shared<const TransferPlan>(Unwrap(std::move(plan)))};
}

py::list Pieces(const PyTransferPlan& self, std::optional<int> trainer, std::optional<int> engine) {
  const TransferPlan& p = *self.plan;
  py::list out;
  for (size_t i = 0; i < p.pieces.size(); ++i) {
    const PlannedPiece& pp = p.pieces[i];
    if ((trainer && pp.trainer != *trainer) || (engine && pp.engine != *engine)) continue;
    out.append(
        py::make_tuple(pp.trainer, pp.engine, p.sources[pp.source].name, BoxToPy(p.BoxOf(i))));
  }
  return out;
}

std::string PieceDigestPy(py::object tensor) {
  TensorInfo t = InspectTensor(tensor, "piece_digest");
  if (t.device != "cpu" || !t.contiguous) {
    Raise(Status(ErrorCode::kBadWrite, "piece_digest: expected a contiguous cpu tensor"));
  }
  const auto* data = reinterpret_cast<const void*>(t.ptr);
  return WithoutGil([&] { return PieceDigest(data, t.bytes); });
}

}  // namespace

void DefineTransferPlan(py::module_& m) {
  py::class_<PyTransferPlan>(
      m, "TransferPlan",
      R"(Which trainer rank sends which piece of each source tensor to which engine rank
(docs/m2n.md): every element each engine rank needs, exactly once. Build one with
wtx.plan_transfer or TransferPlan.from_json; immutable.)")
      .def_static(
          "from_json",
          [](const std::string& text) {
            nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
            if (j.is_discarded()) Raise(Status::InvalidArgument("transfer plan: not JSON"));
            return PyTransferPlan{std::make_shared<const TransferPlan>(Unwrap(PlanFromJson(j)))};
          },
          py::arg("text"),
          "Reads a plan written by to_json or `wtx plan --json`; wtx.Error naming the field "
          "otherwise.")
      .def(
          "to_json", [](const PyTransferPlan& self) { return self.plan->ToJsonText(); },
          "The plan as JSON text (docs/m2n.md, 'Plan format').")
      .def_property_readonly("trainer_spec",
                             [](const PyTransferPlan& self) { return self.plan->trainer_spec; })
      .def_property_readonly("trainer_ranks",
                             [](const PyTransferPlan& self) { return self.plan->trainer_ranks; })
      .def_property_readonly("engine_ranks",
                             [](const PyTransferPlan& self) { return self.plan->engine_ranks; })
      .def_property_readonly("total_bytes",
                             [](const PyTransferPlan& self) { return self.plan->TotalBytes(); })
      .def_property_readonly(
          "bytes_per_trainer",
          [](const PyTransferPlan& self) { return self.plan->BytesPerTrainer(); })
      .def_property_readonly("bytes_per_engine",
                             [](const PyTransferPlan& self) { return self.plan->BytesPerEngine(); })
      .def_property_readonly("sources",
                             [](const PyTransferPlan& self) {
                               py::dict d;
                               for (const PlannedSource& s : self.plan->sources) {
                                 py::dict e;
                                 e["shape"] = s.shape;
                                 e["dtype"] = std::string(DTypeName(s.dtype));
                                 d[py::str(s.name)] = e;
                               }
                               return d;
                             })
      .def("pieces", &Pieces, py::kw_only(), py::arg("trainer") = py::none(),
           py::arg("engine") = py::none(),
           "The pieces as (trainer rank, engine rank, source, box) tuples, box as [[lo, hi], "
           "...] in source coordinates; only those of `trainer` / `engine` when given.")
      .def(
          "check_engine",
          [](const PyTransferPlan& self, int rank, const PyManifest& manifest) {
            Check(CheckPlanForEngine(*self.plan, rank, *manifest.m));
          },
          py::arg("rank"), py::arg("manifest"),
          "Raises wtx.Error unless `manifest` is the one engine rank `rank` of the plan was "
          "made for (fingerprint and layout).")
      .def("__len__", [](const PyTransferPlan& self) { return self.plan->pieces.size(); });
  m.def("plan_transfer", &PlanTransferPy, py::arg("engine"), py::arg("trainer"), py::kw_only(),
        py::arg("hf_config") = py::none(),
        R"(Plans an M-to-N update (docs/m2n.md).

engine: every engine rank's wtx.Manifest, in rank order.
trainer: 'fsdp:K', 'tp:K', 'ep:E' or 'tp:T,ep:E' (tp/ep need hf_config: a config.json path,
its folder, or the parsed dict), or one {source: [box, ...]} mapping per trainer rank.
Returns a wtx.TransferPlan. Raises wtx.Error (INVALID_ARGUMENT) naming the spec, source, box
and rank when a needed element is held by no trainer rank or a box does not fit its source.)");
  m.def("piece_digest", &PieceDigestPy, py::arg("piece"),
        R"(The digest of one piece (docs/m2n.md): XXH3-128 over the bytes of `piece`, a contiguous
cpu tensor of the piece's elements in row-major order of its box, in the live dtype; 32 hex
digits.)");
}

}  // namespace wtx::python
