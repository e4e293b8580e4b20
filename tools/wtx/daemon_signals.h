// DaemonSignals: start-up and shutdown of the long-running commands (`wtx coordinator`,
// `wtx rank`). SIGINT and SIGTERM are blocked in every thread and taken by one watcher thread.
// Before Ready() a stop signal ends the process at once, at whatever stage start-up is
// (reading files, recovering the journal, binding ports): one stderr line names the stage and
// the process _exit()s with kExitOk. Nothing is served yet, and whatever start-up wrote to the
// journal is crash-safe by design (docs/crash-safety.md: every stage survives kill -9). Ready()
// prints the ready line, only once the daemon is (files loaded, journal open, listening);
// after it, WaitForStop() returns on the signal and the caller shuts down in order.
//
// Thread-safety: construct first thing in the command (before any thread starts, so that all
// inherit the blocked mask); Stage, Ready and WaitForStop from the command's thread.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "src/net/control_codec.h"
#include "src/util/exit_codes.h"
#include "src/util/thread_annotations.h"

namespace wtx::cli {

class DaemonSignals {
 public:
  explicit DaemonSignals(std::string command) : command_(std::move(command)) {
    ::signal(SIGPIPE, SIG_IGN);
    sigemptyset(&stop_signals_);
    sigaddset(&stop_signals_, SIGINT);
    sigaddset(&stop_signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals_, nullptr);  // threads inherit it
    watcher_ = std::thread([this] { Watch(); });
  }
  DaemonSignals(const DaemonSignals&) = delete;
  DaemonSignals& operator=(const DaemonSignals&) = delete;
  ~DaemonSignals() {
    closing_.store(true);
    watcher_.join();
  }

  // Names what start-up does now (in the line a stop signal prints).
  void Stage(std::string what) {
    std::lock_guard<std::mutex> l(mu_);
    stage_ = std::move(what);
  }

  // Prints `line` (the ready line) and from now on a stop signal is left to WaitForStop.
  void Ready(const nlohmann::json& line) {
    std::lock_guard<std::mutex> l(mu_);
    ready_ = true;
    net::PrintReadyLine(line);
  }

  // REQUIRES: Ready() was called. Returns once SIGINT or SIGTERM arrived.
  void WaitForStop() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return stopped_; });
  }

  // REQUIRES: Ready() was called. Returns true once SIGINT or SIGTERM arrived, false as soon as
  // `gone()` holds (checked every 100 ms; e.g. a coordinator that lost its leadership).
  template <typename Pred>
  bool WaitForStopOr(Pred gone) {
    std::unique_lock<std::mutex> l(mu_);
    while (!stopped_) {
      if (cv_.wait_for(l, std::chrono::milliseconds(100), [this] { return stopped_; })) break;
      l.unlock();
      const bool is_gone = gone();
      l.lock();
      if (is_gone && !stopped_) return false;
    }
    return true;
  }

 private:
  void Watch() {
    const timespec tick{0, 100 * 1000 * 1000};
    while (!closing_.load()) {
      const int sig = sigtimedwait(&stop_signals_, nullptr, &tick);
      if (sig < 0) continue;  // the tick (EAGAIN) or EINTR
      std::lock_guard<std::mutex> l(mu_);
      if (!ready_) {
        const std::string line = "wtx " + command_ + ": stopped by " +
                                 (sig == SIGINT ? "SIGINT" : "SIGTERM") + " during start-up (" +
                                 stage_ + ")\n";
        (void)!::write(STDERR_FILENO, line.data(), line.size());
        ::_exit(kExitOk);
      }
      stopped_ = true;
      cv_.notify_all();
      return;
    }
  }

  const std::string command_;
  sigset_t stop_signals_;
  std::atomic<bool> closing_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string stage_ GUARDED_BY(mu_) = "starting";
  bool ready_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace wtx::cli
