#include "src/net/control_service.h"

#include <cassert>
#include <optional>

#include "src/net/codec.h"
#include "src/net/control_codec.h"
#include "src/util/json_number.h"
#include "wtx/limits.h"

namespace wtx::net {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

Status UnknownMethod(const std::string& m) {
  return Status::InvalidArgument("unknown method '" + m + "'");
}

// Absent (or null): `dflt`, or an error when there is none.
Result<bool> BoolParam(const json& p, const std::string& m, const char* field,
                       std::optional<bool> dflt) {
  auto it = p.is_object() ? p.find(field) : p.end();
  if ((it == p.end() || it->is_null()) && dflt) return *dflt;
  if (it == p.end() || !it->is_boolean()) {
    return Status::InvalidArgument(m + "." + field + ": expected true or false");
  }
  return it->get<bool>();
}

// The test-hook methods common to both processes; nullopt when `m` is none of them.
std::optional<Result<json>> HandleTestHook(ControlTestHooks* h, const std::string& m,
                                           const json& p) {
  if (h == nullptr) return std::nullopt;
  if (m == "arm_crash") {
    auto point = StringParam(p, m, "point");
    if (!point.ok()) return Result<json>(point.status());
    h->ArmCrash(point.value());
    return Result<json>(json::object());
  }
  if (m == "disarm") return Result<json>(json{{"fired", h->DisarmCrash()}});
  if (m == "crash") {
    auto power_loss = BoolParam(p, m, "power_loss", false);
    if (!power_loss.ok()) return Result<json>(power_loss.status());
    h->Crash(power_loss.value());
    return Result<json>(json::object());
  }
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Coordinator

CoordinatorControlService::CoordinatorControlService(Coordinator* coordinator,
                                                     TcpTransport* transport, int ranks,
                                                     ControlTestHooks* hooks)
    : c_(coordinator), t_(transport), ranks_(ranks), hooks_(hooks) {
  assert(c_ != nullptr && t_ != nullptr && "a coordinator service needs both objects");
}

Result<json> CoordinatorControlService::Handle(const std::string& m, const json& p) {
  WTX_RETURN_IF_ERROR(CheckControlParams(m, p));
  if (m == "begin") {
    WTX_ASSIGN_OR_RETURN(req, BeginRequestFromJson(Param(p, "req")));
    return BeginOutcomeToJson(c_->Begin(req));
  }
  if (m == "commit") {
    WTX_ASSIGN_OR_RETURN(tx, StringParam(p, m, "tx"));
    WTX_ASSIGN_OR_RETURN(opts, CommitOptionsFromJson(Param(p, "options")));
    CommitOutcome o = c_->Commit(tx, opts);
    json j = CommitOutcomeToJson(o);
    j["crash_fired"] = hooks_ != nullptr && hooks_->DisarmCrash();
    return j;
  }
  if (m == "abort") {
    WTX_ASSIGN_OR_RETURN(tx, StringParam(p, m, "tx"));
    return BeginOutcomeToJson(c_->Abort(tx));
  }
  if (m == "committed_version") {
    WTX_ASSIGN_OR_RETURN(tx, StringParam(p, m, "tx"));
    auto v = c_->CommittedVersion(tx);
    return json{{"version", v ? json(*v) : json()}};
  }
  if (m == "decisions") return json{{"decisions", DecisionsToJson(c_->decisions())}};
  if (m == "recover") {
    Status s = c_->Recover();
    if (s.ok()) t_->SetDecisionOracle(c_);
    return StatusToJson(s);
  }
  if (m == "connected") return json{{"ranks", t_->ConnectedRanks()}};
  if (m == "leader") {  // the decision log and this coordinator's leadership of it
    return json{
        {"decision_log", c_->decision_log()}, {"epoch", c_->epoch()}, {"leads", c_->leads()}};
  }
  if (m == "wait_ranks") {
    // Checked: a rank outside 0..ranks-1 (or 2^40, which get<int> truncates to 0) can never
    // connect, so it is refused rather than waited for or confused with another rank.
    WTX_ASSIGN_OR_RETURN(ranks, JsonIntList(Param(p, "ranks"), "wait_ranks.ranks", 0, ranks_ - 1));
    WTX_ASSIGN_OR_RETURN(
        timeout, JsonInt(Param(p, "timeout_ms"), "wait_ranks.timeout_ms", 0, kMaxTimeoutMs));
    return json{{"ok", t_->WaitForRanks(ranks, milliseconds(timeout))}};
  }
  if (auto r = HandleTestHook(hooks_, m, p)) return std::move(*r);
  return UnknownMethod(m);
}

ControlHandler CoordinatorControlService::Handler() {
  return [this](const std::string& m, const json& p) -> std::optional<Result<json>> {
    return Handle(m, p);
  };
}

// ---------------------------------------------------------------------------------------------
// Rank

RankControlService::RankControlService(Participant* participant, TcpRankAgent* agent,
                                       RankStepHandler step, ControlTestHooks* hooks)
    : p_(participant), agent_(agent), step_(std::move(step)), hooks_(hooks) {
  assert(p_ != nullptr && "a rank service needs its participant");
}

Result<json> RankControlService::Handle(const std::string& m, const json& q) {
  WTX_RETURN_IF_ERROR(CheckControlParams(m, q));
  if (m == "step") {
    if (!step_) return Status::InvalidArgument("step: this rank applies no data-plane steps");
    std::optional<BeginRequest> scope;
    if (const json& s = Param(q, "scope"); !s.is_null()) {
      WTX_ASSIGN_OR_RETURN(req, BeginRequestFromJson(s));
      scope = std::move(req);
    }
    WTX_RETURN_IF_ERROR(step_(Param(q, "step"), scope, *p_));
    return json::object();
  }
  if (m == "status") return RankStatusToJson(p_->status());
  if (m == "verify" || m == "reattach") {  // Participant::Verify / Reattach on this rank
    auto r = m == "verify" ? p_->Verify() : p_->Reattach();
    if (!r.ok()) return r.status();
    return VerifyReportToJson(r.value());
  }
  if (m == "wait_resolved") {
    WTX_ASSIGN_OR_RETURN(
        timeout, JsonInt(Param(q, "timeout_ms"), "wait_resolved.timeout_ms", 0, kMaxTimeoutMs));
    if (agent_ == nullptr) {
      return Status::InvalidArgument("wait_resolved: this rank has no transport agent");
    }
    RankAgentState s;
    const bool done = agent_->WaitResolved(milliseconds(timeout), &s);
    return json{{"resolved", done},
                {"connected", s.connected},
                {"resolution", StatusToJson(s.resolution)},
                {"last_error", StatusToJson(s.last_error)}};
  }
  if (m == "ping") return json::object();
  if (m == "read_live") return ReadLive(*p_, q);
  if (m == "catch_up") {
    if (!catch_up_) return Status::InvalidArgument("catch_up: this rank is in no fleet");
    WTX_ASSIGN_OR_RETURN(copied, CatchUpFromPeer(*p_, q, *catch_up_));
    return json{{"bytes", copied.bytes}, {"served_digest", copied.served_digest}};
  }
  if (m == "agent") {  // the transport agent: which coordinator, epoch, resolutions from the log
    if (agent_ == nullptr)
      return Status::InvalidArgument("agent: this rank has no transport agent");
    const RankAgentState s = agent_->state();
    return json{{"connected", s.connected},
                {"coordinator", s.coordinator},
                {"connections", s.connections},
                {"epoch", s.epoch},
                {"resolved_from_log", s.resolved_from_log},
                {"log_resolution", StatusToJson(s.log_resolution)},
                {"last_error", StatusToJson(s.last_error)}};
  }
  if (hooks_ != nullptr && m == "set_silent") {
    WTX_ASSIGN_OR_RETURN(silent, BoolParam(q, m, "silent", std::nullopt));
    WTX_RETURN_IF_ERROR(hooks_->SetSilent(silent));
    return json::object();
  }
  if (auto r = HandleTestHook(hooks_, m, q)) return std::move(*r);
  return UnknownMethod(m);
}

RequestHandler RankControlService::Handler() {
  return [this](const std::string& m, const json& q) -> std::optional<Result<json>> {
    return Handle(m, q);
  };
}

}  // namespace wtx::net
