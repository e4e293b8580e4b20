"""wtx's Prometheus metrics in prometheus_client (docs/observability.md).

Importing ``wtx`` installs them when ``prometheus_client`` is importable; there is nothing to
call. Every series the C++ library records (every participant and coordinator of this process:
transactions and aborts, phase durations, bytes written, coverage, serving/dirty/held, the
committed version, journal syncs, the decision log, leader changes) then shows wherever the
process's default registry is served, as vLLM's and SGLang's own ``/metrics`` endpoints do:

* one process (``PROMETHEUS_MULTIPROC_DIR`` unset when prometheus_client was imported): a
  collector registered with ``prometheus_client.REGISTRY`` reads the library's registry at
  each scrape (exact, nothing copied between scrapes);
* prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set, as SGLang sets it
  with ``--enable-metrics`` and vLLM with more than one API server): the engines serve
  ``/metrics`` from another process, which reads only the files each process writes there. wtx
  then mirrors every change into prometheus_client Counters, Gauges and Histograms of its own
  (a thread drains the library's event log every ``interval`` seconds; ``flush()`` drains now).
  Gauges use ``multiprocess_mode="mostrecent"`` where prometheus_client has it, else ``"max"``;
  a gauge series that goes away in the library (an old version, a reason no longer true) is set
  to 0, since a multiprocess file cannot drop it, so query info gauges with ``== 1``. At exit the
  process's gauges are set to 0: a rank that is gone serves nothing.

Every series carries ``role`` ("rank" or "coordinator"); ranks carry ``rank``; ``replica`` and
``fleet`` where ``Participant.open``/``Coordinator.open`` got ``metric_labels``. In
multiprocess mode every label of a family is present, empty where unset.
"""

import atexit
import logging
import threading
from typing import Any, Dict, List, Optional

from . import _wtx

__all__ = ["flush", "install", "installed_mode"]

_log = logging.getLogger("wtx.metrics")
_lock = threading.Lock()
_mode: Optional[str] = None  # None, "collector" or "multiprocess"
_mirror: Optional["_Mirror"] = None

# Events the library keeps between two drains of the multiprocess mirror.
EVENT_CAPACITY = 1 << 16


def installed_mode() -> Optional[str]:
    """How the metrics reach prometheus_client: ``"collector"`` (one process),
    ``"multiprocess"`` (mirrored into PROMETHEUS_MULTIPROC_DIR), or None (not installed:
    prometheus_client is not importable, or install() was not called)."""
    return _mode


def _multiprocess(prometheus_client: Any) -> bool:
    from prometheus_client import values
    return values.ValueClass is not values.MutexValue


class _Collector:
    """The library's registry as prometheus_client families, read at each scrape."""

    def __init__(self) -> None:
        self.docs = {f["name"]: f["help"] for f in _wtx.metric_families()}

    def describe(self) -> List[Any]:
        return []  # families appear as their first series does

    def collect(self) -> Any:
        from prometheus_client.metrics_core import Metric
        from prometheus_client.utils import floatToGoString

        for fam in _wtx.metrics_collect():
            name = fam["name"]
            kind = fam["type"]
            base = name[:-len("_total")] if kind == "counter" and name.endswith("_total") else name
            metric = Metric(base, self.docs.get(name, ""), kind)
            for s in fam["samples"]:
                labels = dict(s["labels"])
                if kind == "histogram":
                    for le, count in s["buckets"]:
                        metric.add_sample(base + "_bucket", dict(labels, le=floatToGoString(le)),
                                          float(count))
                    metric.add_sample(base + "_count", labels, float(s["count"]))
                    metric.add_sample(base + "_sum", labels, float(s["sum"]))
                elif kind == "counter":
                    metric.add_sample(base + "_total", labels, float(s["value"]))
                else:
                    metric.add_sample(base, labels, float(s["value"]))
            yield metric


class _Mirror:
    """prometheus_client metrics fed from the library's event log (multiprocess mode)."""

    def __init__(self, interval: float) -> None:
        import prometheus_client as pc

        gauge_mode = "mostrecent" if "mostrecent" in pc.Gauge._MULTIPROC_MODES else "max"
        self.families = _wtx.metric_families()
        self.metrics: List[Any] = []
        for f in self.families:
            labels = list(f["label_names"])
            m: Any
            if f["type"] == "counter":
                m = pc.Counter(f["name"], f["help"], labels)
            elif f["type"] == "gauge":
                m = pc.Gauge(f["name"], f["help"], labels, multiprocess_mode=gauge_mode)
            else:
                m = pc.Histogram(f["name"], f["help"], labels, buckets=list(f["buckets"]))
            self.metrics.append(m)
        self.gauges_set: Dict[tuple, Any] = {}
        self.drain_lock = threading.Lock()
        self.stop = threading.Event()
        _wtx.metrics_enable_events(EVENT_CAPACITY)
        self.thread = threading.Thread(target=self._run, args=(interval,), name="wtx-metrics",
                                       daemon=True)
        self.thread.start()

    def _child(self, index: int, labels: Dict[str, str]) -> Any:
        names = self.families[index]["label_names"]
        return self.metrics[index].labels(*[labels.get(n, "") for n in names])

    def drain(self) -> None:
        with self.drain_lock:
            events, dropped = _wtx.metrics_drain_events()
            if dropped:
                _log.warning("wtx.metrics: %d metric events were dropped (more than %d between "
                             "two drains); counters are low by them", dropped, EVENT_CAPACITY)
            for kind, index, labels, value in events:
                child = self._child(index, labels)
                if kind == "add":
                    child.inc(value)
                elif kind == "observe":
                    child.observe(value)
                elif kind == "set":
                    child.set(value)
                    self.gauges_set[(index, tuple(sorted(labels.items())))] = child
                else:  # "remove": a multiprocess file keeps the series; 0 says it is not so
                    child.set(0)

    def _run(self, interval: float) -> None:
        while not self.stop.wait(interval):
            try:
                self.drain()
            except Exception:  # never let a metrics failure end the thread silently
                _log.exception("wtx.metrics: draining the event log failed")

    def close(self) -> None:
        self.stop.set()
        self.drain()
        for child in self.gauges_set.values():
            child.set(0)


def install(interval: float = 0.5) -> Optional[str]:
    """Makes wtx's metrics visible to prometheus_client (``import wtx`` does it once).
    Returns the mode (see installed_mode()), or None when prometheus_client is not importable.
    A second call changes nothing. ``interval``: seconds between two drains of the
    multiprocess mirror."""
    global _mode, _mirror
    with _lock:
        if _mode is not None:
            return _mode
        try:
            import prometheus_client
        except ImportError:
            return None
        if _multiprocess(prometheus_client):
            _mirror = _Mirror(interval)
            atexit.register(_mirror.close)
            _mode = "multiprocess"
        else:
            prometheus_client.REGISTRY.register(_Collector())  # type: ignore[arg-type]
            _mode = "collector"
        return _mode


def flush() -> None:
    """Multiprocess mode: mirrors every change recorded so far into the multiprocess files now
    (the mirror's thread does it every ``interval`` seconds). Otherwise nothing to do."""
    if _mirror is not None:
        _mirror.drain()
