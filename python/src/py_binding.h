// Shared declarations of the Python extension wtx._wtx (python/src/): the wrappers the classes
// are bound on (Manifest, Participant, Coordinator), the helpers more than one class uses, and
// one Define function per class file. module.cc assembles the module from them.
//
// Thread-safety: as py_common.h (the GIL is held except inside WithoutGil).
#pragma once

#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "journal/journal.h"
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
#include "wtx/metrics.h"
#include "wtx/participant.h"

#include "py_common.h"
#include "py_storage.h"

namespace wtx::python {

// Runs fn() with the GIL released (copies, hashing, journal syncs, the protocol) and returns
// its result; the caller raises on failure with the GIL held again.
template <typename Fn>
auto WithoutGil(Fn&& fn) {
  py::gil_scoped_release nogil;
  return fn();
}

struct PyManifest {
  ManifestPtr m;
};

class PyOracle : public DecisionOracle {
 public:
  explicit PyOracle(py::function fn) : fn_(std::move(fn)) {}
  // The oracle answers (decision, version) or (decision, version, served_digest).
  Result<std::pair<Decision, DecidedVersion>> QueryDecision(const std::string& tx) override {
    py::gil_scoped_acquire gil;
    try {
      py::tuple r = fn_(tx);
      const std::string name = r[0].cast<std::string>();
      auto d = DecisionFromName(name);
      if (!d) return Status::InvalidArgument("oracle answered unknown decision '" + name + "'");
      DecidedVersion v(r[1].is_none() ? std::string() : r[1].cast<std::string>());
      if (r.size() > 2 && !r[2].is_none()) v.served_digest = r[2].cast<std::string>();
      return std::make_pair(*d, std::move(v));
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

// The engine's storage of `params` (all parameters when `all`), resolved with the GIL held for
// the participant call that follows (PyStorageResolver::Prefetch); nothing without a resolver.
std::optional<PyStorageResolver::Prefetched> PrefetchFor(PyParticipant& self,
                                                         std::vector<uint32_t> params,
                                                         bool all = false);
// A source tensor as the live dtype and layout need it (py_participant.cc).
py::object AsLiveSource(py::object tensor, DType live, const std::string& what);
// The shared decision log at `url` (py_decision_log.cc).
std::shared_ptr<DecisionLog> OpenPyDecisionLog(const std::string& url, double request_timeout_s,
                                               bool create = false);

// One per class file: binds the class (and its free functions) on `m`.
// A Hugging Face config given as a path (str or os.PathLike) to config.json or to its folder:
// the file's path (py_manifest.cc).
std::string HfConfigPath(py::handle config);

void DefineManifest(py::module_& m);      // py_manifest.cc: Manifest, expected_version, history
void DefineParticipant(py::module_& m);   // py_participant.cc
void DefineDecisionLog(py::module_& m);   // py_decision_log.cc
void DefineCoordinator(py::module_& m);   // py_coordinator.cc
void DefineTransferPlan(py::module_& m);  // py_transfer_plan.cc
void DefineMetrics(py::module_& m);       // py_metrics.cc
void DefineFleet(py::module_& m);         // py_fleet.cc
// The metric_labels argument of Participant.open / Coordinator.open (py_metrics.cc): checked
// (wtx.Error INVALID_ARGUMENT naming the key).
MetricLabels MetricLabelsArg(const std::optional<std::map<std::string, std::string>>& labels);

}  // namespace wtx::python
