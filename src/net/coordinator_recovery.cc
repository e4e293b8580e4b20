#include "src/net/coordinator_recovery.h"

#include <string>
#include <vector>

#include "src/net/channel.h"

namespace wtx::net {

CoordinatorRecovery::CoordinatorRecovery(Coordinator* coordinator, TcpTransport* transport)
    : c_(coordinator), t_(transport) {}

CoordinatorRecovery::~CoordinatorRecovery() { Stop(); }

void CoordinatorRecovery::Start(int ranks, std::chrono::milliseconds startup_wait) {
  resend_ = std::thread([this] { Resend(); });
  startup_ = std::thread([this, ranks, startup_wait] { Startup(ranks, startup_wait); });
}

void CoordinatorRecovery::Startup(int ranks, std::chrono::milliseconds startup_wait) {
  std::vector<int> all;
  all.reserve(ranks);
  for (int r = 0; r < ranks; ++r) all.push_back(r);
  // WaitForRanks returns at once when the transport shuts down.
  const bool everyone = t_->WaitForRanks(all, startup_wait);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
  }
  if (!everyone) {
    LogLine("coordinator", "not every rank connected within " +
                               std::to_string(startup_wait.count()) +
                               " ms; recovering with those present");
  }
  Status s = c_->Recover();
  if (!s.ok()) LogLine("coordinator", "recover: " + s.ToString());
  t_->SetDecisionOracle(c_);
  t_->SetOnRankRegistered([this](int) {
    {
      std::lock_guard<std::mutex> l(mu_);
      kicked_ = true;
    }
    cv_.notify_all();
  });
}

void CoordinatorRecovery::Resend() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || kicked_; });
    if (stop_) return;
    kicked_ = false;
    l.unlock();
    Status s = c_->Recover();
    if (!s.ok()) LogLine("coordinator", "recover: " + s.ToString());
    l.lock();
  }
}

void CoordinatorRecovery::RequestStop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

void CoordinatorRecovery::Stop() {
  if (stopped_) return;  // the transport may be gone after the first Stop
  stopped_ = true;
  RequestStop();
  if (startup_.joinable()) startup_.join();
  t_->SetOnRankRegistered(nullptr);
  t_->SetDecisionOracle(nullptr);
  if (resend_.joinable()) resend_.join();
}

}  // namespace wtx::net
