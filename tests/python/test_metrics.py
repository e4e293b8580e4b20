"""wtx's Prometheus metrics in prometheus_client (issue 52, docs/observability.md): what
`import wtx` alone puts in the default registry (vLLM's and SGLang's own /metrics serve it),
the labels an engine adds, the multiprocess mode the engines run their workers in (a worker
process writes, another process serves /metrics from PROMETHEUS_MULTIPROC_DIR), and the metric
table of docs/observability.md against the families the library exports."""

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import wtx

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def scrape(registry=None):
    """{(sample name, frozenset(labels)): value} of a text scrape of `registry`."""
    text = prometheus_client.generate_latest(registry or prometheus_client.REGISTRY).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples, name, **labels):
    hits = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) == 1, "want one %s with %s, got %d: %s" % (
        name, labels, len(hits), sorted(k for k in samples if k[0] == name))
    return hits[0]


def open_pair(tmp_path, config, labels):
    ms = [wtx.Manifest.from_hf_config(config, tp=2, rank=r, dtype="bf16") for r in range(2)]
    ps = [wtx.Participant.open(str(tmp_path / f"rank{r}"), ms[r], rank=r, kernel_identity="k",
                               metric_labels=labels) for r in range(2)]
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=ps, metric_labels=labels)
    return ms, ps, c


def sources_of(ms, seed):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for m in ms:
        for p in m.params:
            for s in p["shards"]:
                out.setdefault(s["source"], torch.randn(s["source_shape"], generator=g).to(
                    torch.bfloat16))
    return out


def test_ImportingWtxRegistersWithTheDefaultRegistry():
    assert wtx.metrics.installed_mode() == "collector"
    assert wtx.metrics.install() == "collector"  # a second call changes nothing


def test_DefaultRegistryShowsCommitsAndAborts(tmp_path, tiny_llama_config):
    labels = {"replica": "r-collector", "fleet": "policy"}
    ms, ps, c = open_pair(tmp_path, tiny_llama_config, labels)
    src = sources_of(ms, 1)
    c.begin("t1")
    for p in ps:
        for name, t in src.items():
            p.write_source(name, t)
    out = c.commit("t1")
    assert out["outcome"] == "committed"
    s = scrape()
    for r in ("0", "1"):
        assert value(s, "wtx_transactions_total", rank=r, kind="full", outcome="committed",
                     replica="r-collector", fleet="policy") == 1
        assert value(s, "wtx_serving", rank=r, replica="r-collector") == 1
        assert value(s, "wtx_version_info", rank=r, replica="r-collector", version=out["version"],
                     label="t1") == 1
        assert value(s, "wtx_phase_duration_seconds_count", rank=r, phase="prepare",
                     replica="r-collector") == 1
        assert value(s, "wtx_phase_duration_seconds_bucket", rank=r, phase="prepare",
                     replica="r-collector", le="+Inf") == 1
        assert value(s, "wtx_bytes_written_total", rank=r, replica="r-collector") == \
            ms[int(r)].total_bytes
    assert value(s, "wtx_decisions_total", role="coordinator", outcome="committed",
                 replica="r-collector") == 1
    # An update rank 1 leaves incomplete: it votes no, the coordinator names the cause.
    c.begin("t2")
    for name, t in sources_of(ms, 2).items():
        ps[0].write_source(name, t)
    assert c.commit("t2")["outcome"] == "aborted"
    s = scrape()
    assert value(s, "wtx_aborts_total", role="coordinator", code="E_COVERAGE_INCOMPLETE",
                 replica="r-collector") == 1
    assert value(s, "wtx_aborts_total", rank="1", code="E_COVERAGE_INCOMPLETE",
                 replica="r-collector") == 1
    assert value(s, "wtx_dirty", rank="0", replica="r-collector") == 1
    assert value(s, "wtx_held_info", rank="0", reason="dirty", replica="r-collector") == 1
    for p in ps:
        p.close()
    c.close()
    # The ranks are gone: so are their gauges (the counters stay).
    s = scrape()
    assert not [k for k in s if k[0] == "wtx_serving" and ("replica", "r-collector") in k[1]]
    assert value(s, "wtx_transactions_total", rank="0", outcome="aborted",
                 replica="r-collector") == 1


