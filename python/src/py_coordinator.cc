// wtx.Coordinator: in-process (over wtx.Participant objects) or over a message carrier
// (wtx.torch_dist), with an optional shared decision log (docs/python.md).
#include "py_binding.h"
#include "py_crash_points.h"

namespace wtx::python {

using nlohmann::json;

namespace {

// ------------------------------------------------------------------------------- Coordinator

py::list MissingToPy(const std::vector<MissingPiece>& missing) {
  py::list out;
  for (const MissingPiece& mp : missing) {
    py::dict d;
    d["param"] = mp.param;
    d["shard"] = mp.shard;
    d["box"] = BoxToPy(mp.box);
    d["source"] = mp.source;
    d["missing_parts"] = mp.missing_parts;
    d["parts"] = mp.parts;
    out.append(d);
  }
  return out;
}

py::object StatusOrNone(const Status& s) {
  if (s.ok()) return py::none();
  py::dict d;
  d["code"] = std::string(s.code_name());
  d["message"] = s.message();
  return d;
}

py::dict VoteToPy(const VoteReport& v) {
  py::dict d;
  d["rank"] = v.rank;
  d["error"] = py::none();
  d["message"] = "";
  d["missing"] = py::list();
  d["missing_total"] = 0;
  d["stale"] = py::list();
  d["vote"] = std::string(VoteKindName(v.kind));
  switch (v.kind) {
    case VoteReport::Kind::kYes:
      d["wrote"] = v.vote.wrote;
      d["digest"] = v.vote.digest;
      d["served_digest"] = v.vote.served();
      break;
    case VoteReport::Kind::kNo: {
      d["wrote"] = v.vote.wrote;
      d["error"] = std::string(ErrorCodeName(v.vote.error));
      d["message"] = v.vote.message;
      py::list errors;
      for (ErrorCode e : v.vote.errors) errors.append(std::string(ErrorCodeName(e)));
      d["errors"] = errors;
      d["missing"] = MissingToPy(v.vote.missing);
      d["missing_total"] = v.vote.missing_total;
      py::list stale;
      for (const auto& s : v.vote.stale) stale.append(s.name);
      d["stale"] = stale;
      break;
    }
    case VoteReport::Kind::kTimeout:
    case VoteReport::Kind::kCrashed:
      d["error"] = std::string(v.status.code_name());
      d["message"] = v.status.message();
      break;
  }
  return d;
}

py::dict OutcomeToPy(const CommitOutcome& o) {
  py::dict d;
  std::string outcome = "in_doubt";  // the coordinator died before a decision was known
  if (o.decision) {
    switch (*o.decision) {
      case Decision::kCommit:
        outcome = "committed";
        break;
      case Decision::kNoop:
        outcome = "noop";
        break;
      case Decision::kAbort:
        outcome = "aborted";
        break;
    }
  }
  d["outcome"] = outcome;
  d["version"] = o.version.empty() ? py::object(py::none()) : py::object(py::str(o.version));
  d["served_digest"] =
      o.version.empty() ? py::object(py::none()) : py::object(py::str(o.served_digest));
  d["lineage"] = o.lineage;
  d["step"] = o.step ? py::object(py::int_(*o.step)) : py::object(py::none());
  d["error"] = StatusOrNone(o.status);
  py::list votes;
  for (const VoteReport& v : o.votes) {
    py::dict vd = VoteToPy(v);
    if (outcome == "noop" && v.kind == VoteReport::Kind::kNo && !v.vote.wrote) {
      // Nothing was written anywhere: this rank's "no" only said its coverage is empty. The
      // transaction is a noop, and so is the rank's part in it.
      vd["vote"] = "noop";
      vd["error"] = py::none();
      vd["errors"] = py::list();
      vd["message"] = "rank " + std::to_string(v.rank) + ": nothing written";
      vd["missing"] = py::list();
      vd["missing_total"] = 0;
    }
    votes.append(vd);
  }
  d["votes"] = votes;
  d["unacknowledged"] = o.unacknowledged;
  return d;
}

py::dict BeginErrorsToPy(const BeginOutcome& o) {
  py::list errors;
  for (const RankError& e : o.errors) {
    py::dict d;
    d["rank"] = e.rank;
    d["code"] = std::string(e.status.code_name());
    d["message"] = e.status.message();
    errors.append(d);
  }
  py::dict details;
  details["errors"] = errors;
  return details;
}

// A message carrier implemented in Python: carrier(rank, request: bytes, timeout_s) -> bytes.
// Raising wtx.Error with code E_TIMEOUT means "no answer in time"; any other exception means the
// rank is gone.
net::MessageCarrier PyCarrier(py::function fn) {
  auto shared = std::make_shared<py::function>(std::move(fn));
  return [shared](int rank, const std::string& req,
                  std::chrono::milliseconds timeout) -> Result<std::string> {
    py::gil_scoped_acquire gil;
    try {
      py::object r = (*shared)(rank, py::bytes(req), timeout.count() / 1000.0);
      return std::string(r.cast<py::bytes>());
    } catch (py::error_already_set& e) {
      const bool timeout_error = e.value() && py::hasattr(e.value(), "code") &&
                                 py::str(e.value().attr("code")).cast<std::string>() == "E_TIMEOUT";
      return Status(timeout_error ? ErrorCode::kTimeout : ErrorCode::kCrashed, e.what());
    } catch (const std::exception& e) {
      return Status(ErrorCode::kCrashed, e.what());
    }
  };
}

CoordinatorOptions CoordOptions(PyCoordinator& self, const std::string& dir,
                                double prepare_timeout_s, bool accept_unverified_journal,
                                const std::optional<std::string>& test_crash_at,
                                const PyDecisionLogArgs& log,
                                const std::optional<std::vector<int>>& manifest_groups,
                                const std::optional<std::map<std::string, std::string>>& labels) {
  CoordinatorOptions o;
  o.metric_labels = MetricLabelsArg(labels);
  o.journal_dir = dir;
  o.accept_unverified_journal = accept_unverified_journal;
  o.manifest_groups = manifest_groups.value_or(std::vector<int>{});
  if (log.url) {
    SecondsArg(log.lease_ttl_s, "lease_ttl", 600.0);
    SecondsArg(log.leader_wait_s, "leader_wait", kMaxTimeoutMs / 1000.0);
    o.decision_log = OpenPyDecisionLog(*log.url, log.request_timeout_s, /*create=*/true);
    o.lease_ttl = std::chrono::milliseconds(static_cast<int64_t>(log.lease_ttl_s * 1000));
    o.leader_wait = std::chrono::milliseconds(static_cast<int64_t>(log.leader_wait_s * 1000));
  }
  self.crash = ArmTestCrashPoint(test_crash_at);
  SecondsArg(prepare_timeout_s, "prepare_timeout", kMaxTimeoutMs / 1000.0);
  o.prepare_timeout = std::chrono::milliseconds(static_cast<int64_t>(prepare_timeout_s * 1000));
  return o;
}

std::unique_ptr<Coordinator> OpenCoordinator(const CoordinatorOptions& o, Transport* t,
                                             CrashPoints* crash) {
  CoordinatorHooks hooks;  // src/txn/test_hooks.h: test_crash_at only
  hooks.crash_points = crash;
  auto r = WithoutGil([&] { return OpenCoordinatorWithHooks(o, t, hooks); });
  return Unwrap(std::move(r));
}

std::shared_ptr<PyCoordinator> OpenInProc(
    const std::string& dir, std::vector<std::shared_ptr<PyParticipant>> ps,
    double prepare_timeout_s, bool accept_unverified_journal,
    std::optional<std::string> test_crash_at, std::optional<std::string> decision_log,
    double lease_ttl, double leader_wait, const std::optional<std::vector<int>>& manifest_groups,
    const std::optional<std::map<std::string, std::string>>& metric_labels) {
  if (ps.empty()) Raise(Status::InvalidArgument("coordinator: participants is empty"));
  auto out = std::make_shared<PyCoordinator>();
  auto t = std::make_unique<InProcTransport>(static_cast<int>(ps.size()));
  for (size_t i = 0; i < ps.size(); ++i) {
    if (ps[i]->rank != static_cast<int>(i)) {
      Raise(Status::InvalidArgument("coordinator: participants[" + std::to_string(i) +
                                    "] is rank " + std::to_string(ps[i]->rank) +
                                    " (list them in rank order)"));
    }
    t->SetParticipant(static_cast<int>(i), &ps[i]->get());
  }
  out->participants = std::move(ps);
  out->journal_dir = dir;
  // CoordOptions arms out->crash: called first (argument order is unspecified).
  const CoordinatorOptions o = CoordOptions(
      *out, dir, prepare_timeout_s, accept_unverified_journal, test_crash_at,
      PyDecisionLogArgs{decision_log, lease_ttl, leader_wait}, manifest_groups, metric_labels);
  out->c = OpenCoordinator(o, t.get(), out->crash.get());
  out->transport = std::move(t);
  return out;
}

std::shared_ptr<PyCoordinator> OpenCarried(
    const std::string& dir, py::object num_ranks_arg, py::function carrier,
    double prepare_timeout_s, double request_timeout_s, bool accept_unverified_journal,
    std::optional<std::string> test_crash_at, std::optional<std::string> decision_log,
    double lease_ttl, double leader_wait, const std::optional<std::vector<int>>& manifest_groups,
    const std::optional<std::map<std::string, std::string>>& metric_labels) {
  const int num_ranks = static_cast<int>(IntArg(num_ranks_arg, "num_ranks", 1, kMaxRanks));
  SecondsArg(request_timeout_s, "request_timeout", kMaxTimeoutMs / 1000.0);
  auto out = std::make_shared<PyCoordinator>();
  out->journal_dir = dir;
  out->transport = std::make_unique<net::MessageTransport>(
      num_ranks, PyCarrier(std::move(carrier)),
      std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000)));
  // CoordOptions arms out->crash: called first (argument order is unspecified).
  const CoordinatorOptions o = CoordOptions(
      *out, dir, prepare_timeout_s, accept_unverified_journal, test_crash_at,
      PyDecisionLogArgs{decision_log, lease_ttl, leader_wait}, manifest_groups, metric_labels);
  out->c = OpenCoordinator(o, out->transport.get(), out->crash.get());
  return out;
}

