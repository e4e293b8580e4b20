#include "src/testing/process_test_hooks.h"

#include <unistd.h>

#include <cassert>

namespace wtx {

void CrashProcess(FaultInjectionFileSystem* fs, bool power_loss) {
  if (power_loss && fs != nullptr) {
    fs->SetActive(false);
    fs->DropUnsyncedData();
  }
  ::_exit(137);
}

ProcessTestHooks::ProcessTestHooks(ArmedCrashPoint* crash_point, RankAgentHooks* agent,
                                   FaultInjectionFileSystem* fs,
                                   std::function<void(bool power_loss)> crash)
    : crash_point_(crash_point), agent_(agent), fs_(fs), crash_(std::move(crash)) {
  assert(crash_point_ != nullptr && "test hooks need a crash point");
}

void ProcessTestHooks::ArmCrash(const std::string& point) { crash_point_->Arm(point); }

bool ProcessTestHooks::DisarmCrash() { return crash_point_->Disarm(); }

Status ProcessTestHooks::SetSilent(bool silent) {
  if (agent_ == nullptr) return Status::InvalidArgument("set_silent: this process has no agent");
  agent_->silent = silent;
  return Status::OK();
}

void ProcessTestHooks::Crash(bool power_loss) {
  if (crash_) {
    crash_(power_loss);
    return;
  }
  CrashProcess(fs_, power_loss);
}

}  // namespace wtx
