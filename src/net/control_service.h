// Control services: the request dispatch of the `wtx coordinator` and `wtx rank` processes
// (docs/protocol.md, "Control protocol"). A front end (the CLI, a test, another embedding)
// builds the coordinator, the participant and their transport, then hands a service the
// objects it answers for; the service turns one control request (method + JSON parameters)
// into calls on them and their answer into JSON (control_codec.h). The CLI only parses flags
// and wires a service to its connection (TcpTransport::SetControlHandler, ControlServer).
//
//  * CoordinatorControlService: begin, commit, abort, committed_version, decisions, recover,
//    connected, wait_ranks {ranks, timeout_ms}.
//  * RankControlService: step {step, scope}, status, verify, reattach, wait_resolved
//    {timeout_ms}, ping, read_live {param, offset, length, version} and, once EnableCatchUp,
//    catch_up {peer, version} (src/net/catch_up.h).
//    The rank's `step` is applied by the RankStepHandler its owner gives (the scenario runner's,
//    src/conformance/step_codec.h); without one, `step` is refused.
//  * With test hooks (`--test-hooks`; a ControlTestHooks implementation, which lives in the
//    test-only library: src/testing/process_test_hooks.h): arm_crash {point}, disarm, crash
//    {power_loss}, and on a rank set_silent {silent}. Without them these methods are unknown.
//    This library knows only the interface: it never links a crash point or a fault-injecting
//    filesystem.
//
// Contract: every request's parameters are checked first (CheckControlParams: a field the
// method does not take is refused by name); a malformed value is kInvalidArgument naming the
// field; an unknown method is kInvalidArgument "unknown method 'M'". Nothing untrusted throws.
//
// Thread-safety: Handle may be called from any thread, concurrently; the services hold no
// state of their own beyond the (thread-safe) objects they were given.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "src/net/catch_up.h"
#include "src/net/channel.h"
#include "wtx/coordinator.h"
#include "wtx/participant.h"
#include "wtx/status.h"
#include "wtx/tcp_rank_agent.h"
#include "wtx/tcp_transport.h"

namespace wtx::net {

// The test hooks of a process's control service (never given in production). Implementations
// must be thread-safe: the service calls them from any thread.
class ControlTestHooks {
 public:
  virtual ~ControlTestHooks() = default;
  // arm_crash {point}: the next time the process passes crash point `point`, the call fails.
  virtual void ArmCrash(const std::string& point) = 0;
  // disarm; also after every commit (the answer's crash_fired): whether the armed point fired.
  virtual bool DisarmCrash() = 0;
  // set_silent {silent} (ranks): the rank agent leaves prepare requests unanswered.
  // kInvalidArgument when the process has no agent to silence.
  virtual Status SetSilent(bool silent) = 0;
  // crash {power_loss}: the process dies (with power loss: its journal's unsynced data is
  // gone). Returns only where the owner emulates the death in process (tests).
  virtual void Crash(bool power_loss) = 0;
};

// The data-plane `step` of a rank's control service: applies `step` (opaque JSON to this
// layer) to `participant`, `scope` being the current transaction's begin request when the
// driver sent one. Errors are the answer to the request.
using RankStepHandler =
    std::function<Status(const nlohmann::json& step, const std::optional<BeginRequest>& scope,
                         Participant& participant)>;

class CoordinatorControlService {
 public:
  // REQUIRES: coordinator and transport outlive the service; transport is the coordinator's.
  // `ranks`: the rank count (wait_ranks refuses any id outside 0..ranks-1).
  // `hooks`: null (production) or the test hooks, which must outlive the service.
  CoordinatorControlService(Coordinator* coordinator, TcpTransport* transport, int ranks,
                            ControlTestHooks* hooks = nullptr);

  Result<nlohmann::json> Handle(const std::string& method, const nlohmann::json& params);
  // Handle, as TcpTransport::SetControlHandler takes it. REQUIRES: the service outlives it.
  ControlHandler Handler();

 private:
  Coordinator* c_;
  TcpTransport* t_;
  int ranks_;
  ControlTestHooks* hooks_;
};

class RankControlService {
 public:
  // REQUIRES: participant (and agent, when not null) outlive the service. A null agent (a
  // participant served without a transport) refuses wait_resolved. A null `step` handler
  // refuses step requests. `hooks`: null (production) or the test hooks, which must outlive
  // the service.
  RankControlService(Participant* participant, TcpRankAgent* agent, RankStepHandler step = {},
                     ControlTestHooks* hooks = nullptr);

  Result<nlohmann::json> Handle(const std::string& method, const nlohmann::json& params);
  // Handle, as ControlServer::Listen takes it. REQUIRES: the service outlives it.
  RequestHandler Handler();
  // Answers catch_up, reaching peers with `options`. REQUIRES: called before Handler() serves.
  void EnableCatchUp(CatchUpOptions options) { catch_up_ = std::move(options); }

 private:
  std::optional<CatchUpOptions> catch_up_;
  Participant* p_;
  TcpRankAgent* agent_;
  RankStepHandler step_;
  ControlTestHooks* hooks_;
};

}  // namespace wtx::net
