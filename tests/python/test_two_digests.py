"""Two digests from Python (DESIGN.md, "Two digests"): a block-quantized model (bf16 sent, int8
blocks served with their scales; torch 1.13 has no float8 dtype, int8 stands in for fp8 and
behaves the same for wtx) and an MLA model (kv_b_proj served as sent, W_UK_T/W_UV absorbed
from it). The trainer's wtx.expected_version commits; the served digest is of the live bytes
and verify finds one flipped byte; a delta on the processed model bases on the checkpoint
version."""

import json

import pytest
import torch

import wtx

BLOCK = 32


def quant_manifest():
    return wtx.Manifest.from_json(json.dumps({
        "params": [
            {"name": "mlp.w", "dtype": "bf16", "shape": [128, 96],
             "served": {"dtype": "i8", "shape": [128, 96]},
             "shards": [
                 {"id": "gate", "source": "mlp.gate", "source_shape": [64, 96],
                  "box": [[0, 64], [0, 96]], "source_box": [[0, 64], [0, 96]]},
                 {"id": "up", "source": "mlp.up", "source_shape": [64, 96],
                  "box": [[64, 128], [0, 96]], "source_box": [[0, 64], [0, 96]]}]},
            {"name": "norm", "dtype": "f32", "shape": [96]},
        ],
        "modules": [{"name": "mlp", "params": ["mlp.w"]}, {"name": "norm", "params": ["norm"]}],
        "derived": [{"name": "mlp.w_scale", "sources": ["mlp.w"], "phase": "post_load"}],
    }))


class QuantModel:
    """A block-quantized layer as an engine serves it: its loader takes bf16 checkpoint
    tensors into a staging buffer, post-load processing quantizes per 32x32 block into the
    live int8 weight and the float32 scales."""

    def __init__(self):
        self.weight = torch.zeros(128, 96, dtype=torch.int8)
        self.scale = torch.zeros(128 // BLOCK, 96 // BLOCK, dtype=torch.float32)
        self.norm = torch.zeros(96, dtype=torch.float32)
        self.staged = {}

    def load_weights(self, weights):
        for name, t in weights:
            self.staged[name] = t.clone()

    def process_weights_after_loading(self):
        w = torch.cat([self.staged.pop("mlp.gate"), self.staged.pop("mlp.up")]).float()
        blocks = w.reshape(128 // BLOCK, BLOCK, 96 // BLOCK, BLOCK)
        amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-6)
        self.scale.copy_(amax / 127.0)
        q = (blocks / self.scale[:, None, :, None]).round().clamp(-127, 127)
        self.weight.copy_(q.reshape(128, 96).to(torch.int8))

    def tensors(self):
        return {"mlp.w": self.weight, "norm": self.norm}


def sources(seed):
    g = torch.Generator().manual_seed(seed)
    return {"mlp.gate": torch.randn(64, 96, generator=g).to(torch.bfloat16),
            "mlp.up": torch.randn(64, 96, generator=g).to(torch.bfloat16),
            "norm": torch.randn(96, generator=g)}


def full_update(p, c, model, src, tx, expect=None):
    c.begin(tx)
    for name in ("mlp.gate", "mlp.up"):
        assert p.declare_source(name, src[name]) == 1
        model.load_weights([(name, src[name])])
    model.process_weights_after_loading()
    p.write_source("norm", src["norm"])
    p.refresh("*")
    return c.commit(tx, expect_version=expect)


@pytest.fixture
def quant(tmp_path):
    m = quant_manifest()
    model = QuantModel()
    p = wtx.Participant.open(str(tmp_path / "rank0"), m, tensors=model.tensors(),
                             kernel_identity="k1")
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=[p])
    yield m, model, p, c
    c.close()
    p.close()


