// daemon_hooks.h for the installed CLI: no test hooks, no flags for them.
#include "tools/wtx/daemon_hooks.h"

namespace wtx::cli {

bool DaemonTestHooksBuiltIn() { return false; }

void AddDaemonHookFlags(CLI::App* /*cmd*/, DaemonHookFlags* /*flags*/) {}

DaemonHooks MakeDaemonHooks(const DaemonHookFlags& /*flags*/, bool /*rank*/) { return {}; }

}  // namespace wtx::cli
