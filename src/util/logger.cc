#include "wtx/logger.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

#include "src/util/thread_annotations.h"

namespace wtx {
namespace {

class StderrLoggerImpl : public Logger {
 public:
  void Log(LogLevel level, std::string_view component, std::string_view message) override {
    // Every line carries its UTC time to the millisecond: a daemon's log must say when a
    // failover, a deposition or a handshake failure happened.
    const auto now = std::chrono::system_clock::now();
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    std::tm utc{};
    gmtime_r(&secs, &utc);
    char stamp[40];
    const size_t n = std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
    std::snprintf(stamp + n, sizeof(stamp) - n, ".%03dZ ", static_cast<int>(ms));
    std::string line = std::string(stamp) + "wtx[" + std::string(component) + "]: ";
    if (level == LogLevel::kWarning || level == LogLevel::kError) {
      line += std::string(LogLevelName(level)) + ": ";
    }
    line.append(message);
    line += '\n';
    std::lock_guard<std::mutex> l(mu_);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  }

 private:
  std::mutex mu_;  // keeps whole lines together on stderr; guards no member
};

struct LoggerSlot {
  std::mutex mu;
  std::shared_ptr<Logger> logger GUARDED_BY(mu);
};

LoggerSlot& Slot() {
  static LoggerSlot* slot = new LoggerSlot();  // never destroyed: logging works during exit
  return *slot;
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

std::shared_ptr<Logger> StderrLogger() {
  static std::shared_ptr<Logger>* logger = new std::shared_ptr<Logger>(new StderrLoggerImpl());
  return *logger;
}

void SetLogger(std::shared_ptr<Logger> logger) {
  LoggerSlot& s = Slot();
  std::lock_guard<std::mutex> l(s.mu);
  s.logger = std::move(logger);
}

void Log(LogLevel level, std::string_view component, std::string_view message) {
  std::shared_ptr<Logger> logger;
  {
    LoggerSlot& s = Slot();
    std::lock_guard<std::mutex> l(s.mu);
    logger = s.logger;
  }
  if (!logger) logger = StderrLogger();
  logger->Log(level, component, message);
}

}  // namespace wtx