def test_TheTrainersExpectedVersionCommitsAQuantizedModel(quant):
    m, model, p, c = quant
    src = sources(1)
    expected = wtx.expected_version([m], src)["version"]
    out = full_update(p, c, model, src, "t1", expect=expected)
    assert out["outcome"] == "committed", out["error"]
    assert out["version"] == expected
    assert out["served_digest"] and out["served_digest"] != expected
    assert out["votes"][0]["served_digest"] != out["votes"][0]["digest"]
    st = p.status()
    assert st["version"] == expected and st["served_digest"] == out["served_digest"]
    assert st["serving"]
    assert p.verify()["ok"]
    # The history says both, the decisions too.
    assert c.decisions()[-1]["served_digest"] == out["served_digest"]
    # The served digest can be expected too (a copy of a peer's live bytes): the same bytes
    # again commit it; another expectation aborts.
    c.begin("t1b")
    for name in ("mlp.gate", "mlp.up"):
        p.declare_source(name, src[name])
        model.load_weights([(name, src[name])])
    model.process_weights_after_loading()
    p.write_source("norm", src["norm"])
    p.refresh("*")
    again = c.commit("t1b", expect_version=expected, expect_served_digest=out["served_digest"])
    assert again["outcome"] == "committed" and again["served_digest"] == out["served_digest"]
    with pytest.raises(wtx.Error):
        c.commit("t1c", expect_served_digest="")
    # Expecting the served digest is expecting bytes the trainer never sent.
    out = full_update(p, c, model, sources(2), "t2", expect=out["served_digest"])
    assert out["outcome"] == "aborted" and out["error"]["code"] == "E_VERSION_MISMATCH"


def test_VerifyFindsOneFlippedServedByte(quant):
    m, model, p, c = quant
    assert full_update(p, c, model, sources(3), "t1")["outcome"] == "committed"
    model.weight.view(-1)[1000] ^= 0x08
    rep = p.verify()
    assert not rep["ok"] and rep["params"] == ["mlp.w"]
    assert not p.status()["serving"]


def test_ADeltaOnTheQuantizedModelBasesOnTheCheckpointVersion(quant):
    m, model, p, c = quant
    src = sources(4)
    full = full_update(p, c, model, src, "t1")
    with pytest.raises(wtx.Error) as e:
        c.begin("t2", kind="delta", base=full["served_digest"], sources=["norm"])
    assert e.value.code == "E_BASE_MISMATCH"
    c.begin("t3", kind="delta", base=full["version"], sources=["norm"])
    p.patch("norm", torch.tensor([5]), torch.tensor([0.25]))
    src["norm"][5] = 0.25
    out = c.commit("t3", expect_version=wtx.expected_version([m], src)["version"])
    assert out["outcome"] == "committed", out["error"]
    # A processed parameter takes no patch: its live bytes are not checkpoint bytes.
    c.begin("t4", kind="delta", base=out["version"], sources=["mlp.gate"])
    with pytest.raises(wtx.Error) as e:
        p.patch("mlp.gate", torch.tensor([0]), torch.tensor([1.0], dtype=torch.bfloat16))
    assert e.value.code == "E_BAD_WRITE" and "'mlp.w' is processed" in e.value.message
    c.abort("t4")


def test_AProcessedParameterIsNeverWrittenInPlace(quant):
    m, model, p, c = quant
    src = sources(5)
    c.begin("t1")
    with pytest.raises(wtx.Error) as e:
        p.write_source("mlp.gate", src["mlp.gate"])
    assert e.value.code == "E_BAD_WRITE" and "declare" in e.value.message
    with pytest.raises(wtx.Error) as e:
        p.reserve_source("mlp.up")
    assert e.value.code == "E_BAD_WRITE"
    with pytest.raises(wtx.Error) as e:
        p.declare_source("norm", src["norm"])
    assert "not processed" in e.value.message
    c.abort("t1")


