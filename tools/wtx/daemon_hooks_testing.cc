// daemon_hooks.h for the build tree's CLI: the test hooks over wtx_testing.
#include <chrono>

#include "src/testing/armed_crash_point.h"
#include "src/testing/fault_injection_fs.h"
#include "src/testing/process_test_hooks.h"
#include "src/testing/slow_sync_fs.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/daemon_hooks.h"

namespace wtx::cli {

namespace {

struct HookObjects {
  ArmedCrashPoint crash_point;
  RankAgentHooks agent;
  std::shared_ptr<FaultInjectionFileSystem> fs;
  std::unique_ptr<ProcessTestHooks> control;
};

}  // namespace

bool DaemonTestHooksBuiltIn() { return true; }

void AddDaemonHookFlags(CLI::App* cmd, DaemonHookFlags* flags) {
  cmd->add_flag("--test-hooks", flags->test_hooks,
                "Test-only (not in the installed wtx): accept crash-point, silence and crash "
                "control calls (simulator, tests)");
  AddIntOption(cmd, "--sync-delay-ms", &flags->sync_delay_ms, kSyncDelayMsBounds,
               "Benchmarks only (not in the installed wtx): every synced journal write first "
               "sleeps this long")
      ->capture_default_str();
}

DaemonHooks MakeDaemonHooks(const DaemonHookFlags& flags, bool rank) {
  DaemonHooks h;
  auto objects = std::make_shared<HookObjects>();
  if (flags.test_hooks) {
    // Power-loss emulation: the journal's files remember their synced size (see "crash").
    objects->fs = std::make_shared<FaultInjectionFileSystem>();
    h.journal_fs = objects->fs;
    h.crash_points = &objects->crash_point;
    if (rank) h.agent = &objects->agent;
    objects->control = std::make_unique<ProcessTestHooks>(
        &objects->crash_point, rank ? &objects->agent : nullptr, objects->fs.get());
    h.control = objects->control.get();
  }
  if (flags.sync_delay_ms > 0) {
    h.journal_fs = std::make_shared<SlowSyncFileSystem>(
        std::chrono::milliseconds(flags.sync_delay_ms),
        h.journal_fs ? h.journal_fs : rocksdb::FileSystem::Default());
  }
  h.owner = std::move(objects);
  return h;
}

}  // namespace wtx::cli