BeginRequest MakeBegin(const std::string& tx, const std::string& kind,
                       std::optional<std::string> base,
                       std::optional<std::vector<std::string>> modules,
                       std::optional<std::vector<std::string>> sources, bool rollback,
                       const std::string& verify, std::optional<std::string> lineage,
                       std::optional<int64_t> step) {
  BeginRequest req;
  req.tx = tx;
  auto k = TxKindFromName(kind);
  if (!k)
    Raise(
        Status::InvalidArgument("begin: kind must be full, partial or delta, not '" + kind + "'"));
  req.kind = *k;
  req.base = base.value_or("");
  req.modules = modules.value_or(std::vector<std::string>{});
  req.sources = sources.value_or(std::vector<std::string>{});
  req.rollback = rollback;
  auto mode = VerifyModeFromName(verify);
  if (!mode)
    Raise(Status::InvalidArgument("begin: verify must be touched or all, not '" + verify + "'"));
  req.verify = *mode;
  req.lineage = lineage.value_or("");
  if (step && *step < 0) {
    Raise(Status::InvalidArgument("begin: step must be >= 0, not " + std::to_string(*step)));
  }
  req.step = step;
  return req;
}

// Every in-process participant's storage, resolved with the GIL held for the coordinator call
// that follows (its ranks' checks then need no GIL on the fan-out threads).
std::vector<PyStorageResolver::Prefetched> PrefetchRanks(PyCoordinator& self) {
  std::vector<PyStorageResolver::Prefetched> out;
  for (auto& p : self.participants) {
    if (auto pre = PrefetchFor(*p, {}, /*all=*/true)) out.push_back(std::move(*pre));
  }
  return out;
}

