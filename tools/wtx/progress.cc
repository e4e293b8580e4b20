// Progress (progress.h).
#include "tools/wtx/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace wtx::cli {
namespace {

std::string Amount(double v, Progress::Unit unit) {
  char buf[64];
  if (unit == Progress::Unit::kItems) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, kUnits[u]);
  return buf;
}

std::string Duration(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s) / 60,
                  static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%d h %02d min", static_cast<int>(s) / 3600,
                  static_cast<int>(s) % 3600 / 60);
  }
  return buf;
}

constexpr std::chrono::milliseconds kRedrawEvery{100};

}  // namespace

bool ProgressWanted(bool json) {
  if (json) return false;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return false;
  return isatty(STDOUT_FILENO) == 1 && isatty(STDERR_FILENO) == 1;
}

Progress::Progress(std::string what, int64_t total, Unit unit, bool enabled)
    : what_(std::move(what)),
      total_(total),
      unit_(unit),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  std::lock_guard<std::mutex> l(mu_);
  DrawLocked(/*force=*/true);
}

Progress::~Progress() { Finish(); }

std::string Progress::Line(const std::string& what, int64_t done, int64_t total, Unit unit,
                           double seconds) {
  std::string line = what + "  " + Amount(static_cast<double>(done), unit);
  if (total > 0) {
    line += " / " + Amount(static_cast<double>(total), unit);
    char pct[16];
    std::snprintf(pct, sizeof pct, "  %3.0f%%",
                  100.0 * static_cast<double>(done) / static_cast<double>(total));
    line += pct;
  }
  if (seconds > 0.05 && done > 0) {
    const double rate = static_cast<double>(done) / seconds;
    line += "  " + Amount(rate, unit) + "/s";
    if (total > done) {
      line += "  " + Duration(static_cast<double>(total - done) / rate) + " left";
    }
  }
  return line;
}

void Progress::Add(int64_t n) {
  std::lock_guard<std::mutex> l(mu_);
  done_ += n;
  DrawLocked(/*force=*/false);
}

void Progress::Set(int64_t done, int64_t total) {
  std::lock_guard<std::mutex> l(mu_);
  done_ = done;
  total_ = total;
  DrawLocked(/*force=*/false);
}

void Progress::DrawLocked(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < kRedrawEvery && done_ != total_) return;
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  std::string line = Line(what_, done_, total_, unit_, seconds);
  const size_t width = line.size();
  if (width < drawn_width_) line.append(drawn_width_ - width, ' ');
  drawn_width_ = width;
  std::fprintf(stderr, "\r%s", line.c_str());
  std::fflush(stderr);
}

void Progress::Finish() {
  std::lock_guard<std::mutex> l(mu_);
  if (!enabled_) return;
  enabled_ = false;
  // Erase the line: the command's own output starts at column 0.
  std::fprintf(stderr, "\r%s\r", std::string(drawn_width_, ' ').c_str());
  std::fflush(stderr);
}

}  // namespace wtx::cli
