// Env: the injectable environment of a participant or coordinator — its clock and the
// filesystem its journal lives on — so that tests can simulate time and faults (power loss,
// I/O errors) without touching the protocol code.
//
// Thread-safety: Clock implementations must be safe for concurrent NowMicros() calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace rocksdb {
class FileSystem;
}

namespace wtx {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMicros() const = 0;
  // Wall clock (microseconds since the Unix epoch). Never null; not owned.
  static Clock* Real();
};

// A clock that moves only when told to (deterministic tests).
class ManualClock : public Clock {
 public:
  explicit ManualClock(int64_t start_micros = 0) : now_(start_micros) {}
  int64_t NowMicros() const override { return now_.load(); }
  void Advance(int64_t micros) { now_ += micros; }

 private:
  std::atomic<int64_t> now_;
};

struct Env {
  Clock* clock = Clock::Real();
  // Filesystem of the journal; null means the default POSIX filesystem.
  std::shared_ptr<rocksdb::FileSystem> fs;
};

}  // namespace wtx
