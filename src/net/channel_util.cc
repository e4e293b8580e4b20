// The helpers channel.h declares beside the connection: log lines (rate-limited for what a peer
// can provoke), secret files, and HOST:PORT.
//
// Thread-safety: all safe from any thread (LogLineLimited's buckets are under a mutex).
#include "src/net/channel.h"

#include <map>

#include "src/util/file_util.h"
#include "wtx/logger.h"

namespace wtx::net {

void LogLine(const std::string& tag, const std::string& message) {
  Log(LogLevel::kInfo, tag, message);  // include/wtx/logger.h (default: stderr)
}

void LogLineLimited(const std::string& tag, const std::string& kind, const std::string& message) {
  struct Bucket {
    std::chrono::steady_clock::time_point window;
    int lines = 0;
    uint64_t dropped = 0;
  };
  static std::mutex mu;
  static std::map<std::string, Bucket> buckets;
  std::string line = message;
  {
    std::lock_guard<std::mutex> l(mu);
    if (buckets.size() > 1024) buckets.clear();  // bounded: kinds are few, tags per process
    Bucket& b = buckets[tag + "\n" + kind];
    const auto now = std::chrono::steady_clock::now();
    if (now - b.window >= std::chrono::seconds(1)) {
      b.window = now;
      b.lines = 0;
    }
    if (b.lines >= kLogBurst) {
      ++b.dropped;
      return;
    }
    ++b.lines;
    if (b.dropped > 0) {
      line += " (" + std::to_string(b.dropped) + " similar lines suppressed)";
      b.dropped = 0;
    }
  }
  LogLine(tag, line);
}

Result<std::string> ReadSecretFile(const std::string& path, std::string_view what) {
  ReadFileOptions o;
  o.what = what;
  o.max_bytes = kMaxSecretFileBytes;
  o.private_only = true;  // as ssh refuses such keys
  WTX_ASSIGN_OR_RETURN(s, ReadRegularFile(path, o));
  const std::string name = std::string(what) + " '" + path + "'";
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return Status::InvalidArgument(name + ": holds only white space");
  s = s.substr(b, s.find_last_not_of(ws) - b + 1);
  if (s.size() < kMinSecretBytes) {
    return Status::InvalidArgument(name + ": holds a " + std::to_string(s.size()) +
                                   "-byte secret; at least " + std::to_string(kMinSecretBytes) +
                                   " bytes are required (e.g. openssl rand -hex 32)");
  }
  return s;
}

Result<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& s) {
  const size_t c = s.rfind(':');
  if (c == std::string::npos || c == 0 || c + 1 == s.size()) {
    return Status::InvalidArgument("expected HOST:PORT, got '" + s + "'");
  }
  const std::string port = s.substr(c + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoul(port) > 65535) {
    return Status::InvalidArgument("bad port in '" + s + "'");
  }
  return std::make_pair(s.substr(0, c), static_cast<uint16_t>(std::stoul(port)));
}

}  // namespace wtx::net
