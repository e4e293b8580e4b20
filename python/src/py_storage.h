// The storage resolver of a Python participant (include/wtx/storage_identity.h): where each
// parameter of the engine is *now*, re-resolved by the participant at every phase.
//
// A participant is opened over one of:
//  * a torch.nn.Module: each manifest parameter is looked up by its dotted name at every
//    resolve (the module path from the root, then `_parameters`, `_buffers` or a plain
//    attribute), so `param.data = t`, `setattr(module, "weight", Parameter(...))` and a removed
//    attribute are all seen;
//  * a mapping of name -> torch.nn.Parameter: the Parameter's current `.data`;
//  * a mapping of name -> tensor (e.g. `p.data`): that tensor. Rebinding the Parameter it came
//    from cannot be seen; where the torch build lets the reference count of a storage be read,
//    a tensor whose storage only wtx still references is reported released (the engine dropped
//    it).
// The storage a parameter is bound to is kept alive (a detached alias) until it is rebound, so
// its address cannot be handed to another tensor while wtx compares against it (a pinned storage
// resized or freed anyway counts as moved); the layout token digests the data pointer, dtype,
// shape and strides.
//
// Thread-safety: Resolve acquires the GIL itself (the participant calls it with the GIL
// released); every other method REQUIRES the GIL.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "wtx/manifest.h"
#include "wtx/storage_identity.h"

namespace wtx::python {

namespace py = pybind11;

class PyStorageResolver : public StorageResolver {
 public:
  // Binds every parameter of `manifest` to `tensors` (a Module, or a mapping as above). Raises
  // wtx.Error naming the parameter when one is missing, or the mapping names an unknown one.
  PyStorageResolver(const Manifest& manifest, py::handle tensors);
  ~PyStorageResolver() override;

  Status Resolve(std::span<const uint32_t> params, std::span<ParamStorage> out) override;

  // Resolves `params` now, with the GIL held, for the participant call the binding is about to
  // make without it: that call's Resolve of these parameters (from any thread) returns what
  // was found here instead of taking the GIL back, so the check stays as of the start of the
  // call. Undone when the returned guard is destroyed (GIL held).
  class Prefetched {
   public:
    Prefetched(PyStorageResolver* r, std::vector<uint32_t> params)
        : r_(r), params_(std::move(params)) {}
    Prefetched(Prefetched&& o) noexcept : r_(o.r_), params_(std::move(o.params_)) {
      o.r_ = nullptr;
    }
    Prefetched(const Prefetched&) = delete;
    Prefetched& operator=(const Prefetched&) = delete;
    Prefetched& operator=(Prefetched&&) = delete;
    ~Prefetched();

   private:
    PyStorageResolver* r_;
    std::vector<uint32_t> params_;
  };
  [[nodiscard]] Prefetched Prefetch(std::vector<uint32_t> params);

  // The tensor parameter `index` is now (a detached alias for a Parameter), or None when the
  // engine removed it. REQUIRES: the GIL.
  py::object Current(uint32_t index) const;
  // Keeps the storage parameter `index` is now on alive as the one bound (after a rebind).
  void Pin(uint32_t index);
  // "module attribute", "Parameter" or "tensor": how parameters are bound, for messages.
  const char* kind_name() const;
  // Whether a storage only wtx still references is detected for bare tensors (see above).
  bool LastReferenceDetectable() const;

 private:
  struct Torch {
    Torch();
    static Torch Released() { return Torch(nullptr); }
    py::object StorageOf(py::handle tensor) const;
    // References to a storage's StorageImpl; nullopt where this torch build hides them.
    std::optional<int64_t> UseCount(py::handle storage) const;
    py::object module_type, param_type, use_count = py::none();
    // Interned attribute names, for the CPython calls of every resolve.
    py::str n_data_ptr, n_dtype, n_shape, n_stride, n_modules, n_parameters, n_buffers;
    bool untyped = false;
    bool countable = false;

   private:
    explicit Torch(std::nullptr_t) {}
  };
  enum class Kind { kModule, kParameter, kTensor };
  struct Bound {
    py::object given;          // the Parameter or tensor given (kParameter, kTensor)
    int owner = 0;             // kModule: the node of the owning module (nodes_)
    py::str leaf;              // kModule: the attribute name in it
    py::object pin;            // an alias of the bound storage, keeping it alive
    uint64_t pin_address = 0;  // the pin's data pointer when pinned (resize_ moves or zeroes it)
    // The last full description and the fast key it was taken at: while the key is unchanged
    // the description is (see FastKey).
    bool described = false;
    uint64_t fast = 0;
    ParamStorage last;
  };
  // The object parameter `index` is now, without detaching (None: removed).
  // The modules of the parameters' dotted names, as a tree: nodes_[0] is the root module; every
  // other node is the child `name` (in `_modules`) of node `parent`.
  struct Node {
    int parent = -1;
    py::str name;
  };
  // One resolve's modules, each looked up once however many parameters it owns.
  struct Walk {
    std::vector<py::object> module;  // by node; None: gone
    std::vector<bool> done;
  };
  py::object NodeObject(int node, Walk* walk) const;  // walk: memo, or null
  py::object Lookup(uint32_t index, Walk* walk = nullptr) const;
  Walk NewWalk() const {
    return Walk{std::vector<py::object>(nodes_.size()), std::vector<bool>(nodes_.size(), false)};
  }
  ParamStorage Describe(uint32_t index, py::handle tensor);
  // A digest of the tensor's data pointer (also returned in *address), dtype, shape and
  // strides.
  uint64_t FastKey(py::handle tensor, uint64_t* address) const;
  uint64_t DataPtr(py::handle tensor) const;
  // out[k] = Describe(params[k]), each module looked up once. REQUIRES: the GIL.
  void DescribeAll(std::span<const uint32_t> params, std::span<ParamStorage> out);

  Torch torch_;  // first: constructed before anything that uses it
  std::vector<Node> nodes_;
  std::mutex pre_mu_;
  std::vector<std::optional<ParamStorage>> pre_;  // GUARDED_BY(pre_mu_): Prefetch's answers
  Kind kind_;
  py::object root_;  // kModule: the module
  std::vector<Bound> bound_;
};

}  // namespace wtx::python
