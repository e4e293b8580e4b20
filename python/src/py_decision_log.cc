// wtx.DecisionLog: the shared decision log, read side and the ranks' cooperative resolution.
#include "py_binding.h"

namespace wtx::python {

using nlohmann::json;

std::shared_ptr<DecisionLog> OpenPyDecisionLog(const std::string& url, double request_timeout_s,
                                               bool create) {
  SecondsArg(request_timeout_s, "decision_log_timeout", kMaxTimeoutMs / 1000.0);
  DecisionLogOptions o;
  o.url = url;
  o.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000));
  o.create = create;
  auto r = WithoutGil([&] { return OpenDecisionLog(o); });
  return Unwrap(std::move(r));
}

void DefineDecisionLog(py::module_& m) {
  // The shared decision log, read-side and the ranks' cooperative resolution.
  py::class_<DecisionLog, std::shared_ptr<DecisionLog>>(m, "DecisionLog", R"(The shared decision log
(etcd) of a leader and its standbys: read decisions and the leader, and resolve a rank's
transaction without a coordinator.)")
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
}

}  // namespace wtx::python