def test_UnknownMetricLabelIsRefusedByName(tmp_path, tiny_llama_config):
    m = wtx.Manifest.from_hf_config(tiny_llama_config, tp=1, rank=0, dtype="bf16")
    with pytest.raises(wtx.Error, match="metric_labels: metric label 'pod'"):
        wtx.Participant.open(str(tmp_path / "r0"), m, metric_labels={"pod": "x"})
    p = wtx.Participant.open(str(tmp_path / "r0"), m)
    with pytest.raises(wtx.Error, match="'replica' must have a value"):
        wtx.Coordinator.open(str(tmp_path / "c"), participants=[p], metric_labels={"replica": ""})
    p.close()


WORKER = textwrap.dedent("""
    import sys, torch, wtx
    assert wtx.metrics.installed_mode() == "multiprocess", wtx.metrics.installed_mode()
    config, root = sys.argv[1], sys.argv[2]
    ms = [wtx.Manifest.from_hf_config(config, tp=2, rank=r, dtype="bf16") for r in range(2)]
    ps = [wtx.Participant.open(root + "/rank%d" % r, ms[r], rank=r,
                               metric_labels={"replica": "r-mp"}) for r in range(2)]
    c = wtx.Coordinator.open(root + "/coord", participants=ps, metric_labels={"replica": "r-mp"})
    c.begin("t1")
    for p in ps:
        for prm in p.manifest.params:
            for s in prm["shards"]:
                p.write_source(s["source"], torch.ones(s["source_shape"], dtype=torch.bfloat16))
    print(c.commit("t1")["version"])
    c.begin("t2")
    c.commit("t2")  # nothing written on any rank: noop
    wtx.metrics.flush()
    if sys.argv[3] == "stay":
        print("up", flush=True)
        sys.stdin.read()  # the parent scrapes while this process lives
""")


def test_MultiprocessModeShowsAWorkersSeriesInAnotherProcess(tmp_path, tiny_llama_config):
    mpdir = tmp_path / "prom"
    mpdir.mkdir()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mpdir))
    worker = subprocess.Popen([sys.executable, "-c", WORKER, tiny_llama_config,
                               str(tmp_path / "w"), "stay"], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        version = worker.stdout.readline().strip()
        assert worker.stdout.readline().strip() == "up", worker.stderr.read()
        # What an engine's /metrics process does (vLLM's get_prometheus_registry, SGLang's
        # add_prometheus_middleware): a registry of its own over the multiprocess files.
        from prometheus_client import CollectorRegistry, multiprocess
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(mpdir))
        s = scrape(registry)
        for r in ("0", "1"):
            assert value(s, "wtx_transactions_total", rank=r, outcome="committed", kind="full",
                         replica="r-mp") == 1
            assert value(s, "wtx_transactions_total", rank=r, outcome="noop", replica="r-mp") == 1
            assert value(s, "wtx_serving", rank=r, replica="r-mp") == 1
            assert value(s, "wtx_version_info", rank=r, replica="r-mp", version=version,
                         label="t1") == 1
            assert value(s, "wtx_phase_duration_seconds_count", rank=r, phase="begin",
                         replica="r-mp") == 2
        assert value(s, "wtx_decisions_total", role="coordinator", outcome="noop",
                     replica="r-mp") == 1
    finally:
        worker.stdin.close()
        worker.wait(timeout=60)
    assert worker.returncode == 0, worker.stderr.read()
    # The worker exited: its gauges say it serves nothing; its counters stay.
    from prometheus_client import CollectorRegistry, multiprocess
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(mpdir))
    s = scrape(registry)
    assert value(s, "wtx_serving", rank="0", replica="r-mp") == 0
    assert value(s, "wtx_transactions_total", rank="0", outcome="committed",
                 replica="r-mp") == 1


def test_DocsTableListsExactlyTheExportedFamilies():
    with open(os.path.join(REPO, "docs", "observability.md"), encoding="utf-8") as f:
        rows = [line for line in f if line.lstrip().startswith("| `wtx_")]
    documented = {re.match(r"\|\s*`(wtx_[a-z_]+)`", row).group(1) for row in rows}
    exported = {f["name"] for f in wtx._wtx.metric_families()}
    assert documented == exported
