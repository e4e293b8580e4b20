"""End to end: a tiny Llama with vLLM's fused layout on two TP ranks (separate processes,
torch.distributed over gloo), a trainer process holding HF-named weights, wtx.vllm's worker
extension and 2PC over the engine's own process group (wtx.torch_dist). Torch itself checks
that the bytes landed in the right places: each rank's forward pass equals the trainer's
reference forward pass of the same weights."""

import torch

from harness import run_deployment

K0 = "model.layers.0.self_attn.k_proj.weight"
QKV0 = "model.layers.0.self_attn.qkv_proj.weight"


def assert_matches(logits, ref):
    assert logits.shape == ref.shape
    assert torch.allclose(logits, ref, rtol=1e-4, atol=1e-4), (logits - ref).abs().max()


def test_FullUpdateLandsAndForwardMatchesTrainer(tmp_path):
    engines, refs = run_deployment(tmp_path, [{"tx": "tx1", "seed": 1}])
    for r, steps in enumerate(engines):
        s = steps[0]
        assert s["outcome"]["outcome"] == "committed", s["outcome"]
        assert s["status"]["serving"]
        assert_matches(s["logits"], refs[0])
    assert engines[0][0]["outcome"]["version"] == engines[1][0]["outcome"]["version"]


def test_UpdateWeightsRoutesHfNamesThroughStackedMapping(tmp_path):
    engines, refs = run_deployment(tmp_path, [
        {"tx": "tx1", "seed": 1, "mode": "update_weights"},
        {"tx": "tx2", "seed": 2, "mode": "update_weights"},
    ])
    for steps in engines:
        for i in range(2):
            assert steps[i]["outcome"]["outcome"] == "committed"
            assert_matches(steps[i]["logits"], refs[i])
    # The second update really changed the outputs.
    assert not torch.allclose(refs[0], refs[1])


def test_MissingKProjAbortsAndEmptyUpdateNeverServes(tmp_path):
    engines, refs = run_deployment(tmp_path, [
        {"tx": "tx1", "seed": 1, "skip": [K0]},
        {"tx": "tx2", "seed": 1, "only": []},  # an empty update after the half-failed one
    ])
    for r, steps in enumerate(engines):
        bad, empty = steps
        assert bad["outcome"]["outcome"] == "aborted"
        votes = bad["outcome"]["votes"]
        assert all(v["vote"] == "no" for v in votes)
        assert any(m["param"] == QKV0 and m["shard"] == "k"
                   for v in votes for m in v["missing"]), votes
        assert not bad["status"]["serving"]
        assert empty["outcome"]["outcome"] == "noop"
        assert not empty["status"]["serving"] and empty["status"]["dirty"]


def test_RolledBackPartialUpdateRestoresOutputsExactly(tmp_path):
    layer1 = [n for n in __import__("tiny_llama").hf_weights(0) if ".layers.1." in n]
    engines, refs = run_deployment(tmp_path, [
        {"tx": "tx1", "seed": 1},
        # New layer-1 weights, rolled back: one of them never arrives, so the update aborts.
        {"tx": "tx2", "seed": 2, "only": layer1[:-1],
         "begin": {"kind": "partial", "base": None,
                   "modules": ["model.layers.1.self_attn", "model.layers.1.mlp"],
                   "rollback": True}},
    ])
    for steps in engines:
        good, rolled = steps
        assert good["outcome"]["outcome"] == "committed"
        assert rolled["outcome"]["outcome"] == "aborted"
        assert torch.equal(rolled["logits"], good["logits"])
        assert rolled["status"]["serving"]
        assert rolled["status"]["version"] == good["outcome"]["version"]


NORM = "model.norm.weight"


