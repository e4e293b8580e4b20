// RankMetrics: the series of one participant (docs/observability.md), labelled role="rank",
// rank=N and the participant's extra labels (replica, fleet).
//
// Counters and histograms are recorded as things happen; the gauges are published from a
// snapshot of the participant's state after each call that may change it (Publish applies only
// what changed). Participants with the same labels in one process share their series; the
// gauges go when the last of them is destroyed.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "src/metrics/metric_events.h"
#include "src/metrics/seconds_since.h"
#include "src/util/thread_annotations.h"

namespace wtx::metrics {

enum class RankPhase { kBegin, kWrite, kLanded, kDerived, kPrepare, kCommit, kRestore, kVerify };
std::string_view RankPhaseName(RankPhase p);

// What the gauges show of one rank.
struct RankGauges {
  bool serving = false;
  bool dirty = false;
  std::string held_reason;  // empty when serving
  std::optional<std::string> version;
  std::string label;            // of the committed version: the transaction that committed it
  double coverage = 0;          // of the open transaction, in [0, 1]
  double tx_start_seconds = 0;  // Unix time the open transaction began; 0: none
  std::optional<int64_t> step;  // of the committed version, in `lineage`
  std::string lineage;
  bool operator==(const RankGauges&) const = default;
};

class RankMetrics {
 public:
  // REQUIRES: every key of `extra` is a valid Prometheus label name other than role and rank.
  RankMetrics(int rank, Labels extra);
  ~RankMetrics();
  RankMetrics(const RankMetrics&) = delete;
  RankMetrics& operator=(const RankMetrics&) = delete;

  void Phase(RankPhase p, double seconds);
  void BytesWritten(uint64_t bytes);
  // A transaction ended on this rank: kind "full"/"partial"/"delta", outcome
  // "committed"/"noop"/"aborted".
  void Ended(std::string_view kind, std::string_view outcome);
  // This rank's no vote caused an abort; `code` is the vote's first error code (E_...).
  void CausedAbort(std::string_view code);
  void JournalSync(double seconds);
  void Publish(const RankGauges& g) EXCLUDES(mu_);

 private:
  Labels With(const char* key, std::string_view value) const {
    return WithLabel(base_, key, value);
  }
  // wtx_version_info's labels for `version` committed by `label`.
  Labels VersionLabels(const std::string& version, const std::string& label) const {
    return WithLabel(With("version", version), "label", label);
  }
  void RemoveGauges() REQUIRES(mu_);

  const Labels base_;
  std::mutex mu_;
  bool published_ GUARDED_BY(mu_) = false;
  RankGauges last_ GUARDED_BY(mu_);
};

// Observes the time from construction to destruction as one phase of `metrics` (if not null).
class PhaseTimer {
 public:
  PhaseTimer(RankMetrics* metrics, RankPhase phase)
      : metrics_(metrics), phase_(phase), t0_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() {
    if (metrics_ == nullptr) return;
    metrics_->Phase(phase_, SecondsSince(t0_));
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  RankMetrics* metrics_;
  RankPhase phase_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace wtx::metrics