py::dict Begin(PyCoordinator& self, const std::string& tx, const std::string& kind,
               std::optional<std::string> base, std::optional<std::vector<std::string>> modules,
               std::optional<std::vector<std::string>> sources, bool rollback,
               const std::string& verify, std::optional<std::string> lineage,
               std::optional<int64_t> step) {
  BeginRequest req = MakeBegin(tx, kind, base, modules, sources, rollback, verify, lineage, step);
  Coordinator& c = self.get();
  auto pre = PrefetchRanks(self);
  const BeginOutcome o = WithoutGil([&] { return c.Begin(req); });
  if (!o.status.ok()) Raise(o.status, BeginErrorsToPy(o));
  py::dict d;
  d["tx"] = tx;
  d["lineage"] = o.lineage;
  d["step"] = o.step ? py::object(py::int_(*o.step)) : py::object(py::none());
  return d;
}

py::dict Commit(PyCoordinator& self, const std::string& tx,
                std::optional<std::string> expect_version,
                std::optional<std::vector<std::string>> expect_rank_digests,
                std::optional<std::string> expect_served_digest) {
  if (expect_version && expect_version->empty()) {
    Raise(Status::InvalidArgument("commit: expect_version must be a version, not empty"));
  }
  if (expect_served_digest && expect_served_digest->empty()) {
    Raise(Status::InvalidArgument("commit: expect_served_digest must be a digest, not empty"));
  }
  Coordinator& c = self.get();
  CommitOptions opts;
  opts.expect_version = std::move(expect_version);
  if (expect_rank_digests) opts.expect_rank_digests = std::move(*expect_rank_digests);
  opts.expect_served_digest = std::move(expect_served_digest);
  auto pre = PrefetchRanks(self);
  const CommitOutcome o = WithoutGil([&] { return c.Commit(tx, opts); });
  // Misuse (no such transaction, decided already) is an error; a decision is an outcome.
  if (!o.decision && o.status.code() != ErrorCode::kCrashed) Raise(o.status);
  return OutcomeToPy(o);
}