def test_UndeclaredInPlaceWriteIsCaughtByVerifyAll(tmp_path):
    mlp1 = [n for n in __import__("tiny_llama").hf_weights(0)
            if ".layers.1.mlp." in n or ".layers.1.post_attention_layernorm" in n]
    partial = {"kind": "partial", "base": None, "modules": ["model.layers.1.mlp"]}
    engines, refs = run_deployment(tmp_path, [
        {"tx": "tx1", "seed": 1},
        # A buggy loader also changes the final norm, which this update does not declare.
        {"tx": "tx2", "seed": 2, "only": mlp1, "stray": 3,
         "begin": dict(partial, verify="all")},
    ])
    for steps in engines:
        good, caught = steps
        assert good["outcome"]["outcome"] == "committed"
        o = caught["outcome"]
        assert o["outcome"] == "aborted"
        for v in o["votes"]:  # undeclared, and nothing else wrong with the update
            assert v["vote"] == "no" and v["errors"] == ["E_UNDECLARED_WRITE"], v
        assert not caught["status"]["serving"] and caught["status"]["dirty"]


def test_UndeclaredWriteUnseenByTouchedIsFoundByTheVerifier(tmp_path):
    mlp1 = [n for n in __import__("tiny_llama").hf_weights(0)
            if ".layers.1.mlp." in n or ".layers.1.post_attention_layernorm" in n]
    partial = {"kind": "partial", "base": None, "modules": ["model.layers.1.mlp"]}
    engines, refs = run_deployment(tmp_path, [
        {"tx": "tx1", "seed": 1},
        {"tx": "tx2", "seed": 2, "only": mlp1, "stray": 3, "begin": partial,
         "verify_after": True},
    ])
    for steps in engines:
        o = steps[1]["outcome"]
        assert o["outcome"] == "committed"  # verify="touched" rehashes only what was declared
        v = steps[1]["verify"]
        assert not v["ok"] and v["params"] == [NORM], v


# ------------------------------------------------- parameter identity through the extension
# Two engine processes and a trainer over gloo; rank 0's engine replaces the storage of one
# parameter (harness.REBOUND) as vLLM's post-load processing does.

def test_ExtensionReadoptsRebuiltParameterProvedByVerify(tmp_path):
    """Same bytes in new storage: start_weight_update rebinds, verify proves the bytes, and a
    partial update on that base commits and serves."""
    engines, refs = run_deployment(tmp_path, [
        {"tx": "tx1", "seed": 1},
        {"tx": "tx2", "seed": 2, "rebind_before": {0: "same"},
         "begin": {"kind": "partial", "modules": ["model.layers.1.mlp"]},
         "only": ["model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight",
                  "model.layers.1.mlp.down_proj.weight",
                  "model.layers.1.post_attention_layernorm.weight"]},
    ])
    for steps in engines:
        assert steps[1]["outcome"]["outcome"] == "committed", steps[1]
        assert steps[1]["status"]["serving"]


def test_ExtensionNeverServesUnprovedRebuiltParameter(tmp_path):
    """Other bytes in new storage: a partial update is refused on every rank (the rebound rank
    cannot prove its base); a full update then commits, serves, and matches the trainer."""
    engines, refs = run_deployment(tmp_path, [
        {"tx": "tx1", "seed": 1},
        {"tx": "tx2", "seed": 2, "rebind_before": {0: "zeros"},
         "begin": {"kind": "partial", "modules": ["model.layers.1.mlp"]}, "only": []},
        {"tx": "tx3", "seed": 3},
    ])
    for r, steps in enumerate(engines):
        assert steps[1]["begin_error"] == "E_DIRTY", steps[1]
        assert steps[2]["outcome"]["outcome"] == "committed"
        assert steps[2]["status"]["serving"]
        assert_matches(steps[2]["logits"], refs[2])
    assert not engines[0][1]["status"]["serving"]


def test_ExtensionAbortsWhenStorageMovesMidUpdate(tmp_path):
    engines, refs = run_deployment(tmp_path, [
        {"tx": "tx1", "seed": 1},
        {"tx": "tx2", "seed": 2, "rebind_during": {0: "same"}},
        {"tx": "tx3", "seed": 3},
    ])
    for steps in engines:
        out = steps[1]["outcome"]
        assert out["outcome"] == "aborted"
        assert out["votes"][0]["error"] == "E_STORAGE_MOVED"
        assert not steps[1]["status"]["serving"]
        assert steps[2]["outcome"]["outcome"] == "committed" and steps[2]["status"]["serving"]
    assert engines[0][1]["status"]["storage_moved"] == ["model.layers.0.mlp.down_proj.weight"]
