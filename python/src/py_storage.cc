#include "py_storage.h"

#include <array>
#include <map>
#include <optional>

#include "py_common.h"
#include "src/util/xxh3.h"

namespace wtx::python {

namespace {

int64_t Int(py::handle h) { return h.cast<int64_t>(); }

size_t RawUseCount(uintptr_t impl) {
  // The intrusive reference count that follows the StorageImpl's vtable pointer.
  return *reinterpret_cast<const size_t*>(impl + sizeof(void*));  // NOLINT
}

}  // namespace

// Everything the resolver needs from torch, looked up once with the GIL held by the thread that
// opens the participant (never lazily: a function-local static initialized while another thread
// waits for the GIL would deadlock).
PyStorageResolver::Torch::Torch()
    : n_data_ptr("data_ptr"),
      n_dtype("dtype"),
      n_shape("shape"),
      n_stride("stride"),
      n_modules("_modules"),
      n_parameters("_parameters"),
      n_buffers("_buffers") {
  for (py::str* n :
       {&n_data_ptr, &n_dtype, &n_shape, &n_stride, &n_modules, &n_parameters, &n_buffers}) {
    PyObject* p = n->release().ptr();
    PyUnicode_InternInPlace(&p);
    *n = py::reinterpret_steal<py::str>(p);
  }
  py::object torch = py::module_::import("torch");
  module_type = torch.attr("nn").attr("Module");
  param_type = torch.attr("nn").attr("Parameter");
  untyped = py::hasattr(torch.attr("Tensor"), "untyped_storage");
  py::object c = torch.attr("_C");
  if (py::hasattr(c, "_storage_Use_Count")) {
    use_count = c.attr("_storage_Use_Count");
    countable = true;
    return;
  }
  // torch 1.13: the raw count, used only when a probe shows it counts exactly one per tensor
  // and per storage object.
  py::object x = torch.attr("empty")(1);
  py::object s = StorageOf(x);
  const auto impl = s.attr("_cdata").cast<uintptr_t>();
  const size_t alone = RawUseCount(impl);
  py::object y = x.attr("view")(1);
  const size_t with_view = RawUseCount(impl);
  y = py::none();
  countable = alone == 2 && with_view == 3 && RawUseCount(impl) == 2;
}

py::object PyStorageResolver::Torch::StorageOf(py::handle t) const {
  return untyped ? t.attr("untyped_storage")() : t.attr("_storage")();
}

std::optional<int64_t> PyStorageResolver::Torch::UseCount(py::handle storage) const {
  if (!countable) return std::nullopt;
  const auto cdata = storage.attr("_cdata").cast<uintptr_t>();
  if (!use_count.is_none()) return use_count(cdata).cast<int64_t>();
  return static_cast<int64_t>(RawUseCount(cdata));
}

bool PyStorageResolver::LastReferenceDetectable() const { return torch_.countable; }

PyStorageResolver::PyStorageResolver(const Manifest& manifest, py::handle tensors) {
  const py::object& module_type = torch_.module_type;
  const py::object& param_type = torch_.param_type;
  const auto& params = manifest.params();
  bound_.resize(params.size());
  if (py::isinstance(tensors, module_type)) {
    kind_ = Kind::kModule;
    root_ = py::reinterpret_borrow<py::object>(tensors);
    std::map<std::string, int> node_of = {{"", 0}};
    nodes_.push_back(Node{-1, py::str("")});
    for (uint32_t i = 0; i < params.size(); ++i) {
      const std::string& name = params[i].name;
      int node = 0;
      size_t begin = 0;
      for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', begin)) {
        const std::string prefix = name.substr(0, dot);
        auto [it, fresh] = node_of.emplace(prefix, static_cast<int>(nodes_.size()));
        if (fresh) nodes_.push_back(Node{node, py::str(name.substr(begin, dot - begin))});
        node = it->second;
        begin = dot + 1;
      }
      bound_[i].owner = node;
      bound_[i].leaf = py::str(name.substr(begin));
      if (Lookup(i).is_none()) {
        Raise(Status(ErrorCode::kBadWrite,
                     "tensors: the module has no parameter or buffer '" + params[i].name + "'"));
      }
    }
  } else {
    if (!py::isinstance<py::dict>(tensors) && !py::hasattr(tensors, "items")) {
      Raise(Status::InvalidArgument(
          "tensors: expected a torch.nn.Module or a mapping of name to Parameter or tensor"));
    }
    py::dict d;
    for (py::handle item : tensors.attr("items")()) {
      py::tuple kv = py::reinterpret_borrow<py::tuple>(item);
      const std::string name = py::str(kv[0]);
      if (!manifest.FindParam(name)) {
        Raise(Status(ErrorCode::kUnknownParam,
                     "tensors: '" + name + "' is not a parameter of the manifest"));
      }
      d[kv[0]] = kv[1];
    }
    bool any_param = false;
    bool any_tensor = false;
    for (uint32_t i = 0; i < params.size(); ++i) {
      if (!d.contains(params[i].name)) {
        Raise(Status(ErrorCode::kBadWrite,
                     "tensors: no tensor for parameter '" + params[i].name +
                         "' (pass one tensor per manifest parameter, or none)"));
      }
      bound_[i].given = d[py::str(params[i].name)];
      (py::isinstance(bound_[i].given, param_type) ? any_param : any_tensor) = true;
    }
    // A Parameter is followed through its .data; a mix is treated per entry below, the kind
    // names the majority in messages only.
    kind_ = any_param && !any_tensor ? Kind::kParameter : Kind::kTensor;
  }
  for (uint32_t i = 0; i < params.size(); ++i) Pin(i);
}

