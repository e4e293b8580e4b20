"""The wtx module in one process: manifests, participants over borrowed torch tensors, the
in-process coordinator, errors, outcomes and history."""

import json
import sys
import threading
import time

import numpy as np
import pytest
import torch

import wtx


def open_group(tmp_path, config, tp=2, rollback_budget=1 << 30, landing_hash_threads=0):
    ms = [wtx.Manifest.from_hf_config(config, tp=tp, rank=r, dtype="bf16") for r in range(tp)]
    tensors = [{p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
               for m in ms]
    ps = [wtx.Participant.open(str(tmp_path / f"rank{r}"), ms[r], rank=r, tensors=tensors[r],
                               kernel_identity="k1", rollback_budget_bytes=rollback_budget,
                               landing_hash_threads=landing_hash_threads)
          for r in range(tp)]
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=ps)
    return ms, tensors, ps, c


def hf_sources(manifest_list, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for m in manifest_list:
        for p in m.params:
            for s in p["shards"]:
                if s["source"] not in out:
                    out[s["source"]] = torch.randn(s["source_shape"], generator=g).to(torch.bfloat16)
    return out


def full_update(c, ps, sources, tx, skip=()):
    c.begin(tx)
    for p in ps:
        for name, t in sources.items():
            if name not in skip:
                p.write_source(name, t)
    return c.commit(tx)


def test_ManifestFromHfConfigDescribesVllmLayout(tiny_llama_config):
    m0 = wtx.Manifest.from_hf_config(tiny_llama_config, tp=2, rank=0, dtype="bf16")
    m1 = wtx.Manifest.from_hf_config(tiny_llama_config, tp=2, rank=1, dtype="bf16")
    assert m0.fingerprint == m1.fingerprint and len(m0.fingerprint) == 32
    qkv = next(p for p in m0.params if p["name"] == "model.layers.0.self_attn.qkv_proj.weight")
    assert qkv["dtype"] == "bf16"
    assert [s["id"] for s in qkv["shards"]] == ["q", "k", "v"]
    k = qkv["shards"][1]
    assert k["source"] == "model.layers.0.self_attn.k_proj.weight"
    assert set(k) >= {"id", "source", "source_shape", "box", "source_box"}
    again = wtx.Manifest.from_json(m0.to_json())
    assert again.fingerprint == m0.fingerprint and again.params == m0.params


def test_ManifestErrorsNameTheField(tiny_llama_config):
    with pytest.raises(wtx.Error) as e:
        wtx.Manifest.from_hf_config(tiny_llama_config, tp=3, rank=0)
    assert e.value.code == "INVALID_ARGUMENT" and "tp 3" in e.value.message
    with pytest.raises(wtx.Error) as e:
        wtx.Manifest.from_json('{"params": 3}')
    assert "params" in e.value.message


def test_FullUpdateLandsInBorrowedTensorsAndCommits(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    out = full_update(c, ps, sources, "tx1")
    assert out["outcome"] == "committed" and out["error"] is None
    assert [v["vote"] for v in out["votes"]] == ["yes", "yes"]
    for r, p in enumerate(ps):
        st = p.status()
        assert st["serving"] and st["version"] == out["version"] and not st["dirty"]
        for s in ms[r].source_shards("model.layers.1.self_attn.k_proj.weight"):
            live = tensors[r][s["param"]][tuple(slice(b, e) for b, e in s["box"])]
            src = sources[s["source"]][tuple(slice(b, e) for b, e in s["source_box"])]
            assert torch.equal(live, src)
        assert p.verify()["ok"]
    hist = wtx.history(str(tmp_path / "rank0"))
    assert hist[-1]["tx"] == "tx1" and hist[-1]["outcome"] == "committed"
    assert hist[-1]["version"] == out["version"] and "timings_us" in hist[-1]
    coord = wtx.history(str(tmp_path / "coord"))
    assert coord[-1]["tx"] == "tx1"


def test_MissingKProjAbortsNamingQkvShardK(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    out = full_update(c, ps, sources, "tx1", skip=("model.layers.0.self_attn.k_proj.weight",))
    assert out["outcome"] == "aborted"  # an outcome, not an exception
    assert out["error"]["code"] == "E_VOTE_NO"
    for v in out["votes"]:
        assert v["vote"] == "no" and v["error"] == "E_COVERAGE_INCOMPLETE"
        assert any(m["param"] == "model.layers.0.self_attn.qkv_proj.weight" and m["shard"] == "k"
                   for m in v["missing"])
    assert not any(p.status()["serving"] for p in ps)
    # An empty update after the half-failed one never re-enables serving.
    c.begin("tx2")
    out2 = c.commit("tx2")
    assert out2["outcome"] == "noop"
    assert not any(p.status()["serving"] for p in ps)
    assert all(p.status()["dirty"] for p in ps)


def test_BadTensorsAreBadWritesNamingTheTensor(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    c.begin("tx1")
    name = "model.norm.weight"
    shape = next(p["shape"] for p in ms[0].params if p["name"] == name)
    cases = {
        "dtype": torch.zeros(shape, dtype=torch.float32),
        "shape": torch.zeros([shape[0] + 1], dtype=torch.bfloat16),
        "device": torch.zeros(shape, dtype=torch.bfloat16, device="meta"),
        "contiguous": torch.zeros([shape[0], 2], dtype=torch.bfloat16)[:, 0],
        "object": "not a tensor",
    }
    for what, t in cases.items():
        with pytest.raises(wtx.Error) as e:
            ps[0].write(name, t)
        assert e.value.code == "E_BAD_WRITE", what
        assert name in e.value.message, what
    with pytest.raises(wtx.Error) as e:
        ps[0].write_source("model.norm.weight", torch.zeros([3], dtype=torch.bfloat16))
    assert e.value.code == "E_BAD_WRITE" and "model.norm.weight" in e.value.message
    # Nothing landed: the transaction is still empty.
    assert ps[0].status()["active_tx"] == "tx1"
    assert c.commit("tx1")["outcome"] == "noop"


def test_BorrowedTensorsAreChecked(tmp_path, tiny_llama_config):
    m = wtx.Manifest.from_hf_config(tiny_llama_config, tp=2, rank=0, dtype="bf16")
    tensors = {p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
    missing = dict(tensors)
    missing.pop("lm_head.weight")
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "a"), m, rank=0, tensors=missing)
    assert "lm_head.weight" in e.value.message
    wrong = dict(tensors)
    wrong["model.norm.weight"] = torch.zeros([4], dtype=torch.bfloat16)
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "b"), m, rank=0, tensors=wrong)
    assert e.value.code == "E_BAD_WRITE" and "model.norm.weight" in e.value.message


def test_DuplicateWriteIsRefused(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    c.begin("tx1")
    t = torch.ones(next(p["shape"] for p in ms[0].params if p["name"] == "model.norm.weight"),
                   dtype=torch.bfloat16)
    ps[0].write("model.norm.weight", t)
    with pytest.raises(wtx.Error) as e:
        ps[0].write("model.norm.weight", t)
    assert e.value.code == "E_DUPLICATE_WRITE"
    assert c.abort("tx1")["outcome"] == "aborted"


def test_RolledBackPartialUpdateRestoresBytes(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    v1 = full_update(c, ps, sources, "tx1")["version"]
    before = [{k: t.clone() for k, t in ts.items()} for ts in tensors]
    c.begin("tx2", kind="partial", base=v1, modules=["model.layers.0.self_attn"],
            rollback=True)
    for p in ps:
        p.write_source("model.layers.0.self_attn.q_proj.weight",
                       sources["model.layers.0.self_attn.q_proj.weight"] + 1)
    out = c.commit("tx2")  # k, v, ... of layer 0 missing
    assert out["outcome"] == "aborted"
    for r in range(2):
        for k in before[r]:
            assert torch.equal(before[r][k], tensors[r][k]), k
        assert ps[r].status()["serving"] and ps[r].status()["version"] == v1


def test_PatchAndNumpyInputs(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config, tp=1)
    sources = hf_sources(ms)
    v1 = full_update(c, ps, sources, "tx1")["version"]
    src = "model.norm.weight"
    c.begin("tx2", kind="delta", base=v1, sources=[src])
    ps[0].patch(src, torch.tensor([0, 3], dtype=torch.int64),
                torch.tensor([5.0, 6.0], dtype=torch.bfloat16))
    out = c.commit("tx2")
    assert out["outcome"] == "committed"
    assert tensors[0][src][3].item() == 6.0
    with pytest.raises(wtx.Error) as e:
        ps[0].write(src, np.zeros([5], dtype=np.float32))
    assert e.value.code == "E_BAD_WRITE"


def test_WritesReleaseTheGil(tmp_path):
    # Another Python thread keeps running while a write copies and hashes 256 MiB: it ticks in
    # the middle half of the call, which is impossible while the call holds the GIL (the
    # thread could only run at the call's edges).
    n = 1 << 27
    m = wtx.Manifest.from_json(json.dumps({"params": [
        {"name": "w", "dtype": "bf16", "shape": [n]}]}))
    live = torch.zeros([n], dtype=torch.bfloat16)
    p = wtx.Participant.open(str(tmp_path / "r"), m, rank=0, tensors={"w": live})
    c = wtx.Coordinator.open(str(tmp_path / "c"), participants=[p])
    src = torch.ones([n], dtype=torch.bfloat16)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    th = threading.Thread(target=spin)
    th.start()
    try:
        c.begin("tx1")
        t0 = time.perf_counter()
        p.write("w", src)
        t1 = time.perf_counter()
    finally:
        stop.set()
        th.join()
        sys.setswitchinterval(old)
    q = (t1 - t0) / 4
    assert any(t0 + q < t < t1 - q for t in ticks), (t1 - t0, len(ticks))
    assert c.commit("tx1")["outcome"] == "committed"
    assert torch.equal(live, src)


def test_UnknownTransactionIsAnError(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    with pytest.raises(wtx.Error) as e:
        c.commit("nope")
    assert e.value.code == "E_NO_TX"
    with pytest.raises(wtx.Error) as e:
        c.begin("tx", kind="sideways")
    assert "kind" in e.value.message


def test_ExpectedVersionBuiltOneSourceAtATimeEqualsTheWholeComputation(tmp_path,
                                                                      tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    whole = wtx.expected_version(ms, sources)
    b = wtx.ExpectedVersionBuilder(ms)
    for name in reversed(list(sources)):
        assert b.add(name, sources[name]) >= 1
    assert b.add("not.a.source", torch.zeros(3)) == 0  # no rank holds it: ignored
    assert b.sources_added == len(sources)
    with pytest.raises(wtx.Error) as e:
        b.add("model.norm.weight", sources["model.norm.weight"])
    assert "given twice" in e.value.message
    assert b.finish() == whole
    with pytest.raises(wtx.Error) as e:
        b.finish()
    assert e.value.code == "INVALID_ARGUMENT" and "already finished" in e.value.message


def test_ExpectedVersionBuilderRefusesAWrongShapeAndNamesAMissingSource(tmp_path,
                                                                      tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    b = wtx.ExpectedVersionBuilder(ms)
    name = "model.layers.0.mlp.down_proj.weight"
    with pytest.raises(wtx.Error) as e:
        b.add(name, sources[name].t().contiguous())
    assert name in e.value.message and "source shape" in e.value.message
    assert b.sources_added == 0
    for n, t in sources.items():
        if n != name:
            b.add(n, t)
    with pytest.raises(wtx.Error) as e:
        b.finish()
    assert e.value.code == "NOT_FOUND" and name in e.value.message


def test_SendHasherHashesEachPieceAsItLeavesAndRaisesAfterTheSend(tmp_path, tiny_llama_config):
    from wtx._expect import SendHasher, hashed_as_sent
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    hasher = SendHasher(ms)
    sent = [n for n, _ in hashed_as_sent(sources.items(), hasher)]
    assert sent == list(sources)
    assert hasher.version() == wtx.expected_version(ms, sources)["version"]
    # A piece sent twice, and a manifest that cannot be read: the send still runs to its end
    # (the engines get every tensor), version() raises.
    twice = SendHasher(ms)
    items = list(sources.items())
    assert len(list(hashed_as_sent(items + items[:1], twice))) == len(items) + 1
    with pytest.raises(wtx.Error) as e:
        twice.version()
    assert "given twice" in e.value.message
    broken = SendHasher(["{not json"])
    assert len(list(hashed_as_sent(items, broken))) == len(items)
    with pytest.raises(wtx.Error):
        broken.version()


def test_ExpectedVersionCommitsWhatWasSentAndRefusesOtherBytes(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    expected = wtx.expected_version(ms, sources)
    assert len(expected["rank_digests"]) == 2
    c.begin("tx1")
    for p in ps:
        for name, t in sources.items():
            assert p.write_source(name, t) >= 1
    out = c.commit("tx1", expect_version=expected["version"],
                   expect_rank_digests=expected["rank_digests"])
    assert out["outcome"] == "committed" and out["version"] == expected["version"]
    # Rank 1 receives one corrupted tensor: the commit aborts instead of serving it.
    c.begin("tx2")
    bad = "model.layers.1.mlp.down_proj.weight"
    for r, p in enumerate(ps):
        for name, t in sources.items():
            p.write_source(name, t + 1 if (r == 1 and name == bad) else t)
    out = c.commit("tx2", expect_version=expected["version"],
                   expect_rank_digests=expected["rank_digests"])
    assert out["outcome"] == "aborted"
    assert out["error"]["code"] == "E_VERSION_MISMATCH" and "1" in out["error"]["message"]


def test_WriteSourceOfAnUnknownSourceIsRefusedAndOtherDtypesConverted(tmp_path,
                                                                       tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    c.begin("tx1")
    with pytest.raises(wtx.Error) as e:
        ps[0].write_source("not.a.tensor", torch.zeros([2]))
    assert e.value.code == "E_UNKNOWN_SOURCE" and "not.a.tensor" in e.value.message
    assert ps[0].status()["dirty"] is False or ps[0].status()["active_tx"] == "tx1"
    qkv = ms[0].source_shards("model.layers.0.self_attn.k_proj.weight")
    assert [s["id"] for s in qkv] == ["k"]
    # Another floating dtype is converted as torch's .to() does; a non-floating one is refused.
    src = torch.zeros(qkv[0]["source_shape"], dtype=torch.float32)
    assert ps[0].write_source("model.layers.0.self_attn.k_proj.weight", src) == 1
    with pytest.raises(wtx.Error) as e:
        ps[0].write_source("model.layers.0.self_attn.v_proj.weight",
                           torch.zeros(qkv[0]["source_shape"], dtype=torch.int32))
    assert e.value.code == "E_BAD_WRITE" and "v_proj" in e.value.message


@pytest.mark.parametrize("landing_hash_threads", [0, 2])
def test_InPlaceLandingFillsTheLiveViewAndCommits(tmp_path, tiny_llama_config,
                                                  landing_hash_threads):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config,
                                    landing_hash_threads=landing_hash_threads)
    sources = hf_sources(ms)
    k = "model.layers.0.self_attn.k_proj.weight"
    c.begin("tx1")
    for r, p in enumerate(ps):
        for name, t in sources.items():
            if name == k:
                continue
            p.write_source(name, t)
        (s,) = p.manifest.source_shards(k)
        view = p.reserve(s["param"], shard="k")
        assert view.data_ptr() != 0 and list(view.shape) == [e - b for b, e in s["box"]]
        view.copy_(wtx.slice_source(sources[k], s["source_box"]))  # the engine fills it
        p.landed(s["param"], shard="k")
    out = c.commit("tx1")
    assert out["outcome"] == "committed"
    assert out["version"] == wtx.expected_version(ms, sources)["version"]


def test_LandingHashThreadsOutOfRangeIsRefusedNamingTheOption(tmp_path, tiny_llama_config):
    m = wtx.Manifest.from_hf_config(tiny_llama_config, tp=1, rank=0, dtype="bf16")
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "rank0"), m, landing_hash_threads=257)
    assert e.value.code == "INVALID_ARGUMENT" and "landing_hash_threads" in e.value.message


def test_DataPathThreadsGiveTheSameVersion(tmp_path):
    # threads= splits a large write's copy and hash across threads, and hashes a large landing
    # in the background: the committed version is the same for every thread count.
    m = wtx.Manifest.from_json(
        '{"params": [{"name": "w", "dtype": "f32", "shape": [1024, 1536]},'
        ' {"name": "l", "dtype": "f32", "shape": [512, 1024]}]}')
    w = torch.randn(1024, 1536)
    landed = torch.randn(512, 1024)
    versions = []
    for threads in (1, 3, 0):
        d = tmp_path / f"t{threads}"
        p = wtx.Participant.open(str(d / "rank0"), m, threads=threads)
        c = wtx.Coordinator.open(str(d / "coord"), participants=[p])
        c.begin("tx1")
        p.write("w", w)
        p.reserve("l").copy_(landed)
        p.landed("l")
        out = c.commit("tx1")
        assert out["outcome"] == "committed", out
        versions.append(out["version"])
        c.close()
        p.close()
    assert versions[0] == versions[1] == versions[2]
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "bad"), m, threads=257)
    assert e.value.code == "INVALID_ARGUMENT" and "threads" in e.value.message


def test_LandingErrorsNameTheRegion(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    with pytest.raises(wtx.Error) as e:
        ps[0].reserve(qkv, shard="k")
    assert e.value.code == "E_NO_TX"
    c.begin("tx1")
    with pytest.raises(wtx.Error) as e:
        ps[0].landed(qkv, shard="k")  # never reserved
    assert e.value.code == "E_BAD_WRITE" and qkv in e.value.message
    ps[0].reserve(qkv, shard="k")
    with pytest.raises(wtx.Error) as e:
        ps[0].reserve(qkv)  # overlaps the reserved shard
    assert e.value.code == "E_DUPLICATE_WRITE"
    out = c.commit("tx1")  # reserved but never landed: incomplete, naming it
    assert out["outcome"] == "aborted"
    assert any(m["param"] == qkv and m["shard"] == "k" for m in out["votes"][0]["missing"])


def test_MalformedBoxEmptyExpectVersionAndNegativeRankAreErrorsNamingThem(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    c.begin("tx1")
    for box in ("abc", [[0, 1, 2]], [[0]], 5):
        with pytest.raises(wtx.Error) as e:
            ps[0].reserve(qkv, box=box)
        assert e.value.code == "INVALID_ARGUMENT" and "box" in e.value.message, box
    with pytest.raises(wtx.Error) as e:
        c.commit("tx1", expect_version="")
    assert e.value.code == "INVALID_ARGUMENT" and "expect_version" in e.value.message
    c.abort("tx1")
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "neg"), ms[0], rank=-1, kernel_identity="k1")
    assert e.value.code == "INVALID_ARGUMENT" and "rank" in e.value.message
    assert "[0, 4095]" in e.value.message and "-1" in e.value.message


@pytest.mark.parametrize("value", [2**63, 2**64, 10**23, -1, -2**63 - 1, 1.5, "3", True, None])
def test_IntegerArgumentsOutOfRangeAreErrorsNamingArgumentAndRange(tmp_path, tiny_llama_config,
                                                                   value):
    m = wtx.Manifest.from_hf_config(tiny_llama_config, tp=1, rank=0, dtype="bf16")

    def refused(call, name, range_text):
        with pytest.raises(wtx.Error) as e:
            call()
        assert e.value.code == "INVALID_ARGUMENT", e.value.message
        assert name in e.value.message and range_text in e.value.message, e.value.message

    refused(lambda: wtx.Manifest.from_hf_config(tiny_llama_config, tp=value, rank=0), "tp",
            "[1, 4096]")
    refused(lambda: wtx.Manifest.from_hf_config(tiny_llama_config, tp=1, rank=value), "rank",
            "[0, 4095]")
    d = str(tmp_path / "r")
    refused(lambda: wtx.Participant.open(d, m, rank=value), "rank", "[0, 4095]")
    refused(lambda: wtx.Participant.open(d, m, rollback_budget_bytes=value),
            "rollback_budget_bytes", "[0, 9223372036854775807]")
    refused(lambda: wtx.Participant.open(d, m, landing_hash_threads=value),
            "landing_hash_threads", "[0, 256]")
    refused(lambda: wtx.Participant.open(d, m, threads=value), "threads", "[0, 256]")
    refused(lambda: wtx.Coordinator.open_carried(str(tmp_path / "c"), num_ranks=value,
                                                 carrier=lambda *a: None),
            "num_ranks", "[1, 4096]")


def test_IntegerArgumentsAtTheirBoundsAreAccepted(tmp_path, tiny_llama_config):
    wtx.Manifest.from_hf_config(tiny_llama_config, tp=1, rank=0)
    m = wtx.Manifest.from_hf_config(tiny_llama_config, tp=1, rank=0, dtype="bf16")
    p = wtx.Participant.open(str(tmp_path / "r"), m, rank=0, rollback_budget_bytes=2**63 - 1,
                             landing_hash_threads=256)
    p.close()
    p = wtx.Participant.open(str(tmp_path / "r0"), m, rank=0, rollback_budget_bytes=0,
                             landing_hash_threads=0)
    p.close()


def test_PatchIndicesAndPartOutOfRangeAreErrorsNamingThem(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config, tp=1)
    v1 = full_update(c, ps, hf_sources(ms), "tx1")["version"]
    src = "model.norm.weight"
    c.begin("tx2", kind="delta", base=v1, sources=[src])
    values = torch.tensor([5.0], dtype=torch.bfloat16)
    for bad in (2**64, 2**63, -2**63 - 1, 1.5, "0"):
        with pytest.raises(wtx.Error) as e:
            ps[0].patch(src, [bad], values)
        assert e.value.code == "INVALID_ARGUMENT" and "indices[0]" in e.value.message
    for part in ((0, 2**32), (2**31, 1), (0, "1"), (0,)):
        with pytest.raises(wtx.Error) as e:
            ps[0].patch(src, [0], values, part=part)
        assert e.value.code == "INVALID_ARGUMENT" and "part" in e.value.message, part
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    with pytest.raises(wtx.Error) as e:
        ps[0].reserve(qkv, box=[[0, 2**64]])
    assert e.value.code == "INVALID_ARGUMENT" and "box[0][1]" in e.value.message
    c.abort("tx2")


def test_VerifierFindsStrayWriteAndReattachRestoresServing(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    assert full_update(c, ps, sources, "tx1")["outcome"] == "committed"
    rep = ps[0].verify()
    assert rep["ok"] and rep["chunks_differing"] == 0
    # The engine reopens over tensors that survived (e.g. a restarted wtx, same engine memory).
    c.close()
    for p in ps:
        p.close()
    ps = [wtx.Participant.open(str(tmp_path / f"rank{r}"), ms[r], rank=r, tensors=tensors[r],
                               kernel_identity="k1") for r in range(2)]
    assert not ps[1].status()["serving"]
    assert ps[1].reattach()["ok"] and ps[1].status()["serving"]
    # A write behind wtx's back: the verifier names it and the rank stops serving.
    tensors[1]["lm_head.weight"][0, 0] += 1
    rep = ps[1].verify()
    assert not rep["ok"] and rep["params"] == ["lm_head.weight"]
    assert rep["differences"][0]["param"] == "lm_head.weight"
    assert not ps[1].status()["serving"] and ps[1].status()["dirty"]


def test_JournalWithoutAValidWatermarkIsRefusedUnlessAccepted(tmp_path, tiny_llama_config):
    # Records but neither sync watermark copy: synced records may have been lost without a
    # trace, so opening is refused unless the caller accepts it explicitly.
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    assert full_update(c, ps, hf_sources(ms), "tx1")["outcome"] == "committed"
    c.close()
    for p in ps:
        p.close()
    for d, f in [(d, f) for d in ("rank0", "coord") for f in ("WTX-SYNCED-A", "WTX-SYNCED-B")]:
        (tmp_path / d / f).unlink()
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "rank0"), ms[0], rank=0, kernel_identity="k1")
    assert e.value.code == "E_JOURNAL_CORRUPT"
    assert "no valid sync watermark" in e.value.message and "rank0" in e.value.message
    p0 = wtx.Participant.open(str(tmp_path / "rank0"), ms[0], rank=0, kernel_identity="k1",
                              accept_unverified_journal=True)
    p1 = wtx.Participant.open(str(tmp_path / "rank1"), ms[1], rank=1, kernel_identity="k1")
    with pytest.raises(wtx.Error) as e:
        wtx.Coordinator.open(str(tmp_path / "coord"), participants=[p0, p1])
    assert e.value.code == "E_JOURNAL_CORRUPT" and "coord" in e.value.message
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=[p0, p1],
                             accept_unverified_journal=True)
    assert c.committed_version("tx1") is not None
    c.close()


def test_WriteSourceFromFileCommitsTheExpectedVersion(tmp_path, tiny_llama_config):
    # Every source written into one file; each rank reads its slices from it (pread straight
    # into the live tensors, column slices through one read): the expected version commits.
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config)
    sources = hf_sources(ms)
    path = tmp_path / "sources.bin"
    offsets = {}
    with open(path, "wb") as f:
        f.write(b"\x00" * 77)  # sources need not start aligned
        for name, t in sources.items():
            offsets[name] = f.tell()
            f.write(t.contiguous().view(torch.uint8).numpy().tobytes())
    expected = wtx.expected_version(ms, sources)
    c.begin("tx1")
    with open(path, "rb") as f:
        for p in ps:
            for name in sources:
                p.write_source_from_file(name, f, offsets[name])
        assert ps[0].write_source_from_file("not.a.tensor", f, 0) == 0
        with pytest.raises(wtx.Error) as e:
            ps[0].write_source_from_file(next(iter(sources)), f, -1)
        assert "offset" in e.value.message
    out = c.commit("tx1", expect_version=expected["version"])
    assert out["outcome"] == "committed" and out["version"] == expected["version"]
    # A file too short for the source: the read fails naming the file; the transaction
    # cannot commit.
    name = next(n for n in sources if sources[n].numel() * sources[n].element_size() > 1000)
    c.begin("tx2", kind="full")
    with open(path, "rb") as f:
        with pytest.raises(wtx.Error) as e:
            ps[0].write_source_from_file(name, f, path.stat().st_size - 100)
    assert e.value.code == "IO_ERROR" and str(path) in e.value.message
    out = c.commit("tx2")
    assert out["outcome"] == "aborted"


