"""Parameter identity (issue 35): what an engine may do to its parameters. Every path a
participant can be bound through (a module, a mapping of Parameters, bare tensors, the
reserve/landed path) against every change an engine makes to its memory (`.data` rebinding,
a new Parameter set on the module, a `.contiguous()` re-copy, `resize_(0)`, a shrunken storage,
a changed dtype): no update ends committed while the engine's parameter holds other bytes, no
process crashes, and after rebind() only a verify or a full commit serves again."""

import pytest
import torch
from torch import nn

import wtx

P = "model.layers.0.mlp.down_proj.weight"  # the parameter the engine changes (rank 0)


module_from_manifest = wtx.module_from_manifest


def owner_of(root, name):
    *path, leaf = name.split(".")
    mod = root
    for part in path:
        mod = mod._modules[part]
    return mod, leaf


def sources_for(ms, seed):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for m in ms:
        for p in m.params:
            for s in p["shards"]:
                out.setdefault(s["source"],
                               torch.randn(s["source_shape"], generator=g).to(torch.bfloat16))
    return out


def bind(engine, how):
    if how == "module":
        return engine
    if how == "params":
        return dict(engine.named_parameters())
    return {n: p.data for n, p in engine.named_parameters()}  # bare tensors, dict not kept


class Cluster:
    def __init__(self, tmp_path, config, how):
        self.ms = [wtx.Manifest.from_hf_config(config, tp=2, rank=r, dtype="bf16") for r in (0, 1)]
        self.engines = [module_from_manifest(m) for m in self.ms]
        self.ps = [wtx.Participant.open(str(tmp_path / f"rank{r}"), self.ms[r], rank=r,
                                        tensors=bind(self.engines[r], how), threads=1)
                   for r in (0, 1)]
        self.c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=self.ps)

    def full(self, tx, seed, hazard_during=None):
        src = sources_for(self.ms, seed)
        self.c.begin(tx)
        for p in self.ps:
            for name, t in src.items():
                p.write_source(name, t)
        if hazard_during:
            hazard_during()
        return self.c.commit(tx)

    def engine_param(self, r=0, name=P):
        owner, leaf = owner_of(self.engines[r], name)
        return getattr(owner, leaf)


def same_bytes_copy(t):
    return t.detach().clone()


# Each hazard changes rank 0's parameter P the way engines do. `valid`: whether the engine's new
# tensor can be adopted as it is (same dtype, shape, contiguous, holding the parameter's bytes).
def h_data(e):
    owner, leaf = owner_of(e, P)
    getattr(owner, leaf).data = same_bytes_copy(getattr(owner, leaf).data)


def h_setattr(e):
    owner, leaf = owner_of(e, P)
    setattr(owner, leaf, nn.Parameter(same_bytes_copy(getattr(owner, leaf).data),
                                      requires_grad=False))


def h_contiguous(e):
    owner, leaf = owner_of(e, P)
    p = getattr(owner, leaf)
    p.data = p.data.t().contiguous().t().contiguous()  # a re-layout and back: a new copy


def h_resize0(e):
    owner, leaf = owner_of(e, P)
    getattr(owner, leaf).data.storage().resize_(0)  # FSDP-style offload frees the bytes