PyStorageResolver::~PyStorageResolver() {
  // The participant may be destroyed without the GIL (close releases it): Python references
  // are dropped with it held.
  py::gil_scoped_acquire gil;
  bound_.clear();
  nodes_.clear();
  root_ = py::object();
  torch_ = Torch::Released();
}

const char* PyStorageResolver::kind_name() const {
  switch (kind_) {
    case Kind::kModule:
      return "module attribute";
    case Kind::kParameter:
      return "Parameter";
    case Kind::kTensor:
      return "tensor";
  }
  return "tensor";
}

namespace {

// A new reference from a CPython call, or the Python error raised as py::error_already_set.
py::object Owned(PyObject* p) {
  if (p == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(p);
}

// d[key] (a borrowed reference), or nullptr when `d` is not a dict or has no such key.
PyObject* DictItem(PyObject* d, PyObject* key) {
  if (d == nullptr || !PyDict_Check(d)) return nullptr;
  PyObject* v = PyDict_GetItemWithError(d, key);
  if (v == nullptr) PyErr_Clear();
  return v;
}

}  // namespace

py::object PyStorageResolver::NodeObject(int node, Walk* walk) const {
  if (node == 0) return root_;
  if (walk != nullptr && walk->done[node]) return walk->module[node];
  py::object parent = NodeObject(nodes_[node].parent, walk);
  py::object child = py::none();
  if (!parent.is_none()) {
    // Module attributes live in the instance __dict__: read straight from it, as
    // nn.Module.__getattr__ would find them.
    py::object dict = Owned(PyObject_GenericGetDict(parent.ptr(), nullptr));
    if (PyObject* c =
            DictItem(DictItem(dict.ptr(), torch_.n_modules.ptr()), nodes_[node].name.ptr())) {
      child = py::reinterpret_borrow<py::object>(c);
    }
  }
  if (walk != nullptr) {
    walk->done[node] = true;
    walk->module[node] = child;
  }
  return child;
}

py::object PyStorageResolver::Lookup(uint32_t index, Walk* walk) const {
  const Bound& b = bound_[index];
  if (kind_ != Kind::kModule) return b.given;
  py::object owner = NodeObject(b.owner, walk);
  if (owner.is_none()) return owner;
  py::object dict = Owned(PyObject_GenericGetDict(owner.ptr(), nullptr));
  PyObject* leaf = b.leaf.ptr();
  for (PyObject* table : {torch_.n_parameters.ptr(), torch_.n_buffers.ptr()}) {
    if (PyObject* v = DictItem(DictItem(dict.ptr(), table), leaf)) {
      return py::reinterpret_borrow<py::object>(v);
    }
  }
  if (PyObject* v = DictItem(dict.ptr(), leaf)) return py::reinterpret_borrow<py::object>(v);
  return py::none();
}

uint64_t PyStorageResolver::DataPtr(py::handle t) const {
  py::object ptr = Owned(PyObject_CallMethodNoArgs(t.ptr(), torch_.n_data_ptr.ptr()));
  const uint64_t v = PyLong_AsUnsignedLongLongMask(ptr.ptr());
  if (PyErr_Occurred()) throw py::error_already_set();
  return v;
}

uint64_t PyStorageResolver::FastKey(py::handle t, uint64_t* address) const {
  // Where the bytes start, and how they are read: any rebinding changes one of them while the
  // bound storage is pinned (its address cannot be handed to another tensor meanwhile); a
  // resize or a free of the bound storage itself moves or zeroes the address. (A tensor moved
  // to another device has another address: the device is not read here.)
  std::array<int64_t, 40> key{};
  size_t n = 0;
  *address = DataPtr(t);
  key[n++] = static_cast<int64_t>(*address);
  py::object dtype = Owned(PyObject_GetAttr(t.ptr(), torch_.n_dtype.ptr()));
  key[n++] = reinterpret_cast<int64_t>(dtype.ptr());  // dtypes are singletons
  py::object shape = Owned(PyObject_GetAttr(t.ptr(), torch_.n_shape.ptr()));
  py::object stride = Owned(PyObject_CallMethodNoArgs(t.ptr(), torch_.n_stride.ptr()));
  for (PyObject* seq : {shape.ptr(), stride.ptr()}) {
    if (!PyTuple_Check(seq)) throw std::runtime_error("shape or stride is not a tuple");
    const Py_ssize_t len = PyTuple_GET_SIZE(seq);
    key[n++] = len;
    for (Py_ssize_t i = 0; i < len && n < key.size(); ++i) {
      key[n++] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
    }
  }
  if (PyErr_Occurred()) throw py::error_already_set();
  return Xxh3_64(key.data(), n * sizeof(int64_t));
}

py::object PyStorageResolver::Current(uint32_t index) const {
  py::object t = Lookup(index);
  if (t.is_none()) return t;
  return py::isinstance(t, torch_.param_type) ? t.attr("detach")() : t;
}

void PyStorageResolver::Pin(uint32_t index) {
  // A bare tensor keeps its own storage alive (and an alias would hide that the engine dropped
  // it); a module attribute or a Parameter may be rebound, so the bound storage is held here.
  Bound& b = bound_[index];
  const bool bare = kind_ != Kind::kModule && !py::isinstance(b.given, torch_.param_type);
  py::object t = Lookup(index);
  b.pin = bare || t.is_none() || !py::hasattr(t, "detach") ? py::none() : t.attr("detach")();
  b.pin_address = b.pin.is_none() ? 0 : DataPtr(b.pin);
}

ParamStorage PyStorageResolver::Describe(uint32_t index, py::handle t) {
  ParamStorage s;
  if (t.is_none()) {
    s.released = "no longer an attribute of the module";
    return s;
  }
  if (!py::hasattr(t, "data_ptr")) {
    s.released = "not a tensor any more (" + std::string(py::str(py::type::of(t))) + ")";
    return s;
  }
  Bound& b = bound_[index];
  // Only wtx still references what it was given (bound_ and the caller's `t`): the engine has
  // dropped it.
  const bool only_wtx = kind_ != Kind::kModule && Py_REFCNT(b.given.ptr()) <= 2;
  uint64_t address = 0;
  uint64_t fast = FastKey(t, &address);
  // The pinned storage itself was resized or freed (`storage().resize_(0)` on any alias): its
  // address may now be handed to another tensor, so an equal address proves nothing.
  if (!b.pin.is_none() && DataPtr(b.pin) != b.pin_address) fast ^= 0x9E3779B97F4A7C15ULL;
  if (b.described && fast == b.fast && !only_wtx) return b.last;  // nothing moved
  s.address = address;
  py::object storage = torch_.StorageOf(t);
  const int64_t offset = Int(t.attr("storage_offset")()) * Int(t.attr("element_size")());
  const int64_t nbytes = Int(storage.attr("nbytes")());
  s.bytes = nbytes > offset ? static_cast<size_t>(nbytes - offset) : 0;
  s.layout = fast;
  if (only_wtx) {
    if (py::isinstance(b.given, torch_.param_type)) {
      s.released = "the engine dropped this Parameter (wtx holds its last reference)";
    } else if (auto uses = torch_.UseCount(storage); uses && *uses <= 2) {
      // This tensor and the storage object just made: no other tensor shares the storage.
      s.released = "the engine dropped this tensor's storage (wtx holds its last reference)";
    }
  }
  b.described = true;
  b.fast = fast;
  b.last = s;
  return s;
}

void PyStorageResolver::DescribeAll(std::span<const uint32_t> params, std::span<ParamStorage> out) {
  // Shared modules are looked up once when several parameters are resolved together.
  std::optional<Walk> walk;
  if (params.size() > 1) walk = NewWalk();
  for (size_t k = 0; k < params.size(); ++k) {
    out[k] = Describe(params[k], Lookup(params[k], walk ? &*walk : nullptr));
  }
}

PyStorageResolver::Prefetched PyStorageResolver::Prefetch(std::vector<uint32_t> params) {
  std::vector<ParamStorage> found(params.size());
  DescribeAll(params, found);
  std::lock_guard<std::mutex> l(pre_mu_);
  if (pre_.size() != bound_.size()) pre_.resize(bound_.size());
  for (size_t k = 0; k < params.size(); ++k) pre_[params[k]] = std::move(found[k]);
  return Prefetched(this, std::move(params));
}

PyStorageResolver::Prefetched::~Prefetched() {
  if (r_ == nullptr) return;
  std::lock_guard<std::mutex> l(r_->pre_mu_);
  for (uint32_t i : params_) r_->pre_[i].reset();
}

Status PyStorageResolver::Resolve(std::span<const uint32_t> params, std::span<ParamStorage> out) {
  {
    std::lock_guard<std::mutex> l(pre_mu_);
    bool all = !pre_.empty();
    for (size_t k = 0; all && k < params.size(); ++k) all = pre_[params[k]].has_value();
    if (all) {
      for (size_t k = 0; k < params.size(); ++k) out[k] = *pre_[params[k]];
      return Status::OK();
    }
  }
  py::gil_scoped_acquire gil;
  try {
    DescribeAll(params, out);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("resolving the engine's parameters: ") + e.what());
  }
  return Status::OK();
}

}  // namespace wtx::python
