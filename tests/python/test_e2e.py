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