def mla_manifest():
    """kv_b_proj as sent; W_UK_T and W_UV absorbed from it by the engine (served only: padding
    shards, no source), so their live bytes count in the served digest."""
    absorbed = [{"id": "absorbed", "layout": "padding", "box": [[0, 32], [0, 32]]}]
    return wtx.Manifest.from_json(json.dumps({
        "params": [{"name": "kv_b_proj", "dtype": "bf16", "shape": [64, 32]},
                   {"name": "q_proj", "dtype": "bf16", "shape": [32, 32]},
                   {"name": "W_UK_T", "dtype": "bf16", "shape": [32, 32],
                    "served": {"dtype": "bf16", "shape": [32, 32]}, "shards": absorbed},
                   {"name": "W_UV", "dtype": "bf16", "shape": [32, 32],
                    "served": {"dtype": "bf16", "shape": [32, 32]}, "shards": absorbed}],
        "modules": [{"name": "attn", "params": ["kv_b_proj", "q_proj", "W_UK_T", "W_UV"]}],
        "derived": [{"name": "absorb", "sources": ["kv_b_proj"], "phase": "attention"}],
    }))


def test_AnMlaModelCommitsTheCheckpointVersionAndVerifiesItsAbsorbedBytes(tmp_path):
    m = mla_manifest()
    live = {"kv_b_proj": torch.zeros(64, 32, dtype=torch.bfloat16),
            "q_proj": torch.zeros(32, 32, dtype=torch.bfloat16),
            "W_UK_T": torch.zeros(32, 32, dtype=torch.bfloat16),
            "W_UV": torch.zeros(32, 32, dtype=torch.bfloat16)}
    p = wtx.Participant.open(str(tmp_path / "r"), m, tensors=live, kernel_identity="mla")
    c = wtx.Coordinator.open(str(tmp_path / "c"), participants=[p])
    g = torch.Generator().manual_seed(7)
    src = {n: torch.randn(live[n].shape, generator=g).to(torch.bfloat16)
           for n in ("kv_b_proj", "q_proj")}
    c.begin("t1")
    for n, t in src.items():
        p.write_source(n, t)
    # The engine's absorption (MLA's process_weights_after_loading) writes W_UK_T and W_UV
    # from kv_b_proj; the trainer sends neither.
    w_uk, w_uv = live["kv_b_proj"].float().split(32)
    live["W_UK_T"].copy_(w_uk.t())
    live["W_UV"].copy_(w_uv)
    p.refresh("*")
    expected = wtx.expected_version([m], src)["version"]
    out = c.commit("t1", expect_version=expected)
    assert out["outcome"] == "committed", out["error"]
    assert out["version"] == expected
    assert out["served_digest"] != expected  # the absorbed bytes are served, not sent
    assert p.verify()["ok"]
    live["W_UV"].view(torch.int16).view(-1)[17] ^= 1
    rep = p.verify()
    assert not rep["ok"] and rep["params"] == ["W_UV"]
    c.begin("t2")
    with pytest.raises(wtx.Error) as e:  # nothing is written for it either
        p.write("W_UV", live["W_UV"].clone())
    assert e.value.code == "E_BAD_WRITE" and "'W_UV' is processed" in e.value.message
    c.abort("t2")
    c.close()
    p.close()


# ---------------------------------------------- through the vLLM backend (one process, TP 1)

class QuantModule(torch.nn.Module):
    """The quantized layer as a vLLM model serves it: int8 weight and scales in place, and a
    loader that stages the bf16 checkpoint parts and processes a layer once both have come
    (vLLM's layerwise reload processes each layer as it completes)."""

    def __init__(self):
        super().__init__()
        self.q = QuantModel()
        self.w = torch.nn.Parameter(self.q.weight, requires_grad=False)
        self.n = torch.nn.Parameter(self.q.norm, requires_grad=False)

    def named_parameters(self, *args, **kwargs):
        return iter([("mlp.w", self.w), ("norm", self.n)])

    def load_weights(self, weights):
        for name, t in weights:
            if name == "norm":
                self.n.data.copy_(t)
            else:
                self.q.load_weights([(name, t)])
        if {"mlp.gate", "mlp.up"} <= set(self.q.staged):
            self.q.process_weights_after_loading()
        return {name for name, _ in weights}


