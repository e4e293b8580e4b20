// Shared helpers of the Python extension (module wtx._wtx): the wtx.Error exception, JSON to
// Python conversion, and the tensor protocol through which torch tensors (and buffer-protocol
// objects such as numpy arrays) are read without compiling against libtorch.
//
// Thread-safety: every function here touches Python objects and REQUIRES the GIL.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <pybind11/pybind11.h>
#include <nlohmann/json.hpp>

#include "wtx/box.h"
#include "wtx/dtype.h"
#include "wtx/status.h"

namespace wtx::python {

namespace py = pybind11;

// Creates the class wtx.Error(Exception) with .code (str), .message and .details (dict), and
// registers it as attribute "Error" of `m`.
void InitErrors(py::module_& m);
// Raises wtx.Error for `s` (REQUIRES: !s.ok()).
[[noreturn]] void Raise(const Status& s, py::dict details = py::dict());
inline void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}
template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

// An integer argument named `what`, checked against its range [min, max]: a Python int (not a
// bool), converted with an overflow check. Anything else (2**64, -1 for a count, 1.5, "3")
// raises wtx.Error INVALID_ARGUMENT "WHAT: expected an integer in [MIN, MAX], got REPR" (never
// pybind11's TypeError or OverflowError, never a wrapped value). Every integer argument of the
// module goes through it (docs/python.md).
int64_t IntArg(py::handle obj, const std::string& what, int64_t min, int64_t max);
// A duration argument in seconds: finite and in (0, max_seconds], else wtx.Error
// INVALID_ARGUMENT naming it and the range.
double SecondsArg(double seconds, const std::string& what, double max_seconds);

// JSON <-> Python values (through the json module: dict, list, str, int, float, bool, None).
py::object ToPy(const nlohmann::json& j);
nlohmann::json FromPy(py::handle obj);

// [[b0, e0], [b1, e1], ...] <-> Box. `what` names the argument in errors.
py::list BoxToPy(const Box& box);
Box BoxFromPy(py::handle obj, const std::string& what);

// What the tensor protocol tells about a tensor-like object.
struct TensorInfo {
  std::string device = "cpu";  // str(tensor.device): "cpu", "cuda:0"
  std::string dtype_name;      // "torch.bfloat16", or the buffer format
  std::optional<DType> dtype;  // nullopt: no wtx dtype (e.g. float64)
  bool is_int64 = false;       // int64 indices (no wtx live dtype)
  Shape shape;
  bool contiguous = true;
  uintptr_t ptr = 0;
  size_t bytes = 0;
};

// torch tensors through data_ptr / element_size / is_contiguous / device / shape / dtype; other
// objects through the buffer protocol. Anything else is E_BAD_WRITE naming `what`.
TensorInfo InspectTensor(py::handle obj, const std::string& what);

// E_BAD_WRITE naming `what` unless `t` is a contiguous host tensor (or, with allow_cuda, a
// CUDA tensor) of `dtype` whose shape is `shape` (leading extent-1 dimensions ignored).
void CheckTensor(const TensorInfo& t, DType dtype, const Shape& shape, const std::string& what,
                 bool allow_cuda);
inline void CheckHostTensor(const TensorInfo& t, DType dtype, const Shape& shape,
                            const std::string& what) {
  CheckTensor(t, dtype, shape, what, /*allow_cuda=*/false);
}

}  // namespace wtx::python
