// What a binding needs to mirror wtx's series into another metrics library (the Python
// module's prometheus_client, whose multiprocess mode scrapes files written by each process):
// the families, described once, and a log of every change since the last drain.
//
// Each family lists every label its series may carry (MetricFamilyInfo::label_names); a series
// carries a subset (a coordinator's has no `rank`). The log is off until EnableEvents; it keeps
// at most `capacity` events and counts the ones it had to drop.
//
// Thread-safety: the table is immutable; MetricsHub serializes the log.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace wtx::metrics {

using Labels = std::map<std::string, std::string>;

// `base` with `key` set to `value`.
inline Labels WithLabel(Labels base, const std::string& key, std::string_view value) {
  base[key] = std::string(value);
  return base;
}

struct MetricFamilyInfo {
  std::string name;  // e.g. "wtx_transactions_total"
  std::string help;
  std::string type;  // "counter", "gauge" or "histogram"
  std::vector<std::string> label_names;
  std::vector<double> buckets;  // histograms: upper bounds, increasing (+Inf implied)
};

// Indexed by static_cast<int>(Series) (metrics_hub.h).
const std::vector<MetricFamilyInfo>& MetricFamilies();

struct MetricEvent {
  enum class Kind { kAdd, kObserve, kSet, kRemove };
  Kind kind = Kind::kAdd;
  int family = 0;  // index into MetricFamilies()
  Labels labels;
  double value = 0;
};

}  // namespace wtx::metrics
