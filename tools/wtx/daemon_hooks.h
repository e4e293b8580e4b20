// The daemons' test-only hooks: `wtx coordinator|rank --test-hooks` (crash points, silence,
// crashes with power-loss emulation over the control connection) and `--sync-delay-ms`
// (benchmarks: a modelled disk). They live in the test-only library wtx_testing, which the
// production libraries never link. The build tree's `wtx` (the CLI the tests, the simulator's
// TCP mode and the benchmarks spawn) is linked with daemon_hooks_testing.cc, which has them;
// the `wtx` that `cmake --install` ships is linked with daemon_hooks_none.cc, which has
// neither flag (docs/architecture.md, "Test hooks").
//
// Thread-safety: MakeDaemonHooks is called once per process, before the daemon serves; the
// objects it returns are as thread-safe as their interfaces say.
#pragma once

#include <memory>

#include <rocksdb/file_system.h>
#include <CLI/CLI.hpp>

#include "src/net/control_service.h"
#include "src/net/rank_agent_hooks.h"
#include "src/util/crash_points.h"
#include "wtx/status.h"

namespace wtx::cli {

struct DaemonHookFlags {
  bool test_hooks = false;
  int sync_delay_ms = 0;
};

// What a daemon wires in; every pointer null (and journal_fs null: the default filesystem)
// without hooks. The objects live as long as this.
struct DaemonHooks {
  std::shared_ptr<rocksdb::FileSystem> journal_fs;
  CrashPoints* crash_points = nullptr;
  RankAgentHooks* agent = nullptr;  // ranks only
  net::ControlTestHooks* control = nullptr;
  std::shared_ptr<void> owner;
};

// True in the build tree's CLI, false in the installed one.
bool DaemonTestHooksBuiltIn();

// Registers --test-hooks and --sync-delay-ms on `cmd` where built in; nothing otherwise (the
// flags are then unknown: exit 2).
void AddDaemonHookFlags(CLI::App* cmd, DaemonHookFlags* flags);

// The hooks `flags` ask for; `rank`: a rank (its agent can be silenced) or the coordinator.
DaemonHooks MakeDaemonHooks(const DaemonHookFlags& flags, bool rank);

}  // namespace wtx::cli