class GivenTensors:
    """An inner transport whose received tensors are given (the older contract)."""

    tensors: dict = {}

    def __init__(self, config, parallel_config):
        pass

    def parse_init_info(self, d):
        import types
        return types.SimpleNamespace(**d)

    def parse_update_info(self, d):
        import types
        return types.SimpleNamespace(**d)

    def init_transfer_engine(self, info):
        pass

    def start_weight_update(self):
        pass

    def finish_weight_update(self):
        pass  # the model processed each layer as it completed (its load_weights)

    def receive_weights(self, info, load_weights):
        for name in info.names:
            load_weights([(name, self.tensors[name])])

    def shutdown(self):
        pass


@pytest.fixture
def vllm_quant(tmp_path):
    import datetime
    import wtx.vllm
    from conftest import free_port
    from vllm_doubles import install_fake_vllm, vllm_config, weight_transfer_config
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                                world_size=1, timeout=datetime.timedelta(seconds=30))
    install_fake_vllm()
    wtx.vllm.register_inner("given-tensors", GivenTensors)
    model = QuantModule()
    eng = wtx.vllm.WtxWeightTransferEngine(weight_transfer_config(), vllm_config(1, 0),
                                           torch.device("cpu"), model)
    eng.init_transfer_engine({"journal_dir": str(tmp_path / "r"),
                              "coordinator_journal": str(tmp_path / "c"),
                              "inner": "given-tensors", "inner_init_info": {},
                              "manifest": quant_manifest().to_json()})
    yield eng, model
    eng.shutdown()
    dist.destroy_process_group()


def _round(eng, src, tx, **wtx_info):
    GivenTensors.tensors = src
    eng.start_weight_update()
    eng.update_weights({"names": list(src), "wtx": dict(tx=tx, **wtx_info)})
    return eng.finish_weight_update()


def test_TheVllmBackendDeclaresProcessedSourcesAndCommitsTheTrainersVersion(vllm_quant):
    eng, model = vllm_quant
    src = sources(11)
    expected = wtx.expected_version([quant_manifest()], src)["version"]
    _round(eng, src, "t1", expect_version=expected)
    st = eng.participant.status()
    assert st["version"] == expected and st["serving"]
    assert st["served_digest"] != expected
    # The engine's processing ran: the live int8 weight is the quantized checkpoint.
    ref = QuantModel()
    ref.load_weights(list(src.items()))
    ref.process_weights_after_loading()
    assert torch.equal(model.w.data, ref.weight)
    # A transport that corrupts one byte of a processed source on the way: the checkpoint
    # version no longer matches, the update aborts and nothing serves mixed bytes.
    bad = {k: v.clone() for k, v in sources(12).items()}
    want = wtx.expected_version([quant_manifest()], bad)["version"]
    bad["mlp.up"].view(torch.int16).view(-1)[3] ^= 1
    with pytest.raises(wtx.Error) as e:
        _round(eng, bad, "t2", expect_version=want)
    assert "E_VERSION_MISMATCH" in str(e.value)
    assert not eng.participant.status()["serving"]


def test_TheEnginesReceivePathDeclaresProcessedSourcesAndLoadsThemThroughTheModel(quant):
    """The receive path both engine integrations share (wtx._receive.load_one, the SGLang
    adapter's and the vLLM backend's): a processed source is declared and handed to the
    model's own loader; any other goes its usual way."""
    from wtx._receive import load_one, processed_sources
    m, model, p, c = quant
    processed = processed_sources(p)
    assert processed == {"mlp.gate", "mlp.up"}
    src = sources(21)
    c.begin("t1")
    for name in ("mlp.gate", "mlp.up"):
        load_one(p, model, "write_source", name, src[name], processed)
    assert set(model.staged) == {"mlp.gate", "mlp.up"}  # the model's loader took them
    model.process_weights_after_loading()
    load_one(p, model, "write_source", "norm", src["norm"], processed)
    p.refresh("*")
    out = c.commit("t1", expect_version=wtx.expected_version([m], src)["version"])
    assert out["outcome"] == "committed", out["error"]
