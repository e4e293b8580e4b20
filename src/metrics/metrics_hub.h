// MetricsHub: the one place every wtx Prometheus series of this process is recorded (the
// families of docs/observability.md, in wtx::MetricsRegistry()), and, for bindings whose scrape
// happens in another process, an optional log of every change (metric_events.h).
//
// The families are fixed (Series); each call names one and the labels of the series. A failure
// inside prometheus-cpp (an invalid label name) is dropped: metrics never fail an update.
//
// Thread-safety: every method may be called from any thread; series of one family are
// serialized by prometheus-cpp, the event log by its own mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/metrics/metric_events.h"
#include "src/util/thread_annotations.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace wtx::metrics {

enum class Series {
  kTransactions,      // counter wtx_transactions_total
  kAborts,            // counter wtx_aborts_total
  kDecisions,         // counter wtx_decisions_total
  kBytesWritten,      // counter wtx_bytes_written_total
  kLeaderChanges,     // counter wtx_leader_changes_total
  kPhaseDuration,     // histogram wtx_phase_duration_seconds
  kJournalSync,       // histogram wtx_journal_sync_duration_seconds
  kDecisionLog,       // histogram wtx_decision_log_duration_seconds
  kCoverage,          // gauge wtx_coverage_ratio
  kServing,           // gauge wtx_serving
  kDirty,             // gauge wtx_dirty
  kHeld,              // gauge wtx_held_info
  kVersion,           // gauge wtx_version_info
  kTransactionStart,  // gauge wtx_transaction_start_timestamp_seconds
  kCommittedStep,     // gauge wtx_committed_step
};
inline constexpr int kNumSeries = 15;

class MetricsHub {
 public:
  // The process's hub (created on first use, never destroyed: series outlive every
  // participant, and a scrape may come during exit).
  static MetricsHub& Get();

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  void Add(Series s, const Labels& labels, double amount);     // counters
  void Observe(Series s, const Labels& labels, double value);  // histograms
  void Set(Series s, const Labels& labels, double value);      // gauges
  // Removes a gauge's series (an info gauge whose value moved on). No-op if absent.
  void Remove(Series s, const Labels& labels);

  // The event log (metric_events.h).
  void EnableEvents(size_t capacity) EXCLUDES(events_mu_);
  std::vector<MetricEvent> DrainEvents(uint64_t* dropped) EXCLUDES(events_mu_);

 private:
  MetricsHub();
  void Record(MetricEvent::Kind kind, Series s, const Labels& labels, double value)
      EXCLUDES(events_mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  struct Families;
  std::unique_ptr<Families> families_;

  std::mutex events_mu_;
  bool events_enabled_ GUARDED_BY(events_mu_) = false;
  size_t events_capacity_ GUARDED_BY(events_mu_) = 0;
  uint64_t events_dropped_ GUARDED_BY(events_mu_) = 0;
  std::vector<MetricEvent> events_ GUARDED_BY(events_mu_);
};

}  // namespace wtx::metrics
