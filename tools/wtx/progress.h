// Progress: one line on stderr that says how far a long command is (`wtx load`, `wtx verify`,
// `wtx check`, `wtx plan`): done of total (bytes or items), the rate, the time left.
//
// Drawn only when a person watches: stdout and stderr are terminals, TERM is not "dumb" and
// the command was not asked for --json (ProgressWanted); otherwise nothing is printed at all,
// so piped and JSON output stay exactly as they were. Redrawn at most every 100 ms; Finish()
// (or the destructor) erases the line before the command prints its result. No Debian C++
// library draws progress bars; this is the small part the CLI needs.
//
// Thread-safety: Add may be called from any thread; construction and Finish from one.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace wtx::cli {

// Whether a command should draw progress (see above); `json`: its --json flag.
bool ProgressWanted(bool json);

class Progress {
 public:
  enum class Unit { kBytes, kItems };
  // `what` names the work ("load", "verify"); `total` 0: unknown (no percentage, no time left).
  Progress(std::string what, int64_t total, Unit unit, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Add(int64_t n);
  // Sets done and total at once (a walk that reports where it is).
  void Set(int64_t done, int64_t total);
  // Erases the line (once); later Adds draw nothing.
  void Finish();

  // The line for `done` of `total` after `seconds` (for tests): "load  1.20 GiB / 3.40 GiB
  // 35%  512.0 MiB/s  4 s left".
  static std::string Line(const std::string& what, int64_t done, int64_t total, Unit unit,
                          double seconds);

 private:
  void DrawLocked(bool force);

  const std::string what_;
  int64_t total_;
  const Unit unit_;
  bool enabled_;
  std::mutex mu_;
  int64_t done_ = 0;
  size_t drawn_width_ = 0;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace wtx::cli
