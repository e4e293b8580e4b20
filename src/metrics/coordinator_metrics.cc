// CoordinatorMetrics (coordinator_metrics.h).
#include "src/metrics/coordinator_metrics.h"

#include "src/metrics/metrics_hub.h"

namespace wtx::metrics {

static Labels CoordinatorLabels(Labels extra) {
  extra["role"] = "coordinator";
  return extra;
}

CoordinatorMetrics::CoordinatorMetrics(Labels extra) : base_(CoordinatorLabels(std::move(extra))) {}

void CoordinatorMetrics::Phase(std::string_view phase, double seconds) {
  MetricsHub::Get().Observe(Series::kPhaseDuration, With("phase", phase), seconds);
}

void CoordinatorMetrics::Decided(std::string_view outcome, std::string_view code) {
  MetricsHub& hub = MetricsHub::Get();
  hub.Add(Series::kDecisions, With("outcome", outcome), 1);
  if (outcome == "aborted") hub.Add(Series::kAborts, With("code", code), 1);
}

void CoordinatorMetrics::DecisionLogOp(std::string_view op, double seconds) {
  MetricsHub::Get().Observe(Series::kDecisionLog, With("op", op), seconds);
}

void CoordinatorMetrics::LeaderChange() { MetricsHub::Get().Add(Series::kLeaderChanges, base_, 1); }

void CoordinatorMetrics::JournalSync(double seconds) {
  MetricsHub::Get().Observe(Series::kJournalSync, base_, seconds);
}

}  // namespace wtx::metrics