py::dict Abort(PyCoordinator& self, const std::string& tx) {
  Coordinator& c = self.get();
  const BeginOutcome o = WithoutGil([&] { return c.Abort(tx); });
  if (!o.status.ok()) Raise(o.status, BeginErrorsToPy(o));
  py::dict d;
  d["outcome"] = "aborted";
  d["tx"] = tx;
  return d;
}

}  // namespace

void DefineCoordinator(py::module_& m) {
  py::class_<PyCoordinator, std::shared_ptr<PyCoordinator>>(m, "Coordinator", R"(Runs the all-ranks
transaction: begin, commit (prepare on every rank, then one logged decision), abort and
recovery. In-process over Participant objects (open) or over a message carrier (open_carried,
wtx.torch_dist); a context manager.)")
      .def_static("open", &OpenInProc, py::arg("journal_dir"), py::kw_only(),
                  py::arg("participants"), py::arg("prepare_timeout") = 5.0,
                  py::arg("accept_unverified_journal") = false,
                  py::arg("test_crash_at") = py::none(), py::arg("decision_log") = py::none(),
                  py::arg("lease_ttl") = 2.0, py::arg("leader_wait") = 5.0,
                  py::arg("manifest_groups") = py::none(), py::arg("metric_labels") = py::none(),
                  "decision_log: 'etcd://HOST:PORT[,...]/PREFIX' to decide in etcd (the "
                  "coordinator takes the leadership of it first, waiting up to leader_wait s); "
                  "None: the embedded journal. manifest_groups: one value per rank; ranks of "
                  "one value must hold the same manifest, ranks of different values may differ "
                  "(pipeline stages); None: every rank the same. metric_labels: "
                  "{'replica': ..., 'fleet': ...} added to the coordinator's metrics "
                  "(docs/observability.md).")
      .def_static("open_carried", &OpenCarried, py::arg("journal_dir"), py::kw_only(),
                  py::arg("num_ranks"), py::arg("carrier"), py::arg("prepare_timeout") = 5.0,
                  py::arg("request_timeout") = 30.0, py::arg("accept_unverified_journal") = false,
                  py::arg("test_crash_at") = py::none(), py::arg("decision_log") = py::none(),
                  py::arg("lease_ttl") = 2.0, py::arg("leader_wait") = 5.0,
                  py::arg("manifest_groups") = py::none(), py::arg("metric_labels") = py::none(),
                  "A coordinator whose calls travel as encoded messages through "
                  "carrier(rank, request: bytes, timeout_s) -> reply bytes (wtx.torch_dist); "
                  "manifest_groups and metric_labels as for open.")
      .def("begin", &Begin, py::arg("tx"), py::kw_only(), py::arg("kind") = "full",
           py::arg("base") = py::none(), py::arg("modules") = py::none(),
           py::arg("sources") = py::none(), py::arg("rollback") = false,
           py::arg("verify") = "touched", py::arg("lineage") = py::none(),
           py::arg("step") = py::none(),
           "Begins `tx` on every rank (a refused begin changes nothing). lineage/step: the step "
           "of the lineage it commits (None: the ranks' lineage, one past the highest step any "
           "rank or the decision log committed); a step at or below a committed one raises "
           "E_STEP_REGRESSION. Returns {'tx', 'lineage', 'step'}.")
      .def("commit", &Commit, py::arg("tx"), py::kw_only(), py::arg("expect_version") = py::none(),
           py::arg("expect_rank_digests") = py::none(),
           py::arg("expect_served_digest") = py::none(),
           "Prepares everywhere and decides. With expect_version (wtx.expected_version: the "
           "checkpoint version), a commit whose combined version differs aborts with "
           "E_VERSION_MISMATCH; expect_served_digest likewise for the served digest (the live "
           "bytes after processing, e.g. a copy of a peer replica's).")
      .def("abort", &Abort, py::arg("tx"))
      .def("recover",
           [](PyCoordinator& self) {
             Coordinator& c = self.get();
             Check(WithoutGil([&] { return c.Recover(); }));
           })
      .def(
          "query_decision",
          [](PyCoordinator& self, const std::string& tx) {
            Coordinator& c = self.get();
            auto r = WithoutGil([&] { return c.QueryDecision(tx); });
            auto d = Unwrap(std::move(r));
            return py::make_tuple(std::string(DecisionName(d.first)), d.second.version);
          },
          py::arg("tx"))
      .def_property_readonly("epoch", [](PyCoordinator& self) { return self.get().epoch(); })
      .def_property_readonly("leads", [](PyCoordinator& self) { return self.get().leads(); })
      .def_property_readonly("decision_log",
                             [](PyCoordinator& self) { return self.get().decision_log(); })
      .def("committed_version",
           [](PyCoordinator& self, const std::string& tx) -> py::object {
             auto v = self.get().CommittedVersion(tx);
             return v ? py::object(py::str(*v)) : py::object(py::none());
           })
      .def("decisions",
           [](PyCoordinator& self) {
             py::list out;
             for (const DecisionEntry& e : self.get().decisions()) {
               py::dict d;
               d["tx"] = e.tx;
               d["decision"] = std::string(DecisionName(e.decision));
               d["version"] = e.version;
               d["served_digest"] = e.decision == Decision::kCommit
                                        ? DecidedVersion(e.version, e.served_digest).served()
                                        : std::string();
               d["reason"] = e.reason;
               d["lineage"] = e.lineage;
               d["step"] = e.step ? py::object(py::int_(*e.step)) : py::object(py::none());
               out.append(d);
             }
             return out;
           })
      .def("close", [](PyCoordinator& self) {
        std::unique_ptr<Coordinator> c = std::move(self.c);
        py::gil_scoped_release nogil;
        c.reset();
      });
}

}  // namespace wtx::python
