// wtx._wtx metrics (docs/observability.md): the families, a structured collection of the process's
// registry (wtx.metrics turns it into prometheus_client families: no exposition format is
// written here), and the event log wtx.metrics mirrors into prometheus_client's multiprocess
// files. Also the metric_labels argument of Participant.open and Coordinator.open.
#include <prometheus/registry.h>

#include "py_binding.h"
#include "src/metrics/metrics_hub.h"
#include "wtx/metrics.h"

namespace wtx::python {
namespace {

py::list Families() {
  py::list out;
  for (const auto& f : metrics::MetricFamilies()) {
    py::dict d;
    d["name"] = f.name;
    d["help"] = f.help;
    d["type"] = f.type;
    d["label_names"] = f.label_names;
    d["buckets"] = f.buckets;
    out.append(d);
  }
  return out;
}

py::dict Labels(const std::vector<prometheus::ClientMetric::Label>& labels) {
  py::dict d;
  for (const auto& l : labels) d[py::str(l.name)] = l.value;
  return d;
}

// Every family of the registry: {"name", "type", "samples": [{"labels", "value"} or, for
// histograms, {"labels", "buckets": [(le, cumulative count)], "count", "sum"}]}.
py::list Collect() {
  std::vector<prometheus::MetricFamily> families;
  {
    py::gil_scoped_release release;
    families = MetricsRegistry()->Collect();
  }
  py::list out;
  for (const auto& f : families) {
    py::dict fam;
    fam["name"] = f.name;
    py::list samples;
    for (const auto& m : f.metric) {
      py::dict s;
      s["labels"] = Labels(m.label);
      switch (f.type) {
        case prometheus::MetricType::Counter:
          fam["type"] = "counter";
          s["value"] = m.counter.value;
          break;
        case prometheus::MetricType::Gauge:
          fam["type"] = "gauge";
          s["value"] = m.gauge.value;
          break;
        case prometheus::MetricType::Histogram: {
          fam["type"] = "histogram";
          py::list buckets;
          for (const auto& b : m.histogram.bucket) {
            buckets.append(py::make_tuple(b.upper_bound, b.cumulative_count));
          }
          s["buckets"] = buckets;
          s["count"] = m.histogram.sample_count;
          s["sum"] = m.histogram.sample_sum;
          break;
        }
        default:
          continue;
      }
      samples.append(s);
    }
    if (!fam.contains("type")) continue;  // a family with no series yet
    fam["samples"] = samples;
    out.append(fam);
  }
  return out;
}

py::tuple Drain() {
  uint64_t dropped = 0;
  std::vector<metrics::MetricEvent> events = metrics::MetricsHub::Get().DrainEvents(&dropped);
  static const char* kKinds[] = {"add", "observe", "set", "remove"};
  py::list out;
  for (const auto& e : events) {
    py::dict labels;
    for (const auto& [k, v] : e.labels) labels[py::str(k)] = v;
    out.append(py::make_tuple(kKinds[static_cast<int>(e.kind)], e.family, labels, e.value));
  }
  return py::make_tuple(out, dropped);
}

}  // namespace

MetricLabels MetricLabelsArg(const std::optional<std::map<std::string, std::string>>& labels) {
  MetricLabels out = labels.value_or(std::map<std::string, std::string>{});
  if (Status s = CheckMetricLabels(out); !s.ok()) {
    Raise(Status::InvalidArgument("metric_labels: " + s.message()));
  }
  return out;
}

void DefineMetrics(py::module_& m) {
  m.def("metric_families", &Families,
        "The wtx metric families (docs/observability.md): name, help, type, label_names, buckets.");
  m.def("metrics_collect", &Collect,
        "Every wtx series of this process, structured (wtx.metrics builds prometheus_client "
        "families from it).");
  m.def(
      "metrics_enable_events",
      [](int64_t capacity) {
        if (capacity < 0 || capacity > (int64_t{1} << 24)) {
          Raise(Status::InvalidArgument("metrics_enable_events: capacity " +
                                        std::to_string(capacity) + " is not in [0, 2^24]"));
        }
        metrics::MetricsHub::Get().EnableEvents(static_cast<size_t>(capacity));
      },
      py::arg("capacity"),
      "Logs every change of a wtx series (at most `capacity` until drained; 0: off).");
  m.def("metrics_drain_events", &Drain,
        "(events, dropped): each event (kind 'add'|'observe'|'set'|'remove', family index, "
        "labels, value) since the last drain, and how many the full log dropped.");
}

}  // namespace wtx::python