def test_RankWhoseVocabularyRowsAreAllPaddingLoadsNothingAndCommits(tmp_path, tiny_llama_config):
    """Issue 36: a small vocabulary at a large tp (129 rows padded to 192 at tp 4): rank 3 holds
    only padding. vLLM accepts it (no rows loaded, zero padding); so does wtx."""
    cfg = json.load(open(tiny_llama_config))
    cfg["vocab_size"] = 129
    ms = [wtx.Manifest.from_hf_config(cfg, tp=4, rank=r, dtype="bf16") for r in range(4)]
    embed = next(p for p in ms[3].params if p["name"] == "model.embed_tokens.weight")
    assert [s["id"] for s in embed["shards"]] == ["0", "pad"]
    assert ms[3].fingerprint == ms[0].fingerprint
    assert not ms[3].source_shards("model.embed_tokens.weight")
    live = [{p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
            for m in ms]
    ps = [wtx.Participant.open(str(tmp_path / f"rank{r}"), ms[r], rank=r, tensors=live[r])
          for r in range(4)]
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=ps)
    sources = hf_sources(ms)
    out = full_update(c, ps, sources, "tx1")
    assert out["outcome"] == "committed", out
    assert out["version"] == wtx.expected_version(ms, sources)["version"]
    # Held by the other ranks only: 0 on rank 3, not an unknown name.
    assert ps[3].write_source("model.embed_tokens.weight",
                              sources["model.embed_tokens.weight"]) == 0
    assert torch.count_nonzero(live[3]["model.embed_tokens.weight"]) == 0
    assert all(p.status()["serving"] for p in ps)


