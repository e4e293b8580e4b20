"""The Python module on the etcd decision log (issue 27): Coordinator.open(decision_log=...)
decides in etcd, wtx.DecisionLog reads it and resolves a rank without any coordinator. Needs a
real etcd (tests/etcd/etcd_cluster.py); without the binary the run exits 77, which CTest
reports as skipped."""

import os
import sys
import time

import pytest
import torch

import wtx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "etcd"))
from etcd_cluster import EtcdCluster, etcd_available  # noqa: E402

if not etcd_available():
    pytest.exit("no etcd binary (/usr/bin/etcd or etcd on PATH): the decision log tests need a "
                "real cluster", returncode=77)


@pytest.fixture(scope="module")
def etcd():
    with EtcdCluster() as cluster:
        yield cluster


def open_ranks(tmp_path, config, tp=2):
    ms = [wtx.Manifest.from_hf_config(config, tp=tp, rank=r, dtype="bf16") for r in range(tp)]
    tensors = [{p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
               for m in ms]
    ps = [wtx.Participant.open(str(tmp_path / f"rank{r}"), ms[r], rank=r, tensors=tensors[r],
                               kernel_identity="k1") for r in range(tp)]
    # The "engine" keeps its tensors: a bare tensor only wtx references is one the engine
    # dropped (reported E_STORAGE_MOVED, docs/python.md).
    open_ranks.engines = getattr(open_ranks, "engines", []) + tensors
    return ms, ps


def write_all(ms, ps, seed):
    g = torch.Generator().manual_seed(seed)
    sources = {}
    for m in ms:
        for p in m.params:
            for s in p["shards"]:
                if s["source"] not in sources:
                    sources[s["source"]] = torch.randn(s["source_shape"],
                                                       generator=g).to(torch.bfloat16)
    for p in ps:
        for name, t in sources.items():
            p.write_source(name, t)


def test_CommitIsDecidedInEtcdAndReadBack(tmp_path, etcd, tiny_llama_config):
    url = etcd.url("py-commit")
    ms, ps = open_ranks(tmp_path, tiny_llama_config)
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=ps, decision_log=url,
                             lease_ttl=1.0)
    assert c.epoch > 0 and c.leads and c.decision_log.startswith("etcd://")
    c.begin("t1")
    write_all(ms, ps, 1)
    out = c.commit("t1")
    assert out["outcome"] == "committed"
    log = wtx.DecisionLog.open(url)
    d = log.read("t1")
    assert d["decision"] == "commit" and d["version"] == out["version"]
    assert d["epoch"] == c.epoch and len(d["votes"]) == 2
    assert [x["tx"] for x in log.list()] == ["t1"]
    assert log.read("nope") is None
    epoch, holder = log.current_leader()
    assert epoch == c.epoch and holder


def test_RankResolvesWithoutACoordinatorOnceNoneLeads(tmp_path, etcd, tiny_llama_config):
    url = etcd.url("py-resolve")
    ms, ps = open_ranks(tmp_path, tiny_llama_config, tp=1)
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=ps, decision_log=url,
                             lease_ttl=1.0)
    c.begin("t1")
    write_all(ms, ps, 2)  # active, never decided
    log = wtx.DecisionLog.open(url)
    # The coordinator leads: the rank must wait for it.
    with pytest.raises(wtx.Error) as e:
        log.resolve(ps[0])
    assert "E_TX_ACTIVE" in str(e.value)
    c.close()  # a clean close resigns the leadership: nobody leads, nothing decided
    deadline = time.monotonic() + 10
    while True:
        try:
            d = log.resolve(ps[0])
            break
        except wtx.Error:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert d["decision"] == "abort" and d["writer"] == "rank 0"
    assert log.resolve(ps[0]) is None  # nothing active any more


def test_UnreachableDecisionLogIsAClearError(tmp_path, tiny_llama_config):
    ms, ps = open_ranks(tmp_path, tiny_llama_config, tp=1)
    with pytest.raises(wtx.Error) as e:
        wtx.Coordinator.open(str(tmp_path / "coord"), participants=ps,
                             decision_log="etcd://127.0.0.1:1/x", leader_wait=0.5)
    assert "E_DECISION_LOG_UNAVAILABLE" in str(e.value) and "127.0.0.1:1" in str(e.value)
    with pytest.raises(wtx.Error) as e:
        wtx.DecisionLog.open("etcd://127.0.0.1/x")
    assert "port" in str(e.value)
