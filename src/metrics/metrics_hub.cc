// MetricsHub (metrics_hub.h) and the family table (metric_events.h).
#include "src/metrics/metrics_hub.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <exception>

namespace wtx::metrics {
namespace {

// Upper bounds base * 4^k, k = 0 .. n-1.
std::vector<double> Exponential(double base, int n) {
  std::vector<double> b;
  for (int k = 0; k < n; ++k, base *= 4) b.push_back(base);
  return b;
}

const std::vector<std::string> kCommonLabelNames = {"role", "rank", "replica", "fleet"};

std::vector<std::string> LabelNames(std::vector<std::string> extra) {
  std::vector<std::string> l = kCommonLabelNames;
  l.insert(l.end(), extra.begin(), extra.end());
  return l;
}

}  // namespace

const std::vector<MetricFamilyInfo>& MetricFamilies() {
  // 100 us .. 7 min: a chunk's write to a whole checkpoint's commit.
  static const std::vector<double> kPhase = Exponential(1e-4, 12);
  // 10 us .. 2.6 s: an fsync.
  static const std::vector<double> kSync = Exponential(1e-5, 10);
  static const std::vector<MetricFamilyInfo> table = {
      {"wtx_transactions_total",
       "Transactions a rank ended, by kind (full, partial, delta) and outcome (committed, noop, "
       "aborted).",
       "counter",
       LabelNames({"kind", "outcome"}),
       {}},
      {"wtx_aborts_total",
       "Aborted transactions by cause: every abort on a coordinator; on a rank, the aborts its "
       "own no vote caused, by the vote's first error code.",
       "counter",
       LabelNames({"code"}),
       {}},
      {"wtx_decisions_total",
       "Decisions a coordinator logged, by outcome.",
       "counter",
       LabelNames({"outcome"}),
       {}},
      {"wtx_bytes_written_total",
       "Live bytes a rank wrote or had landed inside transactions (writes, landings, patches).",
       "counter",
       LabelNames({}),
       {}},
      {"wtx_leader_changes_total",
       "Times a coordinator of this process became the leader of a shared decision log.",
       "counter",
       LabelNames({}),
       {}},
      {"wtx_phase_duration_seconds",
       "Duration of each phase of an update: on a rank begin, write, landed, derived, prepare, "
       "commit, restore, verify; on a coordinator vote (collecting every vote) and decision "
       "(logging it).",
       "histogram", LabelNames({"phase"}), kPhase},
      {"wtx_journal_sync_duration_seconds",
       "Duration of a synced journal write (BEGIN, PREPARED, DECISION).", "histogram",
       LabelNames({}), kSync},
      {"wtx_decision_log_duration_seconds",
       "Duration of a decision-log operation of a coordinator, by op (decide, list, end, "
       "leadership).",
       "histogram", LabelNames({"op"}), kPhase},
      {"wtx_coverage_ratio",
       "Fraction of the required elements the open transaction has written or landed (0 when "
       "none is open).",
       "gauge",
       LabelNames({}),
       {}},
      {"wtx_serving",
       "1 when the rank may serve (loaded, clean, committed, not in doubt).",
       "gauge",
       LabelNames({}),
       {}},
      {"wtx_dirty",
       "1 when the rank's live bytes may differ from its committed version.",
       "gauge",
       LabelNames({}),
       {}},
      {"wtx_held_info",
       "1 while the rank does not serve, labelled with why (not_loaded, never_committed, "
       "dirty, in_doubt, storage_moved, stale_derived, crashed, updating, held: an "
       "outside gate such as the fleet's staleness bound).",
       "gauge",
       LabelNames({"reason"}),
       {}},
      {"wtx_version_info",
       "1 for the version the rank last committed, labelled with it and the transaction's "
       "label.",
       "gauge",
       LabelNames({"version", "label"}),
       {}},
      {"wtx_transaction_start_timestamp_seconds",
       "Unix time the open transaction began (0 when none is open).",
       "gauge",
       LabelNames({}),
       {}},
      {"wtx_committed_step",
       "The step of the lineage the rank's committed version is (absent before one), labelled "
       "with the lineage.",
       "gauge",
       LabelNames({"lineage"}),
       {}},
  };
  return table;
}

struct MetricsHub::Families {
  std::vector<prometheus::Family<prometheus::Counter>*> counters;
  std::vector<prometheus::Family<prometheus::Gauge>*> gauges;
  std::vector<prometheus::Family<prometheus::Histogram>*> histograms;
  std::vector<std::vector<double>> buckets;
};

MetricsHub& MetricsHub::Get() {
  static MetricsHub* hub = new MetricsHub();  // never destroyed (see the header)
  return *hub;
}

MetricsHub::MetricsHub()
    : registry_(std::make_shared<prometheus::Registry>()), families_(new Families) {
  const auto& table = MetricFamilies();
  static_assert(kNumSeries == 15, "every Series has its row in MetricFamilies()");
  families_->counters.assign(table.size(), nullptr);
  families_->gauges.assign(table.size(), nullptr);
  families_->histograms.assign(table.size(), nullptr);
  families_->buckets.resize(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const MetricFamilyInfo& f = table[i];
    if (f.type == "counter") {
      families_->counters[i] =
          &prometheus::BuildCounter().Name(f.name).Help(f.help).Register(*registry_);
    } else if (f.type == "gauge") {
      families_->gauges[i] =
          &prometheus::BuildGauge().Name(f.name).Help(f.help).Register(*registry_);
    } else {
      families_->histograms[i] =
          &prometheus::BuildHistogram().Name(f.name).Help(f.help).Register(*registry_);
      families_->buckets[i] = f.buckets;
    }
  }
}

void MetricsHub::Add(Series s, const Labels& labels, double amount) {
  const int i = static_cast<int>(s);
  try {
    families_->counters.at(i)->Add(labels).Increment(amount);
  } catch (const std::exception&) {
    return;  // see the header: metrics never fail an update
  }
  Record(MetricEvent::Kind::kAdd, s, labels, amount);
}

void MetricsHub::Observe(Series s, const Labels& labels, double value) {
  const int i = static_cast<int>(s);
  try {
    families_->histograms.at(i)->Add(labels, families_->buckets[i]).Observe(value);
  } catch (const std::exception&) {
    return;
  }
  Record(MetricEvent::Kind::kObserve, s, labels, value);
}

void MetricsHub::Set(Series s, const Labels& labels, double value) {
  const int i = static_cast<int>(s);
  try {
    families_->gauges.at(i)->Add(labels).Set(value);
  } catch (const std::exception&) {
    return;
  }
  Record(MetricEvent::Kind::kSet, s, labels, value);
}

void MetricsHub::Remove(Series s, const Labels& labels) {
  const int i = static_cast<int>(s);
  try {
    auto* family = families_->gauges.at(i);
    if (!family->Has(labels)) return;
    family->Remove(&family->Add(labels));
  } catch (const std::exception&) {
    return;
  }
  Record(MetricEvent::Kind::kRemove, s, labels, 0);
}

void MetricsHub::EnableEvents(size_t capacity) {
  std::lock_guard<std::mutex> l(events_mu_);
  events_enabled_ = capacity > 0;
  events_capacity_ = capacity;
  if (!events_enabled_) events_.clear();
}

std::vector<MetricEvent> MetricsHub::DrainEvents(uint64_t* dropped) {
  std::lock_guard<std::mutex> l(events_mu_);
  std::vector<MetricEvent> out;
  out.swap(events_);
  if (dropped) *dropped = events_dropped_;
  events_dropped_ = 0;
  return out;
}

void MetricsHub::Record(MetricEvent::Kind kind, Series s, const Labels& labels, double value) {
  std::lock_guard<std::mutex> l(events_mu_);
  if (!events_enabled_) return;
  if (events_.size() >= events_capacity_) {
    ++events_dropped_;
    return;
  }
  events_.push_back(MetricEvent{kind, static_cast<int>(s), labels, value});
}

}  // namespace wtx::metrics
