// --metrics-listen and --metrics-label (metrics_flags.h).
#include "tools/wtx/metrics_flags.h"

namespace wtx::cli {

void AddMetricsFlags(CLI::App* cmd, MetricsFlags* flags) {
  cmd->add_option("--metrics-listen", flags->listen,
                  "Serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port; "
                  "the ready line says which as metrics_port)");
  cmd->add_option("--metrics-label", flags->labels,
                  "KEY=VALUE added to every metric series (KEY: replica or fleet); repeatable");
}

Result<MetricLabels> ParseMetricLabelFlags(const MetricsFlags& flags) {
  MetricLabels labels;
  for (const std::string& entry : flags.labels) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument("--metrics-label '" + entry + "' is not KEY=VALUE");
    }
    const std::string key = entry.substr(0, eq);
    if (labels.count(key)) {
      return Status::InvalidArgument("--metrics-label '" + key + "' is given twice");
    }
    labels[key] = entry.substr(eq + 1);
  }
  if (Status s = CheckMetricLabels(labels); !s.ok()) {
    return Status::InvalidArgument("--metrics-label: " + s.message());
  }
  return labels;
}

Result<std::unique_ptr<MetricsServer>> StartMetricsFlags(const MetricsFlags& flags) {
  if (flags.listen.empty()) return std::unique_ptr<MetricsServer>();
  auto server = MetricsServer::Start(flags.listen);
  if (!server.ok()) {
    return Status(server.status().code(), "--metrics-listen: " + server.status().message());
  }
  return server;
}

}  // namespace wtx::cli
