"""wtx.vllm without vLLM: the manifest of a live module with vLLM's fused layout, and the worker
extension's calls in one process (the multi-process path is in test_e2e.py)."""

import pytest
import torch

import wtx
from tiny_llama import CONFIG, TpLlama
from wtx.vllm import LLAMA_STACKED_PARAMS_MAPPING, manifest_from_module

HF_CONFIG = {"model_type": "llama", "hidden_size": CONFIG["hidden"],
             "intermediate_size": CONFIG["inter"], "num_attention_heads": CONFIG["heads"],
             "num_key_value_heads": CONFIG["kv_heads"], "num_hidden_layers": CONFIG["layers"],
             "vocab_size": CONFIG["vocab"], "tie_word_embeddings": False,
             "head_dim": CONFIG["head"]}


@pytest.mark.parametrize("tp", [1, 2, 4])  # tp 4 > 2 KV heads: KV heads replicated
def test_ManifestFromModuleEqualsHfConfigManifest(tp):
    for rank in range(tp):
        hf = wtx.Manifest.from_hf_config(HF_CONFIG, tp=tp, rank=rank, dtype="bf16")
        mm = manifest_from_module(TpLlama(tp, rank, None), LLAMA_STACKED_PARAMS_MAPPING, tp, rank)
        assert mm.params == hf.params, (tp, rank)
        assert mm.modules == hf.modules
        assert mm.fingerprint == hf.fingerprint


def test_FusedParamWithoutItsShardEntryIsRefused():
    mapping = [e for e in LLAMA_STACKED_PARAMS_MAPPING if e[2] != "k"]
    with pytest.raises(wtx.Error) as e:
        manifest_from_module(TpLlama(2, 0, None), mapping, 2, 0)
    assert "qkv_proj" in e.value.message and "'k'" in e.value.message


def test_PaddedVocabularyIsRefusedNamingTheParam():
    model = TpLlama(2, 0, None)
    model.model.embed_tokens.num_embeddings_padded = CONFIG["vocab"] + 64
    with pytest.raises(wtx.Error) as e:
        manifest_from_module(model, LLAMA_STACKED_PARAMS_MAPPING, 2, 0)
    assert "model.embed_tokens.weight" in e.value.message


def test_WorkerExtensionRefreshesDerivedStateThroughItsHook(tmp_path):
    import datetime
    import torch.distributed as dist
    from conftest import free_port
    from harness import Worker
    from tiny_llama import hf_weights

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=30))
    try:
        w = Worker(TpLlama(1, 0, None))
        derived = [{"name": "rope_cache", "sources": ["model.layers.0.self_attn.qkv_proj.weight"],
                    "phase": "attention"}]
        w.init_wtx(str(tmp_path / "r0"), str(tmp_path / "coord"), derived=derived)
        calls = []
        weights = hf_weights(1)
        w.start_weight_update("tx1")
        assert w.update_weights(weights.items()) == len(weights)  # one shard per source at tp 1
        with pytest.raises(wtx.Aborted) as e:  # no hook: the stale derived state votes no
            w.finish_weight_update()
        out = e.value.decision
        assert out["outcome"] == "aborted" and not w.wtx_status()["serving"]
        assert out["votes"][0]["error"] == "E_STALE_DERIVED"
        assert out["votes"][0]["stale"] == ["rope_cache"]
        w.register_refresh_hook(calls.append)
        w.start_weight_update("tx2")
        w.update_weights(weights.items())
        out = w.finish_weight_update()
        assert out["outcome"] == "committed" and calls == [["rope_cache"]]
        assert w.wtx_status()["serving"]
        ref = weights["model.layers.1.mlp.up_proj.weight"]
        live = w.model.model.layers[1].mlp.gate_up_proj.weight
        assert torch.equal(live[CONFIG["inter"]:], ref)
        with pytest.raises(wtx.Error) as e:
            w.update_weights([])
        assert e.value.code == "E_NO_TX"
    finally:
        dist.destroy_process_group()
