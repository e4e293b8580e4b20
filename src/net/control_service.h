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
//    {timeout_ms}, ping.
//  * With test hooks (`--test-hooks`; ControlTestHooks): arm_crash {point}, disarm, crash
//    {power_loss}, and on a rank set_silent {silent}. Without them these methods are unknown.
//
// Contract: every request's parameters are checked first (CheckControlParams: a field the
// method does not take is refused by name); a malformed value is kInvalidArgument naming the
// field; an unknown method is kInvalidArgument "unknown method 'M'". Nothing untrusted throws.
//
// Thread-safety: Handle may be called from any thread, concurrently; the services hold no
// state of their own beyond the (thread-safe) objects they were given.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "src/net/channel.h"
#include "wtx/coordinator.h"
#include "wtx/participant.h"
#include "wtx/status.h"
#include "wtx/tcp_rank_agent.h"
#include "wtx/tcp_transport.h"

namespace wtx {

class ArmedCrashPoint;
class FaultInjectionFileSystem;
struct RankAgentHooks;

namespace net {

// The test hooks of a process's control service (never enabled in production).
struct ControlTestHooks {
  bool enabled = false;  // false: arm_crash, disarm, set_silent and crash are unknown methods
  // The process's crash point (arm_crash / disarm; a commit answer reports crash_fired).
  // REQUIRES: non-null when enabled.
  ArmedCrashPoint* crash_point = nullptr;
  // The rank agent's hooks (set_silent); ranks only. REQUIRES: non-null on a rank when enabled.
  RankAgentHooks* agent = nullptr;
  // What "crash {power_loss}" does. Default: CrashProcess(fs, power_loss), the process ends.
  std::function<void(bool power_loss)> crash;
  // The filesystem the process's journal runs on (power loss drops its unsynced data); may be
  // null (a crash is then a plain process death).
  FaultInjectionFileSystem* fs = nullptr;
};

// A process death: with power loss, no more writes reach the journal's files and every file
// goes back to its synced size; then the process ends at once (_exit(137), no destructor runs:
// one could write).
[[noreturn]] void CrashProcess(FaultInjectionFileSystem* fs, bool power_loss);

class CoordinatorControlService {
 public:
  // REQUIRES: coordinator and transport outlive the service; transport is the coordinator's.
  // `ranks`: the rank count (wait_ranks refuses any id outside 0..ranks-1).
  CoordinatorControlService(Coordinator* coordinator, TcpTransport* transport, int ranks,
                            ControlTestHooks hooks = {});

  Result<nlohmann::json> Handle(const std::string& method, const nlohmann::json& params);
  // Handle, as TcpTransport::SetControlHandler takes it. REQUIRES: the service outlives it.
  ControlHandler Handler();

 private:
  Coordinator* c_;
  TcpTransport* t_;
  int ranks_;
  ControlTestHooks hooks_;
};

class RankControlService {
 public:
  // REQUIRES: participant (and agent, when not null) outlive the service. A null agent (a
  // participant served without a transport) refuses wait_resolved.
  RankControlService(Participant* participant, TcpRankAgent* agent, ControlTestHooks hooks = {});

  Result<nlohmann::json> Handle(const std::string& method, const nlohmann::json& params);
  // Handle, as ControlServer::Listen takes it. REQUIRES: the service outlives it.
  RequestHandler Handler();

 private:
  Participant* p_;
  TcpRankAgent* agent_;
  ControlTestHooks hooks_;
};

}  // namespace net
}  // namespace wtx