def h_shrink(e):
    owner, leaf = owner_of(e, P)
    p = getattr(owner, leaf)
    p.data.storage().resize_(p.numel() // 2)


def h_dtype(e):
    owner, leaf = owner_of(e, P)
    p = getattr(owner, leaf)
    p.data = p.data.to(torch.float16)


HAZARDS = {"data": (h_data, True), "setattr": (h_setattr, True),
           "contiguous": (h_contiguous, True), "resize0": (h_resize0, False),
           "shrink": (h_shrink, False), "dtype": (h_dtype, False)}


def fix_engine(e, shape):
    """The engine gives P proper storage again (zeros: not the committed bytes)."""
    owner, leaf = owner_of(e, P)
    getattr(owner, leaf).data = torch.zeros(shape, dtype=torch.bfloat16)


@pytest.mark.parametrize("how", ["module", "params", "tensors"])
@pytest.mark.parametrize("hazard", sorted(HAZARDS))
@pytest.mark.parametrize("when", ["between", "during"])
def test_ChangedStorageNeverCommitsNorCrashes(tmp_path, tiny_llama_config, how, hazard, when):
    cl = Cluster(tmp_path, tiny_llama_config, how)
    assert cl.full("step-1", 1)["outcome"] == "committed"
    assert cl.ps[0].status()["serving"]
    fn, valid = HAZARDS[hazard]
    if when == "between":
        fn(cl.engines[0])
        with pytest.raises(wtx.Error) as e:
            cl.full("step-2", 2)
        assert e.value.code == "E_STORAGE_MOVED" and P in e.value.message
        # The refused attempt is on the coordinator's record, with its reason.
        refused = [h for h in wtx.history(str(tmp_path / "coord")) if h["tx"] == "step-2"]
        assert refused and refused[-1]["outcome"] == "refused"
        assert "E_STORAGE_MOVED" in refused[-1]["reason"]
    else:
        out = cl.full("step-2", 2, hazard_during=lambda: fn(cl.engines[0]))
        assert out["outcome"] == "aborted"
        v0 = out["votes"][0]
        assert v0["vote"] == "no" and v0["error"] == "E_STORAGE_MOVED" and P in v0["message"]
    st = cl.ps[0].status()
    assert not st["serving"] and st["dirty"] and st["storage_moved"] == [P]
    with pytest.raises(wtx.Error) as e:
        cl.ps[0].verify()
    assert e.value.code == "E_STORAGE_MOVED"
    # The history says so, naming the parameter.
    moved = [r for r in wtx.history(str(tmp_path / "rank0")) if r.get("tx") == "step-2"]
    assert not moved or moved[0]["outcome"] != "committed"
    # The way back.
    if how == "tensors" or (how == "params" and hazard == "setattr"):
        # What the engine dropped (a bare tensor, a Parameter replaced on the module) cannot be
        # adopted: only a participant bound to the module follows the new object.
        with pytest.raises(wtx.Error) as e:
            cl.ps[0].rebind()
        assert P in e.value.message
        return
    if not valid:
        with pytest.raises(wtx.Error) as e:
            cl.ps[0].rebind()
        assert P in e.value.message
        assert not cl.ps[0].status()["serving"]
        fix_engine(cl.engines[0], next(p["shape"] for p in cl.ms[0].params if p["name"] == P))
    changes = cl.ps[0].rebind()
    assert [c["param"] for c in changes] == [P]
    assert not cl.ps[0].status()["serving"]  # rebound, not proved
    rep = cl.ps[0].verify()
    if valid and when == "between":
        # The engine copied the committed bytes: verify proves them and the rank serves.
        assert rep["ok"], rep["message"]
        assert cl.ps[0].status()["serving"]
    else:
        assert not rep["ok"] and not cl.ps[0].status()["serving"]
    # A full update always serves again, with exactly the sent bytes in the engine's tensor.
    out = cl.full("step-3", 3)
    assert out["outcome"] == "committed", out
    assert all(p.status()["serving"] for p in cl.ps)
    src = sources_for(cl.ms, 3)
    live = cl.engine_param()
    expect = src[P][:, :live.shape[1]] if live.shape[1] != src[P].shape[1] else src[P]
    assert torch.equal(live.view(torch.int16), expect.contiguous().view(torch.int16))


def test_ReserveLandedRefusesMovedStorage(tmp_path, tiny_llama_config):
    cl = Cluster(tmp_path, tiny_llama_config, "module")
    assert cl.full("step-1", 1)["outcome"] == "committed"
    cl.c.begin("step-2")
    h_data(cl.engines[0])
    with pytest.raises(wtx.Error) as e:
        cl.ps[0].reserve(P)
    assert e.value.code == "E_STORAGE_MOVED"
    out = cl.c.commit("step-2")
    assert out["outcome"] != "committed"
    # Reserved before the move, landed after: the landing is refused, nothing committed.
    cl.ps[0].rebind()
    cl.c.begin("step-3")
    view = cl.ps[0].reserve(P)
    view.fill_(1)
    h_data(cl.engines[0])
    with pytest.raises(wtx.Error) as e:
        cl.ps[0].landed(P)
    assert e.value.code == "E_STORAGE_MOVED"
    assert cl.c.commit("step-3")["outcome"] == "aborted"
    assert not cl.ps[0].status()["serving"]


def test_LiveViewFollowsTheEnginesTensor(tmp_path, tiny_llama_config):
    """reserve() hands out a view of the engine's tensor as it is now, after a rebind."""
    cl = Cluster(tmp_path, tiny_llama_config, "module")
    h_data(cl.engines[0])
    cl.ps[0].rebind()
    cl.c.begin("step-1")
    view = cl.ps[0].reserve(P)
    assert view.data_ptr() == cl.engine_param().data_ptr()


def test_SecondOpenOfAHeldJournalNamesTheHolder(tmp_path, tiny_llama_config):
    m = wtx.Manifest.from_hf_config(tiny_llama_config, tp=2, rank=0, dtype="bf16")
    with wtx.Participant.open(str(tmp_path / "r0"), m, rank=0) as p:
        with pytest.raises(wtx.Error) as e:
            wtx.Participant.open(str(tmp_path / "r0"), m, rank=0)
        assert "already open in this process" in e.value.message and "close" in e.value.message
        assert p.status()["rank"] == 0
    # Closed by the with-block: a new open re-initializes.
    p2 = wtx.Participant.open(str(tmp_path / "r0"), m, rank=0)
    p2.close()
    with pytest.raises(wtx.Error) as e:
        p2.status()
    assert "closed" in e.value.message


def test_MisspelledSourceIsAnErrorNamingTheClosest(tmp_path, tiny_llama_config):
    cl = Cluster(tmp_path, tiny_llama_config, "module")
    cl.c.begin("tx")
    t = torch.zeros(4)
    with pytest.raises(wtx.Error) as e:
        cl.ps[0].write_source("model.layers.0.self_attn.q_prj.weight", t)
    assert e.value.code == "E_UNKNOWN_SOURCE"
    assert "model.layers.0.self_attn.q_proj.weight" in e.value.message


def test_OtherFloatDtypesAreConvertedAsTorchDoes(tmp_path, tiny_llama_config):
    cl = Cluster(tmp_path, tiny_llama_config, "module")
    g = torch.Generator().manual_seed(5)
    src32 = {}
    for m in cl.ms:
        for p in m.params:
            for s in p["shards"]:
                src32.setdefault(s["source"], torch.randn(s["source_shape"], generator=g))
    expect = wtx.expected_version(cl.ms, {n: t.to(torch.bfloat16) for n, t in src32.items()})
    assert wtx.expected_version(cl.ms, src32)["version"] == expect["version"]
    cl.c.begin("tx")
    for p in cl.ps:
        for i, (name, t) in enumerate(src32.items()):
            # fp32, fp16 and non-contiguous sources, all converted round-to-nearest-even.
            given = t if i % 3 == 0 else (t.to(torch.float16).to(torch.float32) if i % 3 == 1
                                          else t.t().contiguous().t() if t.dim() == 2 else t)
            if i % 3 == 1:
                src32[name] = given
            p.write_source(name, given)
    out = cl.c.commit("tx")
    assert out["outcome"] == "committed"
    assert out["version"] == wtx.expected_version(
        cl.ms, {n: t.to(torch.bfloat16) for n, t in src32.items()})["version"]


def test_NoopReadsAsNoop(tmp_path, tiny_llama_config):
    cl = Cluster(tmp_path, tiny_llama_config, "module")
    cl.c.begin("empty")
    out = cl.c.commit("empty")
    assert out["outcome"] == "noop"
    assert all(v["vote"] == "noop" and v["error"] is None and not v["missing"]
               for v in out["votes"])


def test_AbortedIsAnErrorCarryingTheDecision():
    assert issubclass(wtx.Aborted, wtx.Error)
    decision = {"outcome": "aborted", "error": {"code": "E_VOTE_NO", "message": "a rank voted no"},
                "votes": [{"rank": 0, "vote": "no", "error": "E_COVERAGE_INCOMPLETE",
                           "message": "missing", "missing": [{"param": "w", "shard": "q"}]}]}
    e = wtx.Aborted("tx1", decision)
    assert e.code == "E_VOTE_NO" and e.decision is decision
    assert e.missing == [{"param": "w", "shard": "q", "rank": 0}]
    assert "tx1" in str(e) and "E_COVERAGE_INCOMPLETE" in str(e)


def test_ForkedChildDroppingAParticipantDoesNotHang(tmp_path, tiny_llama_config):
    """A forked child (multiprocessing, a data loader) that garbage-collects an inherited
    participant or coordinator must not join threads it does not have."""
    import gc
    import os
    import time
    cl = Cluster(tmp_path, tiny_llama_config, "module")
    assert cl.full("step-1", 1)["outcome"] == "committed"
    pid = os.fork()
    if pid == 0:
        cl.c = None
        cl.ps = None
        gc.collect()
        os._exit(0)
    deadline = time.time() + 30
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child hung destroying an inherited participant")
    assert cl.ps[0].status()["serving"]  # the parent's participant is untouched


@pytest.mark.parametrize("how", ["module", "params"])
def test_FreedThenReallocatedAtTheSameAddressIsStillSeen(tmp_path, tiny_llama_config, how):
    """The engine frees the bound storage and gives the parameter a new one, with no wtx call
    in between: the allocator may hand out the very same address (same size), yet the bytes are
    not the committed ones. The pin on the bound storage shows it was freed."""
    cl = Cluster(tmp_path, tiny_llama_config, how)
    assert cl.full("step-1", 1)["outcome"] == "committed"
    param = cl.engine_param()
    shape = list(param.shape)
    param.data.storage().resize_(0)
    param.data = torch.zeros(shape, dtype=torch.bfloat16)  # often at the freed address
    st = cl.ps[0].status()
    assert not st["serving"] and st["storage_moved"] == [P]
    assert [c["param"] for c in cl.ps[0].rebind()] == [P]
    assert not cl.ps[0].verify()["ok"]
    assert cl.full("step-2", 2)["outcome"] == "committed"
    assert cl.ps[0].status()["serving"]


def test_TiedParametersUnderAnUntiedManifestAreRefusedNamingBoth(tmp_path):
    """Issue 45, 3: a module whose lm_head IS its embedding (tied) under a manifest that lists
    both, and overlapping views of one tensor: refused when the rank opens, naming both."""
    m = wtx.Manifest.from_json(
        '{"params": [{"name": "embed.weight", "dtype": "f32", "shape": [8, 4]},'
        ' {"name": "lm_head.weight", "dtype": "f32", "shape": [8, 4]}]}')
    model = nn.Module()
    model.embed = nn.Module()
    model.embed.weight = nn.Parameter(torch.zeros(8, 4), requires_grad=False)
    model.lm_head = nn.Module()
    model.lm_head.weight = model.embed.weight  # tied
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "tied"), m, tensors=model)
    assert "'embed.weight'" in e.value.message and "'lm_head.weight'" in e.value.message
    assert "share storage" in e.value.message
    base = torch.zeros(8 * 4 + 4)
    views = {"embed.weight": base[:32].view(8, 4), "lm_head.weight": base[4:36].view(8, 4)}
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "views"), m, tensors=views)
    assert "share storage" in e.value.message
    untied = {"embed.weight": torch.zeros(8, 4), "lm_head.weight": torch.zeros(8, 4)}
    wtx.Participant.open(str(tmp_path / "ok"), m, tensors=untied).close()
