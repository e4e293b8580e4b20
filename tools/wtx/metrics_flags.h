// --metrics-listen and --metrics-label, shared by `wtx rank` and `wtx coordinator`
// (docs/observability.md): one place that declares them, parses the labels and starts the scrape
// endpoint.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "wtx/metrics.h"

namespace wtx::cli {

struct MetricsFlags {
  std::string listen;               // empty: no endpoint
  std::vector<std::string> labels;  // KEY=VALUE, KEY in replica, fleet
};

// Declares --metrics-listen HOST:PORT and --metrics-label KEY=VALUE (repeatable).
void AddMetricsFlags(CLI::App* cmd, MetricsFlags* flags);

// The labels of --metrics-label; kInvalidArgument naming the flag and the bad entry.
Result<MetricLabels> ParseMetricLabelFlags(const MetricsFlags& flags);

// The endpoint of --metrics-listen (null when not given); errors name the flag.
Result<std::unique_ptr<MetricsServer>> StartMetricsFlags(const MetricsFlags& flags);

}  // namespace wtx::cli
