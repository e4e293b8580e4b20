// CoordinatorMetrics: the series of one coordinator (docs/observability.md), labelled
// role="coordinator" and the coordinator's extra labels (replica, fleet).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <string_view>

#include "src/metrics/metric_events.h"
#include "src/metrics/seconds_since.h"

namespace wtx::metrics {

class CoordinatorMetrics {
 public:
  // REQUIRES: every key of `extra` is a valid Prometheus label name other than role and rank.
  explicit CoordinatorMetrics(Labels extra);

  // "vote" (collecting every vote) or "decision" (logging it).
  void Phase(std::string_view phase, double seconds);
  // A decision this coordinator logged: outcome "committed", "noop" or "aborted"; an abort's
  // cause `code` (an E_... code, "sender_abort" or "presumed_abort").
  void Decided(std::string_view outcome, std::string_view code);
  // One decision-log operation: "decide", "list", "end", "leadership".
  void DecisionLogOp(std::string_view op, double seconds);
  void LeaderChange();
  void JournalSync(double seconds);

 private:
  Labels With(const char* key, std::string_view value) const {
    return WithLabel(base_, key, value);
  }
  const Labels base_;
};

}  // namespace wtx::metrics
