// Logger: where the library's diagnostic lines go (connection events of the TCP transport and
// rank agents, retries, handshake failures). The default writes "TIME wtx[COMPONENT]: MESSAGE"
// lines (TIME: UTC, ms) to stderr; an engine installs its own to route them into its logging. The
// library never writes to stdout/stderr itself; errors are returned as Status, never only logged.
//
// Thread-safety: SetLogger and Log are safe to call concurrently from any thread; a Logger's
// Log may be called from several library threads at once (the default serializes its lines).
#pragma once

#include <memory>
#include <string_view>

namespace wtx {

enum class LogLevel { kDebug, kInfo, kWarning, kError };
std::string_view LogLevelName(LogLevel level);

class Logger {
 public:
  virtual ~Logger() = default;
  // `component`: who logs ("coordinator", "rank-3", ...). Must not call SetLogger.
  virtual void Log(LogLevel level, std::string_view component, std::string_view message) = 0;
};

// The logger writing to stderr (the default).
std::shared_ptr<Logger> StderrLogger();
// Replaces the process-wide logger; null restores StderrLogger(). Lines being logged
// concurrently may still go to the previous logger, which is kept alive until they are done.
void SetLogger(std::shared_ptr<Logger> logger);
// Logs through the current logger.
void Log(LogLevel level, std::string_view component, std::string_view message);

}  // namespace wtx
