"""A real scrape (issue 52): Prometheus (the Debian server) scrapes a `wtx coordinator` and two
`wtx rank` daemons through a committed and an aborted update, and the series docs/observability.md
lists have, in Prometheus's own query API, the values those updates imply.

Real processes only: the daemons serve their metrics with --metrics-listen (prometheus-cpp's
exposer); Prometheus runs on a loopback port with a scrape interval of 1 s and its TSDB in the
test's temporary folder. $WTX_BIN names the build tree's wtx; $WTX_PROMETHEUS the server
(default /usr/bin/prometheus, installed by scripts/setup.sh).
"""
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "etcd"))
from wtx_procs import MANIFEST, Run, WTX_BIN, begin_req, free_port, status_code, wait_for  # noqa: E402

PROMETHEUS = os.environ.get("WTX_PROMETHEUS", "/usr/bin/prometheus")
RANKS = 2
# Every byte of tests/conformance/models/tiny-manifest.json (wtx_procs.MANIFEST): what a full
# write of every parameter counts.
def _manifest_bytes():
    size = {"bf16": 2, "f16": 2, "f32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1, "i32": 4, "i64": 8}
    with open(MANIFEST) as f:
        params = json.load(f)["params"]
    total = 0
    for p in params:
        n = 1
        for d in p["shape"]:
            n *= d
        total += n * size[p["dtype"]]
    return total


MANIFEST_BYTES = _manifest_bytes()


@pytest.fixture
def run(tmp_path):
    assert os.access(WTX_BIN, os.X_OK), "no wtx binary at %s (set WTX_BIN)" % WTX_BIN
    with Run(tmp_path) as r:
        yield r


class Prometheus:
    """The Prometheus server scraping `targets` (HOST:PORT each) every second."""

    def __init__(self, workdir, targets):
        assert os.access(PROMETHEUS, os.X_OK), (
            "no Prometheus server at %s (scripts/setup.sh installs Debian's prometheus)" %
            PROMETHEUS)
        self.port = free_port()
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: wtx\n    static_configs:\n"
                    "      - targets: [%s]\n" % ", ".join("'%s'" % t for t in targets))
        self.log = open(os.path.join(workdir, "prometheus.log"), "wb")
        self.popen = subprocess.Popen(
            [PROMETHEUS, "--config.file", config, "--storage.tsdb.path",
             os.path.join(workdir, "tsdb"), "--web.listen-address", "127.0.0.1:%d" % self.port,
             "--log.level", "warn"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        assert wait_for(self._ready, 60, 0.2), "Prometheus did not become ready:\n" + self.tail()

    def _ready(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port,
                                        timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def tail(self):
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read()[-3000:].decode(errors="replace")

    def query(self, promql):
        """The instant vector of `promql` as {frozenset(labels without __name__, job,
        instance): value}."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (
            self.port, urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=10) as r:
            answer = json.load(r)
        assert answer["status"] == "success", answer
        out = {}
        for sample in answer["data"]["result"]:
            labels = {k: v for k, v in sample["metric"].items()
                      if k not in ("__name__", "job", "instance")}
            out[frozenset(labels.items())] = float(sample["value"][1])
        return out

    def targets_up(self, n):
        return sum(self.query("count(up == 1)").values()) == n

    def close(self):
        self.popen.terminate()
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.log.close()


def one(result, **labels):
    """The value of the one series of `result` carrying `labels` (others may differ)."""
    hits = [v for k, v in result.items() if set(labels.items()) <= set(k)]
    assert len(hits) == 1, "want one series with %s, got %s" % (labels, result)
    return hits[0]


def settle(prom, checks, timeout=60):
    """Waits until every (promql, check, what) of `checks` holds at once (each target is
    scraped every second); fails naming each that does not, with its last answer."""
    failing = []

    def probe():
        failing.clear()
        for promql, check, what in checks:
            answer = prom.query(promql)
            try:
                ok = check(answer)
            except AssertionError:
                ok = False
            if not ok:
                failing.append("%s: %s gives %s" % (what, promql, answer))
        return not failing
    assert wait_for(probe, timeout, 0.5), "\n".join(failing)


def eventually(prom, promql, check, what, timeout=60):
    """Waits until check(result of promql) holds (a scrape every second); fails naming what
    was expected and the last answer."""
    last = {}

    def probe():
        nonlocal last
        last = prom.query(promql)
        try:
            return check(last)
        except AssertionError:
            return False
    assert wait_for(probe, timeout, 0.5), "%s: %s gives %s" % (what, promql, last)


def test_prometheus_scrapes_committed_and_aborted_updates(run, tmp_path):
    cport = free_port()
    coordinator = run.coordinator(
        "a", cport, ranks=RANKS,
        extra=["--metrics-listen", "127.0.0.1:0", "--metrics-label", "replica=r0",
               "--metrics-label", "fleet=policy"])
    ranks = [run.rank(r, [cport], extra=["--metrics-listen", "127.0.0.1:0",
                                         "--metrics-label", "replica=r0",
                                         "--metrics-label", "fleet=policy"])
             for r in range(RANKS)]
    run.wait_ranks(coordinator, RANKS)
    targets = ["127.0.0.1:%d" % p.ready["metrics_port"] for p in [coordinator] + ranks]
    prom = Prometheus(str(tmp_path), targets)
    try:
        assert wait_for(lambda: prom.targets_up(len(targets)), 60, 0.5), (
            "targets not up: %s\n%s" % (prom.query("up"), prom.tail()))
        # Before any update: loaded=false, so no rank serves, and says why.
        eventually(prom, 'wtx_held_info{role="rank"}',
                   lambda r: len(r) == RANKS and all(
                       dict(k)["reason"] == "not_loaded" for k in r),
                   "every rank held as not_loaded before the first update")

        # 1. A full update that commits.
        run.full_tx(coordinator, ranks, "t1", seed=1)
        answer = coordinator.ok("commit", {"tx": "t1"})
        assert status_code(answer) == "OK", answer
        version = answer["version"]
        settle(prom, [
            ('wtx_transactions_total{kind="full",outcome="committed"}',
             lambda r: len(r) == RANKS and all(v == 1 for v in r.values()),
             "each rank counts one committed full transaction"),
            ("wtx_version_info == 1",
             lambda r: len(r) == RANKS and all(
                 dict(k)["version"] == version and dict(k)["label"] == "t1" for k in r),
             "each rank shows the committed version, labelled with its transaction"),
            ("wtx_serving", lambda r: len(r) == RANKS and all(v == 1 for v in r.values()),
             "both ranks serve"),
            ("wtx_dirty", lambda r: len(r) == RANKS and all(v == 0 for v in r.values()),
             "neither rank is dirty"),
            ('wtx_held_info{role="rank"}', lambda r: r == {}, "no rank is held"),
            ("wtx_decisions_total",
             lambda r: one(r, outcome="committed", role="coordinator", replica="r0",
                           fleet="policy") == 1,
             "the coordinator counts one committed decision, with its labels"),
            ("wtx_bytes_written_total",
             lambda r: len(r) == RANKS and all(v == MANIFEST_BYTES for v in r.values()),
             "each rank counts every byte of the manifest written"),
            ('min by (phase) (wtx_phase_duration_seconds_count{role="rank"})',
             lambda r: all(one(r, phase=p) >= 1 for p in ("begin", "write", "prepare",
                                                         "commit")),
             "each rank times begin, write, prepare and commit"),
            ('wtx_phase_duration_seconds_count{phase="vote"}',
             lambda r: one(r, role="coordinator") == 1, "the coordinator times the vote"),
            ('wtx_decision_log_duration_seconds_count{op="decide"}',
             lambda r: one(r, role="coordinator") == 1,
             "the coordinator times logging the decision"),
            ("wtx_journal_sync_duration_seconds_count",
             lambda r: len(r) == RANKS + 1 and all(v >= 1 for v in r.values()),
             "every process times its synced journal writes"),
        ])

        # 2. A full update that aborts: rank 1 writes nothing, votes no (coverage incomplete).
        answer = coordinator.ok("begin", begin_req("t2"))
        assert status_code(answer) == "OK", answer
        ranks[0].ok("step", {"step": {"op": "write", "param": "*", "fill": {"seed": 2}}})
        ranks[0].ok("step", {"step": {"op": "refresh", "derived": "*"}})
        settle(prom, [
            ("wtx_transaction_start_timestamp_seconds > 0", lambda r: len(r) == RANKS,
             "an open transaction on both ranks"),
            ("wtx_coverage_ratio", lambda r: one(r, rank="0") == 1 and one(r, rank="1") == 0,
             "rank 0 wrote everything, rank 1 nothing"),
            ('wtx_held_info == 1', lambda r: one(r, rank="0", reason="updating") == 1,
             "rank 0 held while it updates"),
        ])
        answer = coordinator.call("commit", {"tx": "t2"})[1]
        assert status_code(answer) != "OK", answer
        settle(prom, [
            ('wtx_transactions_total{kind="full",outcome="aborted"}',
             lambda r: len(r) == RANKS and all(v == 1 for v in r.values()),
             "each rank counts one aborted full transaction"),
            ('wtx_aborts_total{role="coordinator"}',
             lambda r: one(r, code="E_COVERAGE_INCOMPLETE") == 1,
             "the coordinator counts the abort by its cause"),
            ('wtx_aborts_total{role="rank"}',
             lambda r: one(r, rank="1", code="E_COVERAGE_INCOMPLETE") == 1 and not any(
                 dict(k)["rank"] == "0" for k in r),
             "rank 1, whose no vote caused it, counts the abort; rank 0 does not"),
            # Rank 0 wrote bytes and kept no before-images: dirty, held. Rank 1 wrote nothing:
            # its bytes are still t1's, and it serves.
            ("wtx_dirty", lambda r: one(r, rank="0") == 1 and one(r, rank="1") == 0,
             "rank 0 dirty after the abort, rank 1 clean"),
            ("wtx_held_info == 1", lambda r: one(r, rank="0", reason="dirty") == 1 and not any(
                dict(k)["rank"] == "1" for k in r), "rank 0 held as dirty"),
            ("wtx_serving", lambda r: one(r, rank="0") == 0 and one(r, rank="1") == 1,
             "rank 1 still serves"),
            ("wtx_transaction_start_timestamp_seconds",
             lambda r: len(r) == RANKS and all(v == 0 for v in r.values()),
             "no transaction open"),
            ("wtx_coverage_ratio", lambda r: len(r) == RANKS and all(v == 0 for v in r.values()),
             "no coverage without an open transaction"),
            ('wtx_decisions_total{outcome="aborted"}', lambda r: one(r, role="coordinator") == 1,
             "the coordinator counts one aborted decision"),
            ("wtx_bytes_written_total", lambda r: one(r, rank="0") == 2 * MANIFEST_BYTES and
             one(r, rank="1") == MANIFEST_BYTES, "rank 0 counts its second write"),
        ])
    finally:
        prom.close()
