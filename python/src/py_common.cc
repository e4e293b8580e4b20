#include "py_common.h"

#include <algorithm>
#include <cmath>

#include <pybind11/eval.h>

namespace wtx::python {

namespace {

py::object& ErrorType() {
  static py::object* type = nullptr;  // leaked on purpose: lives as long as the interpreter
  if (!type) type = new py::object();
  return *type;
}

Shape DropLeadingOnes(const Shape& s) {
  size_t i = 0;
  while (i + 1 < s.size() && s[i] == 1) ++i;
  return Shape(s.begin() + static_cast<ptrdiff_t>(i), s.end());
}

std::optional<DType> TorchDType(const std::string& name, bool* is_int64) {
  *is_int64 = name == "torch.int64";
  if (name == "torch.float32") return DType::kF32;
  if (name == "torch.bfloat16") return DType::kBF16;
  if (name == "torch.float16") return DType::kF16;
  if (name == "torch.float8_e4m3fn") return DType::kFP8E4M3;
  if (name == "torch.int8") return DType::kI8;
  if (name == "torch.uint8") return DType::kU8;
  if (name == "torch.int32") return DType::kI32;
  return std::nullopt;
}

std::optional<DType> BufferDType(const py::buffer_info& info, bool* is_int64) {
  std::string f = info.format;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f = f.substr(1);
  *is_int64 = (f == "l" || f == "q") && info.itemsize == 8;
  if (f == "f" && info.itemsize == 4) return DType::kF32;
  if (f == "e" && info.itemsize == 2) return DType::kF16;
  if (f == "b" && info.itemsize == 1) return DType::kI8;
  if (f == "B" && info.itemsize == 1) return DType::kU8;
  if ((f == "i" || f == "l") && info.itemsize == 4) return DType::kI32;
  return std::nullopt;
}

std::string DTypeLabel(DType d) { return std::string(DTypeName(d)); }

}  // namespace

void InitErrors(py::module_& m) {
  py::dict scope;
  scope["__builtins__"] = py::module_::import("builtins");
  scope["__name__"] = "wtx";
  py::exec(R"(
class Error(Exception):
    """A refused wtx call: .code is the error code ("E_BAD_WRITE", "E_DUPLICATE_WRITE",
    "INVALID_ARGUMENT", ...), .message the explanation naming what was wrong, .details a dict
    with structured context (e.g. missing pieces, per-rank errors)."""

    def __init__(self, code, message, details=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details if details is not None else {}


class Aborted(Error):
    """A transaction ended without committing, raised by the high-level calls
    (torch_dist.Group.commit, the vLLM extension's finish_weight_update, ...): .decision is the
    outcome dict ({"outcome", "version", "error", "votes", ...}), .votes its per-rank votes,
    .missing every missing {param, shard, box, rank} the votes name. The low-level
    Coordinator.commit returns that dict instead of raising."""

    def __init__(self, tx, decision):
        votes = decision.get("votes", [])
        missing = [dict(m, rank=v["rank"]) for v in votes for m in v.get("missing", [])]
        reasons = [f"rank {v['rank']}: {v.get('error')}: {v.get('message')}"
                   for v in votes if v.get("vote") not in ("yes", "noop")]
        err = decision.get("error") or {}
        code = err.get("code") or "E_VOTE_NO"
        why = err.get("message") or "aborted"
        # The first missing pieces by name (the message is all some callers keep: vLLM's
        # HTTP error, a log line); every one is in .missing.
        named = [f"rank {m['rank']} {m.get('param')}[{m.get('shard')}] {m.get('box')}"
                 + (f' (source {m["source"]})' if m.get('source') else '')
                 for m in missing[:4]]
        if len(missing) > 4:
            named.append(f"and {len(missing) - 4} more")
        super().__init__(code, f"transaction '{tx}' {decision.get('outcome', 'aborted')}: {why}"
                         + ("; " + "; ".join(reasons) if reasons else "")
                         + ("; missing: " + ", ".join(named) if named else ""),
                         {"decision": decision})
        self.tx = tx
        self.decision = decision
        self.votes = votes
        self.missing = missing
)",
           scope);
  ErrorType() = scope["Error"];
  m.attr("Error") = ErrorType();
  m.attr("Aborted") = scope["Aborted"];
}

void Raise(const Status& s, py::dict details) {
  py::object e = ErrorType()(std::string(s.code_name()), s.message(), details);
  PyErr_SetObject(ErrorType().ptr(), e.ptr());
  throw py::error_already_set();
}

py::object ToPy(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

nlohmann::json FromPy(py::handle obj) {
  const std::string text = py::str(py::module_::import("json").attr("dumps")(obj));
  return nlohmann::json::parse(text);
}

py::list BoxToPy(const Box& box) {
  py::list out;
  for (const Range& r : box) out.append(py::make_tuple(r.begin, r.end));
  return out;
}

int64_t IntArg(py::handle obj, const std::string& what, int64_t min, int64_t max) {
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  auto refuse = [&]() {
    Raise(Status::InvalidArgument(what + ": expected an integer in " + range + ", got " +
                                  py::repr(obj).cast<std::string>()));
  };
  if (!PyLong_Check(obj.ptr()) || PyBool_Check(obj.ptr())) refuse();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    refuse();
  }
  if (overflow != 0 || v < min || v > max) refuse();
  return static_cast<int64_t>(v);
}

double SecondsArg(double seconds, const std::string& what, double max_seconds) {
  if (!std::isfinite(seconds) || seconds <= 0 || seconds > max_seconds) {
    Raise(Status::InvalidArgument(what + ": expected seconds in (0, " +
                                  std::to_string(static_cast<int64_t>(max_seconds)) + "], got " +
                                  std::to_string(seconds)));
  }
  return seconds;
}

Box BoxFromPy(py::handle obj, const std::string& what) {
  auto refuse = [&]() {
    Raise(Status::InvalidArgument(what + ": expected a box [[begin, end], ...]"));
  };
  if (!PySequence_Check(obj.ptr()) || py::isinstance<py::str>(obj)) refuse();
  Box box;
  for (py::handle r : py::reinterpret_borrow<py::sequence>(obj)) {
    if (!PySequence_Check(r.ptr()) || py::isinstance<py::str>(r)) refuse();
    py::sequence seq = py::reinterpret_borrow<py::sequence>(r);
    if (seq.size() != 2) refuse();
    const std::string at = what + "[" + std::to_string(box.size()) + "]";
    box.push_back(Range{IntArg(seq[0], at + "[0]", INT64_MIN, INT64_MAX),
                        IntArg(seq[1], at + "[1]", INT64_MIN, INT64_MAX)});
  }
  return box;
}

TensorInfo InspectTensor(py::handle obj, const std::string& what) {
  TensorInfo t;
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_contiguous")) {
    try {
      t.dtype_name = py::str(obj.attr("dtype"));
      t.dtype = TorchDType(t.dtype_name, &t.is_int64);
      t.device = py::str(obj.attr("device"));
      for (py::handle d : obj.attr("shape")) t.shape.push_back(d.cast<int64_t>());
      t.contiguous = obj.attr("is_contiguous")().cast<bool>();
      t.ptr = obj.attr("data_ptr")().cast<uintptr_t>();
      t.bytes =
          static_cast<size_t>(NumElements(t.shape)) * obj.attr("element_size")().cast<size_t>();
    } catch (const py::error_already_set& e) {
      Raise(Status(ErrorCode::kBadWrite, what + ": not a readable tensor: " + e.what()));
    }
    return t;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    Raise(Status(ErrorCode::kBadWrite,
                 what + ": expected a torch tensor or a buffer (numpy array), got " +
                     std::string(py::str(py::type::of(obj)))));
  }
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
  t.dtype_name = info.format;
  t.dtype = BufferDType(info, &t.is_int64);
  for (auto d : info.shape) t.shape.push_back(d);
  int64_t expect = info.itemsize;
  for (size_t i = info.shape.size(); i-- > 0;) {
    if (info.shape[i] != 1 && info.strides[i] != expect) t.contiguous = false;
    expect *= info.shape[i];
  }
  t.ptr = reinterpret_cast<uintptr_t>(info.ptr);
  t.bytes = static_cast<size_t>(info.size * info.itemsize);
  return t;
}

void CheckTensor(const TensorInfo& t, DType dtype, const Shape& shape, const std::string& what,
                 bool allow_cuda) {
  if (t.device != "cpu" && !(allow_cuda && t.device.rfind("cuda", 0) == 0)) {
    Raise(Status(ErrorCode::kBadWrite,
                 what + " is on " + t.device +
                     "; this wtx build reads host (cpu) tensors only (copy it with .cpu())"));
  }
  if (!t.dtype || *t.dtype != dtype) {
    Raise(Status(ErrorCode::kBadWrite,
                 what + " has dtype " + t.dtype_name + ", expected " + DTypeLabel(dtype)));
  }
  if (DropLeadingOnes(t.shape) != DropLeadingOnes(shape)) {
    Raise(Status(ErrorCode::kBadWrite, what + " has shape " + ShapeToString(t.shape) +
                                           ", expected " + ShapeToString(shape)));
  }
  if (!t.contiguous) {
    Raise(
        Status(ErrorCode::kBadWrite, what + " is not contiguous (call .contiguous() on it first)"));
  }
}

}  // namespace wtx::python
