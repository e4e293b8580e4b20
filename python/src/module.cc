// wtx._wtx: the Python binding of wtx (python/wtx/ wraps it; docs/python.md). Manifests,
// participants over borrowed torch tensors, coordinators over the in-process transport or over
// a message carrier (wtx.torch_dist), and the journal history. Every wtx error is raised as
// wtx.Error; a transaction that aborts is an outcome dict, not an exception.
//
// Thread-safety: the wrapped C++ objects are thread-safe; every call that copies, hashes,
// journals or runs the protocol releases the GIL.
#include "py_binding.h"

PYBIND11_MODULE(_wtx, m) {
  m.doc() = "wtx: journaled all-ranks weight-update transactions (docs/python.md)";
  wtx::python::InitErrors(m);
  wtx::python::DefineManifest(m);
  wtx::python::DefineParticipant(m);
  wtx::python::DefineDecisionLog(m);
  wtx::python::DefineCoordinator(m);
  wtx::python::DefineTransferPlan(m);
  wtx::python::DefineMetrics(m);
  wtx::python::DefineFleet(m);
}
