// MetricsRegistry, CheckMetricLabels and MetricsServer (wtx/metrics.h).
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <exception>

#include "src/metrics/metrics_hub.h"
#include "wtx/metrics.h"

namespace wtx {

std::shared_ptr<prometheus::Registry> MetricsRegistry() {
  return metrics::MetricsHub::Get().registry();
}

Status CheckMetricLabels(const MetricLabels& labels) {
  for (const auto& [key, value] : labels) {
    if (key != "replica" && key != "fleet") {
      return Status::InvalidArgument("metric label '" + key +
                                     "' is not one of replica, fleet (docs/observability.md)");
    }
    if (value.empty() || value.size() > 128) {
      return Status::InvalidArgument("metric label '" + key +
                                     "' must have a value of 1 to 128 "
                                     "characters, not " +
                                     std::to_string(value.size()));
    }
  }
  return Status::OK();
}

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port,
                             std::string url)
    : exposer_(std::move(exposer)), port_(port), url_(std::move(url)) {}

MetricsServer::~MetricsServer() = default;

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  const std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  const std::string port_text = colon == std::string::npos ? "" : listen.substr(colon + 1);
  bool port_ok = !port_text.empty() && port_text.size() <= 5;
  for (char c : port_text) port_ok = port_ok && c >= '0' && c <= '9';
  if (host.empty() || !port_ok || std::stoi(port_text) > 65535 ||
      listen.find_first_of(" ,\t\n") != std::string::npos) {
    return Status::InvalidArgument("metrics listen address '" + listen +
                                   "' is not HOST:PORT (port in [0, 65535])");
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // One serving thread: a scrape every few seconds needs no more.
    exposer = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    return Status::IOError("metrics: cannot listen on " + listen + ": " + e.what());
  }
  exposer->RegisterCollectable(MetricsRegistry());
  const auto ports = exposer->GetListeningPorts();
  if (ports.empty()) return Status::IOError("metrics: no port is listening for " + listen);
  const int port = ports.front();
  return std::unique_ptr<MetricsServer>(new MetricsServer(
      std::move(exposer), port, "http://" + host + ":" + std::to_string(port) + "/metrics"));
}

}  // namespace wtx