def _pieces_commit_the_full_writes_version(tmp_path, config, parts, send):
    """Every source of a tp-2 group as `parts` dim-0 pieces, each through send(p, name, t, box);
    the commit must be the version of a full write of the same sources."""
    ms, tensors, ps, c = open_group(tmp_path, config)
    sources = hf_sources(ms)
    want = wtx.expected_version(ms, sources)["version"]
    c.begin("t1")
    for p in ps:
        for name, t in sources.items():
            n = t.shape[0]
            for k in range(parts):
                box = [[n * k // parts, n * (k + 1) // parts]] + [[0, d] for d in t.shape[1:]]
                send(p, name, t, box)
    out = c.commit("t1", expect_version=want)
    assert out["outcome"] == "committed" and out["version"] == want


def test_WriteSourcePiecesFromManySendersCommitTheFullWritesVersion(tmp_path, tiny_llama_config):
    # Issue 38: write_source(name, piece, source_box=...) writes the piece's intersection with
    # every shard this rank holds; three "FSDP ranks" (dim-0 thirds) tile every source.
    _pieces_commit_the_full_writes_version(
        tmp_path, tiny_llama_config, 3,
        lambda p, name, t, box: p.write_source(name, wtx.slice_source(t, box), source_box=box))


def test_WriteSourcePieceErrorsNameTheBoxes(tmp_path, tiny_llama_config):
    ms, tensors, ps, c = open_group(tmp_path, tiny_llama_config, tp=1)
    sources = hf_sources(ms)
    name = "model.layers.0.mlp.down_proj.weight"
    t = sources[name]
    rows, cols = t.shape
    c.begin("t1")
    ps[0].write_source(name, t[:rows // 2 + 1], source_box=[[0, rows // 2 + 1], [0, cols]])
    with pytest.raises(wtx.Error) as e:  # overlaps the first piece's last row
        ps[0].write_source(name, t[rows // 2:], source_box=[[rows // 2, rows], [0, cols]])
    assert e.value.code == "E_DUPLICATE_WRITE"
    assert f"[[0, {rows // 2 + 1}], [0, {cols}]]" in e.value.message
    with pytest.raises(wtx.Error) as e:  # outside the source
        ps[0].write_source(name, t[:2], source_box=[[rows - 1, rows + 1], [0, cols]])
    assert e.value.code == "E_OUT_OF_RANGE" and name in e.value.message
    with pytest.raises(wtx.Error) as e:  # the tensor is not the box's shape
        ps[0].write_source(name, t[:3], source_box=[[rows - 2, rows], [0, cols]])
    assert e.value.code == "E_BAD_WRITE" and "piece" in e.value.message
    ps[0].write_source(name, t[rows // 2 + 1:], source_box=[[rows // 2 + 1, rows], [0, cols]])


def test_ReserveSourcePiecesLandEachShardsPartAndCommitTheFullWritesVersion(tmp_path,
                                                                            tiny_llama_config):
    def land(p, name, t, box):
        piece = wtx.slice_source(t, box)  # what one sender holds
        for r in p.reserve_source(name, source_box=box):
            # The reserved part of the piece, relative to the piece's first element.
            part = piece[tuple(slice(b - o[0], e - o[0])
                               for (b, e), o in zip(r["source_box"], box))]
            r["view"].copy_(part.reshape(r["view"].shape))  # a receive, in place
        p.landed_source(name, source_box=box)

    _pieces_commit_the_full_writes_version(tmp_path, tiny_llama_config, 2, land)


def test_ManifestGroupsLetStagesHoldDifferentManifestsAndAreCheckedAtOpen(tmp_path,
                                                                        tiny_llama_config):
    """Two ranks holding different manifests (pipeline stages): refused as one group, begun
    with a group each; a group list of the wrong size is refused at open, naming both counts."""
    ms = [wtx.Manifest.from_hf_config(tiny_llama_config, tp=2, rank=0, dtype="bf16"),
          wtx.Manifest.from_hf_config(tiny_llama_config, tp=1, rank=0, dtype="bf16")]
    assert ms[0].fingerprint != ms[1].fingerprint
    ps = [wtx.Participant.open(str(tmp_path / f"rank{r}"), ms[r], rank=r,
                               tensors=wtx.module_from_manifest(ms[r])) for r in range(2)]
    with pytest.raises(wtx.Error) as wrong:
        wtx.Coordinator.open(str(tmp_path / "c0"), participants=ps, manifest_groups=[0])
    assert wrong.value.code == "INVALID_ARGUMENT"
    assert "manifest_groups has 1 entries for 2 ranks" in wrong.value.message
    one = wtx.Coordinator.open(str(tmp_path / "c1"), participants=ps)
    with pytest.raises(wtx.Error) as mismatch:
        one.begin("t1")
    assert mismatch.value.code == "E_MANIFEST_MISMATCH", mismatch.value
    one.close()
    stages = wtx.Coordinator.open(str(tmp_path / "c2"), participants=ps, manifest_groups=[0, 1])
    stages.begin("t2")
    stages.abort("t2")
