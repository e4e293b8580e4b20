// wtx.fleet's native half (python/wtx/fleet.py wraps it): the fleet registry's status and
// policy, and FleetMember (wtx/fleet.h) over a wtx.Participant.
#include "py_binding.h"
#include "src/fleet/fleet_json.h"
#include "wtx/fleet.h"

namespace wtx::python {

namespace {

FleetOptions PyFleetOptions(const std::string& url, const std::string& fleet,
                            double request_timeout_s) {
  SecondsArg(request_timeout_s, "request_timeout", kMaxTimeoutMs / 1000.0);
  FleetOptions o;
  o.url = url;
  o.fleet = fleet;
  o.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000));
  return o;
}

// A FleetMember and the participant it holds (kept open while the member reports).
struct PyFleetMember {
  std::shared_ptr<Participant> participant;
  std::unique_ptr<FleetMember> member;

  FleetMember& get() const {
    if (!member) Raise(Status::InvalidArgument("fleet member is closed"));
    return *member;
  }
};

}  // namespace

void DefineFleet(py::module_& m) {
  m.def(
      "fleet_status",
      [](const std::string& url, const std::string& fleet, double request_timeout) {
        FleetOptions o = PyFleetOptions(url, fleet, request_timeout);
        auto r = WithoutGil([&] { return ReadFleetStatus(o); });
        return ToPy(fleet::FleetStatusToJson(Unwrap(std::move(r))));
      },
      py::arg("url"), py::arg("fleet"), py::arg("request_timeout") = 2.0);
  m.def(
      "fleet_serving",
      [](const std::string& url, const std::string& fleet, std::optional<int64_t> min_step,
         double request_timeout) {
        FleetOptions o = PyFleetOptions(url, fleet, request_timeout);
        auto r = WithoutGil([&] { return ServingReplicas(o, min_step); });
        py::list out;
        for (const FleetReplica& replica : Unwrap(std::move(r))) {
          out.append(ToPy(fleet::FleetReplicaToJson(replica)));
        }
        return out;
      },
      py::arg("url"), py::arg("fleet"), py::arg("min_step"), py::arg("request_timeout") = 2.0);
  m.def(
      "set_fleet_policy",
      [](const std::string& url, const std::string& fleet, std::optional<int64_t> max_lag,
         int quorum, const std::string& lineage, double request_timeout) {
        FleetOptions o = PyFleetOptions(url, fleet, request_timeout);
        FleetPolicy policy;
        policy.max_lag = max_lag;
        policy.quorum = quorum;
        policy.lineage = lineage;
        auto r = WithoutGil([&] { return SetFleetPolicy(o, policy); });
        return ToPy(fleet::FleetPolicyToJson(Unwrap(std::move(r))));
      },
      py::arg("url"), py::arg("fleet"), py::arg("max_lag"), py::arg("quorum"), py::arg("lineage"),
      py::arg("request_timeout") = 2.0);

  py::class_<PyFleetMember>(m, "FleetMember")
      .def(py::init([](PyParticipant& participant, const std::string& url, const std::string& fleet,
                       const std::string& replica, int world, double ttl, double period,
                       double request_timeout) {
             SecondsArg(ttl, "ttl", 600);
             if (period != 0) SecondsArg(period, "period", 600);  // 0: a third of the TTL
             FleetMemberOptions o;
             o.fleet = PyFleetOptions(url, fleet, request_timeout);
             o.replica = replica;
             o.rank = participant.rank;
             o.world = world;
             o.ttl = std::chrono::milliseconds(static_cast<int64_t>(ttl * 1000));
             o.period = std::chrono::milliseconds(static_cast<int64_t>(period * 1000));
             auto out = std::make_unique<PyFleetMember>();
             participant.get();  // raises when closed
             out->participant = participant.p;
             auto r = WithoutGil(
                 [&] { return FleetMember::Start(std::move(o), out->participant.get()); });
             out->member = Unwrap(std::move(r));
             return out;
           }),
           py::arg("participant"), py::arg("url"), py::arg("fleet"), py::arg("replica"),
           py::arg("world"), py::arg("ttl"), py::arg("period"), py::arg("request_timeout"))
      .def("report_now",
           [](PyFleetMember& self) {
             FleetMember& member = self.get();
             Status s = WithoutGil([&] { return member.ReportNow(); });
             Check(s);
           })
      .def_property_readonly("hold",
                             [](PyFleetMember& self) -> py::object {
                               auto h = self.get().hold();
                               return h ? py::object(py::str(*h)) : py::object(py::none());
                             })
      .def_property_readonly("last_status",
                             [](PyFleetMember& self) -> py::object {
                               auto s = self.get().last_status();
                               return s ? ToPy(fleet::FleetStatusToJson(*s))
                                        : py::object(py::none());
                             })
      .def("close", [](PyFleetMember& self) {
        std::unique_ptr<FleetMember> member = std::move(self.member);
        WithoutGil([&] {
          member.reset();  // revokes the lease, releases the hold
          return 0;
        });
        self.participant.reset();
      });
}

}  // namespace wtx::python
