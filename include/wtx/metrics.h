// Metrics: the Prometheus series of every wtx participant and coordinator in this process
// (docs/observability.md lists them: transactions and aborts, phase durations, bytes written,
// coverage, serving/dirty/held, the committed version, journal syncs, the decision log,
// leader changes).
//
// Contract:
//  * Every Participant and Coordinator records into one process-wide registry, created on
//    first use and never destroyed. Series are labelled role ("rank" or "coordinator"), rank
//    (participants), and replica/fleet where ParticipantOptions/CoordinatorOptions::
//    metric_labels set them. Recording never fails or slows an update beyond a few
//    atomic operations per call; a rank's gauges are published after each call that may
//    change them, and removed when its participant is destroyed.
//  * An embedding program exposes them by registering MetricsRegistry() (a
//    prometheus::Collectable) with its own prometheus::Exposer, or with MetricsServer. The
//    Python module mirrors them into prometheus_client's default registry (python/wtx/
//    metrics.py).
//
// Thread-safety: MetricsRegistry() may be called and collected from any thread. A
// MetricsServer serves from its own threads; Start and the destructor must not race.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "wtx/status.h"

namespace prometheus {
class Registry;
class Exposer;
}  // namespace prometheus

namespace wtx {

// Extra labels of one participant's or coordinator's series: the keys "replica" and "fleet"
// only (anything else is refused when the participant or coordinator opens, naming the key).
using MetricLabels = std::map<std::string, std::string>;

// Checks `labels` as described above; kInvalidArgument naming the key or value otherwise.
Status CheckMetricLabels(const MetricLabels& labels);

// The registry of every wtx series of this process (prometheus-cpp: include
// <prometheus/registry.h> to use it).
std::shared_ptr<prometheus::Registry> MetricsRegistry();

// Serves MetricsRegistry() over HTTP at http://HOST:PORT/metrics (prometheus-cpp's exposer),
// as `wtx rank` and `wtx coordinator --metrics-listen` do.
class MetricsServer {
 public:
  // `listen` is HOST:PORT, an IPv6 host in brackets; port 0 picks a free port (see port()).
  // kInvalidArgument naming `listen` when it is malformed; kIOError when it cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& listen);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // http://HOST:PORT/metrics
  const std::string& url() const { return url_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port, std::string url);
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
  std::string url_;
};

}  // namespace wtx
