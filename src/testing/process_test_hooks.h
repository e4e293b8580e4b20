// ProcessTestHooks: the test hooks of a `wtx coordinator` or `wtx rank` process's control
// service (net::ControlTestHooks), over this library's crash point (ArmedCrashPoint), the rank
// agent's silence switch (RankAgentHooks) and the fault-injecting filesystem under the
// process's journal (power-loss emulation). Test-only (library wtx_testing): the production
// libraries know only the interface, and only the test-only daemon hooks of the build tree's
// CLI create one (tools/wtx/daemon_hooks.h).
//
// Thread-safety: every method may be called from any thread (the crash point and the agent's
// switch are thread-safe; Crash ends the process).
#pragma once

#include <functional>
#include <string>

#include "src/net/control_service.h"
#include "src/net/rank_agent_hooks.h"
#include "src/testing/armed_crash_point.h"
#include "src/testing/fault_injection_fs.h"

namespace wtx {

// A process death: with power loss, no more writes reach the journal's files and every file
// goes back to its synced size; then the process ends at once (_exit(137), no destructor runs:
// one could write). `fs` may be null (a plain process death).
[[noreturn]] void CrashProcess(FaultInjectionFileSystem* fs, bool power_loss);

class ProcessTestHooks : public net::ControlTestHooks {
 public:
  // REQUIRES: crash_point non-null. `agent`: the rank agent's hooks (null on a coordinator:
  // set_silent is then refused). `fs`: the journal's filesystem, may be null. `crash`: what
  // "crash" does; empty: CrashProcess(fs, power_loss). All must outlive the hooks.
  ProcessTestHooks(ArmedCrashPoint* crash_point, RankAgentHooks* agent,
                   FaultInjectionFileSystem* fs, std::function<void(bool power_loss)> crash = {});

  void ArmCrash(const std::string& point) override;
  bool DisarmCrash() override;
  Status SetSilent(bool silent) override;
  void Crash(bool power_loss) override;

 private:
  ArmedCrashPoint* const crash_point_;
  RankAgentHooks* const agent_;
  FaultInjectionFileSystem* const fs_;
  const std::function<void(bool)> crash_;
};

}  // namespace wtx
