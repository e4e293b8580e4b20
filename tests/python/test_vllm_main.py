"""wtx inside vLLM as vLLM's own code runs it (issue 43), against doubles that mirror vLLM's
source function by function (vllm_double/README.md): the engine built by vLLM's factory in a
Worker that loaded the general plugins, driven by vLLM's NCCL trainer engine (wrapped by wtx's
"wtx" trainer engine) through vLLM's HTTP client, the dev-mode routes, AsyncLLM, the engine
core and the executor's collective_rpc, with vLLM's layerwise reload and post-load processing
on the served model. TP 2 workers (global ranks 1, 2) and a trainer process (global rank 0)
over gloo. Aborts are judged by the served model: a forward pass through the engine core after
an abort equals the previous version's output or is refused."""

import os

import pytest
import torch
from vllm_world import (UPDATE_GROUP_ADDRESS, Front, Layout, Source, groups,  # first: puts
                        plugin_path, worker_main)  # vLLM's doubles where `import vllm` finds them

import wtx
import wtx.vllm
from harness import IDS, run_world
from tiny_llama import hf_weights, reference_forward

TP = 2


def make_model(tp, tp_rank, group):
    from vllm_model import VllmLlama
    return VllmLlama(tp, tp_rank, group)


def assert_matches(logits, ref):
    assert torch.allclose(logits, ref, atol=2e-2, rtol=2e-2), (logits - ref).abs().max()


class _FailOnce:
    def __init__(self, name, ranks):
        self.name, self.ranks = name, ranks

    def __call__(self, worker, tp_rank):
        if tp_rank in self.ranks:
            worker.model_runner.model.fail_on = self.name


def _clear_failures(worker, tp_rank):
    worker.model_runner.model.fail_on = None


def _manifest_json(worker, tp_rank):
    return worker.weight_transfer_engine.participant.manifest.to_json()


def _scales(worker, tp_rank):
    return [layer.self_attn.o_proj.weight_scale.clone()
            for layer in worker.model_runner.model.model.layers]


def _scales_fresh(worker, tp_rank):
    return worker.model_runner.model.scales_fresh()


def _trainer_engine(front, args, manifests, source, gate="hold", prefix="step", tp=TP,
                    packed=True, journal="rank{rank}", coordinator="coord", **wire):
    from vllm.distributed.weight_transfer.base import WeightTransferInitInfo  # noqa: F401
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
    d = args["dir"]
    info = wtx.vllm.WtxTrainerInitInfo(
        inner="nccl",
        inner_init_info={"master_address": UPDATE_GROUP_ADDRESS[0],
                         "master_port": UPDATE_GROUP_ADDRESS[1], "world_size": tp + 1,
                         "packed": packed, **wire},
        engine_init_info={"journal_dir": os.path.join(d, journal),
                          "coordinator_journal": os.path.join(d, coordinator),
                          "serving_gate": gate},
        manifests=manifests, tx_prefix=prefix, rank=0)
    return WeightTransferTrainerFactory.trainer_init(
        info, client=HTTPVLLMWeightSyncClient(front.url), source=source)


def _manifests(front):
    return front.to_workers(_manifest_json)


def world(target, args, tp=TP, reload_mode="layerwise", model=make_model, layout=None):
    plugins = plugin_path()
    layout = layout or Layout(tp)

    def entry(rank, size, a):
        g = groups(tp, layout)
        if rank == 0:
            front = Front(tp, g, plugins)
            try:
                return target(front, a)
            finally:
                front.close()
        return worker_main(rank, tp, g, model, plugins, reload_mode)

    results, _ = run_world(entry, layout.workers + 1, args, timeout=150)
    return results


def _forward(front):
    """One scheduling step of the engine core (a forward pass on every worker)."""
    return front.core.step(IDS)


def _post(front, route, body=None):
    from vllm.distributed.weight_transfer.clients import HTTPError, post
    try:
        return 200, post(front.url, route, body)
    except HTTPError as e:
        return e.status, e.body


def _get(front, route):
    from vllm.distributed.weight_transfer.clients import HTTPError, get
    try:
        return 200, get(front.url, route)
    except HTTPError as e:
        return e.status, e.body


# ------------------------------------------------------------------------------------ cases

def _full_then_hold_then_full(front, args):
    out = {}
    w1, w2, w3 = hf_weights(1), hf_weights(2), hf_weights(3)
    # The manifests come from the engine ranks once they are initialized; the first update
    # runs without an expected version.
    engine = _trainer_engine(front, args, None, Source(w1))
    engine.send_weights()
    out["after_first"] = _forward(front)
    manifests = _manifests(front)
    # A loader failing on rank 1 alone: every rank aborts, the TP group holds.
    front.to_workers(_FailOnce("model.layers.1.mlp.down_proj.weight", {1}))
    engine = _trainer_engine(front, args, manifests, Source(w2))
    with pytest.raises(Exception) as failed:
        engine.send_weights()
    out["failure"] = str(failed.value)
    out["resume_held"] = _post(front, "resume")
    out["weight_info_held"] = _get(front, "weight_info")
    # The trainer never paused: wtx paused vLLM's scheduler itself, so the engine core runs
    # no step the workers would refuse (vLLM's core dies on a worker's error) and says paused.
    out["paused_held"] = _get(front, "is_paused")
    out["forward_held"] = _forward(front)
    out["core_alive"] = not front.core.errored
    # The worker's own refusal stays the last line.
    with pytest.raises(Exception) as refused:
        front.executor.execute_model(IDS)
    out["execute_held"] = str(refused.value)
    front.to_workers(_clear_failures)
    # The next full update commits on every rank: wtx lifts the pause it made.
    engine = _trainer_engine(front, args, manifests, Source(w3), prefix="again")
    engine.send_weights()
    out["paused_after"] = _get(front, "is_paused")
    out["resume_after"] = _post(front, "resume")
    out["weight_info_after"] = _get(front, "weight_info")
    out["after_third"] = _forward(front)
    return out


def test_RankFailingAloneAbortsEveryRankHoldsAndTheNextFullUpdateServes(tmp_path):
    r = world(_full_then_hold_then_full, {"dir": str(tmp_path)})
    front = r[0]
    assert_matches(front["after_first"], reference_forward(hf_weights(1), IDS))
    # vLLM reports wtx's error, naming the rank and the cause.
    assert "rank 1" in front["failure"] and "cannot load" in front["failure"], front["failure"]
    code, body = front["resume_held"]
    assert code == 500 and "Failed to resume generation" in body["error"], body
    assert "does not serve" in body["error"] and "mixed" in body["error"], body
    assert front["weight_info_held"][0] == 500, front["weight_info_held"]
    assert front["paused_held"] == (200, {"is_paused": True}), front["paused_held"]
    assert front["forward_held"] is None and front["core_alive"]
    assert "execute_model refused" in front["execute_held"], front["execute_held"]
    assert front["paused_after"] == (200, {"is_paused": False}), front["paused_after"]
    assert front["resume_after"] == (200, {"status": "resumed"})
    assert front["weight_info_after"] == (200, {"weight_version": "default"})
    assert_matches(front["after_third"], reference_forward(hf_weights(3), IDS))
    for rank in (1, 2):
        st = r[rank]["status"]
        assert st["serving"] and not st["dirty"], st
        assert r[rank]["active"] is False  # every session ended
        assert r[rank]["lora_resets"] == 2  # two finishes that returned


def _fleet_hold(worker, tp_rank):
    # What a fleet member does from its own thread of the worker process (wtx.fleet.Member).
    worker.weight_transfer_engine.participant.set_hold("fleet 'f': 3 steps behind (max_lag 0)")


def _fleet_release(worker, tp_rank):
    worker.weight_transfer_engine.participant.set_hold(None)


def _held_between_updates(front, args):
    out = {}
    _trainer_engine(front, args, None, Source(hf_weights(1))).send_weights()
    out["before"] = _forward(front)
    front.to_workers(_fleet_hold)
    # No update call follows: the engine core's step asks the gate and pauses the scheduler,
    # as vLLM's own pause does; the step runs nothing and the core stays alive.
    out["forward_held"] = _forward(front)
    out["core_alive"] = not front.core.errored
    out["paused_held"] = _get(front, "is_paused")
    out["resume_held"] = _post(front, "resume")
    # The worker's refusal is for bytes no committed version vouches for: a staleness hold
    # alone does not make a step fail (the bytes are the committed version).
    out["execute_held"] = front.executor.execute_model(IDS) is not None
    front.to_workers(_fleet_release)
    out["after"] = _forward(front)
    out["paused_after"] = _get(front, "is_paused")
    return out


def test_AFleetHoldBetweenUpdatesPausesTheSchedulerAndNeverKillsTheEngineCore(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setenv("WTX_VLLM_GATE_INTERVAL_S", "0")  # the gate asked before every step
    f = world(_held_between_updates, {"dir": str(tmp_path)})[0]
    ref = reference_forward(hf_weights(1), IDS)
    assert_matches(f["before"], ref)
    assert f["forward_held"] is None and f["core_alive"]
    assert f["paused_held"] == (200, {"is_paused": True}), f["paused_held"]
    code, body = f["resume_held"]
    assert code == 500 and "3 steps behind" in body["error"], body
    assert f["execute_held"]
    assert_matches(f["after"], ref)
    assert f["paused_after"] == (200, {"is_paused": False}), f["paused_after"]


class _Labelled:
    """vLLM's HTTP client whose finish carries the trainer's weight_version label."""

    def __init__(self, client, label):
        self.client, self.label = client, label

    def __getattr__(self, name):
        return getattr(self.client, name)

    def finish_weight_update(self, weight_version=None):
        self.client.finish_weight_update(self.label)


def _labelled_engine(front, args, source, label, **wtx_fields):
    """_trainer_engine whose finish publishes `label` and whose updates carry `wtx_fields`
    (kind, base) in their wtx section."""
    engine = _trainer_engine(front, args, None, source, prefix=label)
    wrapped = engine.wrapped
    wrapped.client = _Labelled(wrapped.client, label)
    if wtx_fields:
        plain = wrapped._label
        wrapped._label = lambda info, **extra: plain(info, **dict(wtx_fields, **extra))
    return engine


def _unreachable_trainer(args):
    d = args["dir"]
    return {"init_info": {
        "journal_dir": os.path.join(d, "rank{rank}"), "coordinator_journal": os.path.join(d, "coord"),
        "inner": "nccl", "inner_init_info": {"master_address": "127.0.0.1", "master_port": 1,
                                             "rank_offset": 1, "world_size": TP + 1}}}


def _status(worker, tp_rank):
    return worker.weight_transfer_engine.participant.status()


def _every_refusal(front, args):
    out = {}
    _labelled_engine(front, args, Source(hf_weights(1)), "v1").send_weights()
    out["label_v1"] = _get(front, "weight_info")
    # An empty round labelled: nothing was written, the previous label stays.
    _post(front, "start_weight_update")
    out["empty_finish"] = _post(front, "finish_weight_update", {"weight_version": "v-empty"})
    out["label_after_empty"] = _get(front, "weight_info")
    # A re-init whose trainer never joins: refused; the working transport stays.
    out["failed_reinit"] = _post(front, "init_weight_transfer_engine", _unreachable_trainer(args))
    _labelled_engine(front, args, Source(hf_weights(2)), "v2").send_weights()
    out["label_v2"] = _get(front, "weight_info")
    # A delta on a base no rank serves: refused; the next full update works.
    with pytest.raises(Exception) as refused:
        _labelled_engine(front, args, Source(hf_weights(3)), "bad", kind="delta",
                         base="0" * 32).send_weights()
    out["delta_refused"] = str(refused.value)
    _labelled_engine(front, args, Source(hf_weights(3)), "v3").send_weights()
    out["label_v3"] = _get(front, "weight_info")
    out["v3"] = front.to_workers(_status)
    # The engine shut down and initialized again in the same process (a trainer
    # reconnecting): the surviving tensors are proven, so a delta can follow at once.
    front.executor.collective_rpc("shutdown")
    _labelled_engine(front, args, Source(hf_weights(4)), "v4", kind="delta",
                     sources=sorted(hf_weights(4))).send_weights()
    out["label_v4"] = _get(front, "weight_info")
    out["v4"] = front.to_workers(_status)
    out["logits"] = _forward(front)
    return out


def test_EveryRefusedCallLeavesTheNextUpdateWorkingAndANoopKeepsTheLabel(tmp_path):
    f = world(_every_refusal, {"dir": str(tmp_path)})[0]
    assert f["label_v1"] == (200, {"weight_version": "v1"}), f["label_v1"]
    assert f["empty_finish"] == (200, {"message": "Weight update finished"})
    assert f["label_after_empty"] == (200, {"weight_version": "v1"}), f["label_after_empty"]
    assert f["failed_reinit"][0] == 500, f["failed_reinit"]
    assert f["label_v2"] == (200, {"weight_version": "v2"}), f["label_v2"]
    assert "base" in f["delta_refused"] or "E_" in f["delta_refused"], f["delta_refused"]
    assert f["label_v3"] == (200, {"weight_version": "v3"}), f["label_v3"]
    assert f["label_v4"] == (200, {"weight_version": "v4"}), f["label_v4"]
    for v3, v4 in zip(f["v3"], f["v4"]):
        assert v4["serving"] and v4["loaded"] and v4["version"] != v3["version"], (v3, v4)
        assert v4["committed_tx"].startswith("v4-"), v4
    assert_matches(f["logits"], reference_forward(hf_weights(4), IDS))


class _EndSession:
    """vLLM's worker of TP rank `rank` ends its session on its own (as its update_weights does
    after a chunk that failed there only): the ranks' sessions are split."""

    def __init__(self, rank):
        self.rank = rank

    def __call__(self, worker, tp_rank):
        if tp_rank == self.rank:
            worker._weight_update_active = False


def _split_before(front, engine, call):
    """`engine`'s client splits the workers' sessions right before `call` reaches them."""
    client = engine.wrapped.client
    original = getattr(client, call)

    def split(*a, **k):
        if not getattr(split, "done", False):
            split.done = True
            front.to_workers(_EndSession(1))
        return original(*a, **k)

    setattr(client, call, split)


def _split_sessions(front, args):
    out = {}
    _labelled_engine(front, args, Source(hf_weights(1)), "v1").send_weights()
    for call in ("update_weights", "finish_weight_update"):
        engine = _labelled_engine(front, args, Source(hf_weights(2)), f"split-{call}")
        _split_before(front, engine, call)
        with pytest.raises(Exception) as failed:
            engine.send_weights()
        out[call] = str(failed.value)
        out[call + "_states"] = front.executor.collective_rpc("wtx_serving_state")
    _labelled_engine(front, args, Source(hf_weights(3)), "v3").send_weights()
    out["label_v3"] = _get(front, "weight_info")
    out["logits"] = _forward(front)
    return out


def test_ARankWhoseWorkerRefusesAloneAbortsEveryRankNamingIt(tmp_path):
    """vLLM's worker refuses a chunk or a finish on one rank only (its session ended there):
    that rank still takes its part, so every rank aborts at once naming it, instead of
    waiting for a collective it never joins; the sessions end alike and the next full update
    commits."""
    r = world(_split_sessions, {"dir": str(tmp_path)})
    f = r[0]
    for call in ("update_weights", "finish_weight_update"):
        assert "rank 1" in f[call] and "refused" in f[call], f[call]
    assert f["label_v3"] == (200, {"weight_version": "v3"}), f["label_v3"]
    assert_matches(f["logits"], reference_forward(hf_weights(3), IDS))
    for rank in (1, 2):
        assert r[rank]["active"] is False


def _serving(worker, tp_rank):
    return worker.weight_transfer_engine.serving_state()


def _sleep_wake(front, args):
    out = {}
    _labelled_engine(front, args, Source(hf_weights(1)), "v1").send_weights()
    out["before"] = _forward(front)
    front.llm.sleep(args["level"])
    out["asleep"] = front.executor.collective_rpc("wtx_serving_state")
    front.llm.wake_up()
    out["awake"] = front.executor.collective_rpc("wtx_serving_state")
    out["sleeping_after_wake"] = front.llm.is_sleeping()
    out["forward_awake"] = _forward(front)
    out["core_alive"] = not front.core.errored
    _labelled_engine(front, args, Source(hf_weights(2)), "v2").send_weights()
    out["sleeping_after_update"] = front.llm.is_sleeping()
    out["after"] = _forward(front)
    return out


@pytest.mark.parametrize("level", [1, 2])
def test_WeightsThatSleptServeAgainOnlyWhenProvenOrAfterAFullUpdate(tmp_path, level):
    """vLLM's sleep mode: level 1 offloads the weights and wakes them with their bytes (proven
    against the committed version: serving again at once), level 2 discards them (the check
    finds them different: the rank holds, vLLM's own resume at wake-up leaves the scheduler
    paused and the core alive, until a full update commits)."""
    f = world(_sleep_wake, {"dir": str(tmp_path), "level": level})[0]
    for st in f["asleep"]:
        assert not st["serving"] and "released" in st["reason"], st
    if level == 1:
        assert all(st["serving"] for st in f["awake"]), f["awake"]
        assert not f["sleeping_after_wake"]
        assert torch.equal(f["forward_awake"], f["before"])
    else:
        assert all(not st["serving"] for st in f["awake"]), f["awake"]
        assert f["sleeping_after_wake"] and f["forward_awake"] is None and f["core_alive"]
    assert not f["sleeping_after_update"]
    assert_matches(f["after"], reference_forward(hf_weights(2), IDS))


def _trainer_pauses_after_wtx(front, args):
    out = {}
    _labelled_engine(front, args, Source(hf_weights(1)), "v1").send_weights()
    front.to_workers(_FailOnce("model.layers.1.mlp.down_proj.weight", {1}))
    with pytest.raises(Exception):
        _labelled_engine(front, args, Source(hf_weights(2)), "v2").send_weights()
    out["held"] = _get(front, "is_paused")
    out["pause"] = _post(front, "pause", {"mode": "keep"})  # the trainer pauses too
    front.to_workers(_clear_failures)
    _labelled_engine(front, args, Source(hf_weights(3)), "v3").send_weights()
    out["after_update"] = _get(front, "is_paused")  # the trainer's pause stays
    out["resume"] = _post(front, "resume")
    out["after_resume"] = _get(front, "is_paused")
    return out


def test_APauseTheTrainerAsksForAfterWtxsIsTheTrainersToLift(tmp_path):
    f = world(_trainer_pauses_after_wtx, {"dir": str(tmp_path)})[0]
    assert f["held"] == (200, {"is_paused": True})
    assert f["pause"][0] == 200
    assert f["after_update"] == (200, {"is_paused": True}), f["after_update"]
    assert f["resume"] == (200, {"status": "resumed"})
    assert f["after_resume"] == (200, {"is_paused": False})


def _aborted_restore_round(front, args, source, out, forward_key, packed=True):
    """A restore-gate update that aborts: its error, the resume's answer, the next forward."""
    engine = _trainer_engine(front, args, None, source, gate="restore", prefix="bad",
                             packed=packed)
    with pytest.raises(Exception) as failed:
        engine.send_weights()
    out["failure"] = str(failed.value)
    out["resume"] = _post(front, "resume")
    out[forward_key] = _forward(front)


def _restore(front, args):
    out = {}
    w1, w2 = hf_weights(1), hf_weights(2)
    _trainer_engine(front, args, None, Source(w1), gate="restore").send_weights()
    out["before"] = _forward(front)
    out["scales_before"] = front.to_workers(_scales)
    front.to_workers(_FailOnce("model.layers.0.self_attn.o_proj.weight", {0}))
    _aborted_restore_round(front, args, Source(w2), out, "after")
    out["scales_after"] = front.to_workers(_scales)
    return out


def test_RestoreGateServesThePreviousVersionAfterAnAbort(tmp_path):
    r = world(_restore, {"dir": str(tmp_path)})
    front = r[0]
    assert "rank 0" in front["failure"], front["failure"]
    assert front["resume"] == (200, {"status": "resumed"})
    # Bit for bit the previous version's output, and its derived scales.
    assert torch.equal(front["after"], front["before"])
    assert_matches(front["after"], reference_forward(hf_weights(1), IDS))
    for before, after in zip(front["scales_before"], front["scales_after"]):  # per worker
        assert all(torch.equal(b, a) for b, a in zip(before, after))
    for rank in (1, 2):
        st = r[rank]["status"]
        assert st["serving"] and not st["dirty"], st


def _lifecycle(front, args):
    out = {}
    d = args["dir"]
    init = {"journal_dir": os.path.join(d, "rank{rank}"),
            "coordinator_journal": os.path.join(d, "coord"), "inner": "nccl",
            "inner_init_info": {"master_address": UPDATE_GROUP_ADDRESS[0],
                                "master_port": UPDATE_GROUP_ADDRESS[1], "rank_offset": 1,
                                "world_size": TP + 1}}
    out["missing_body"] = _post(front, "init_weight_transfer_engine", {})
    out["bad_init"] = _post(front, "init_weight_transfer_engine",
                            {"init_info": dict(init, journal="x")})
    out["init"] = _post(front, "init_weight_transfer_engine", {"init_info": init})
    # An empty round is a no-op: 200, the session ends, the version stays.
    out["empty_start"] = _post(front, "start_weight_update")
    out["empty_finish"] = _post(front, "finish_weight_update")
    # A second start while one is open: vLLM's worker refuses it; finish ends the open one.
    out["start"] = _post(front, "start_weight_update")
    out["second_start"] = _post(front, "start_weight_update")
    out["finish"] = _post(front, "finish_weight_update")
    # Draft updates: refused by the worker (the engine does not support them).
    try:
        front.executor.collective_rpc("start_draft_weight_update")
        out["draft"] = "accepted"
    except RuntimeError as e:
        out["draft"] = str(e)
    # A bad update_info: vLLM's ValueError naming the field, and the session ends.
    out["start2"] = _post(front, "start_weight_update")
    out["bad_update"] = _post(front, "update_weights", {"update_info": {"names": ["x"]}})
    out["start3"] = _post(front, "start_weight_update")
    out["finish3"] = _post(front, "finish_weight_update")
    # Init again (a trainer that came back): the transport is replaced, the group kept.
    out["reinit"] = _post(front, "init_weight_transfer_engine", {"init_info": init})
    out["states"] = front.executor.collective_rpc("wtx_serving_state")
    return out


def test_WorkerLifecycleSurvivesEveryFailureAndAnEmptyRound(tmp_path):
    r = world(_lifecycle, {"dir": str(tmp_path)})
    f = r[0]
    assert f["missing_body"][0] == 400
    assert f["missing_body"][1]["error"]["message"] == "Missing 'init_info' in request body"
    code, body = f["bad_init"]
    assert code == 500 and "Invalid init_info for WtxWeightTransferEngine" in \
        body["error"]["message"] and "journal" in body["error"]["message"], body
    assert f["init"] == (200, {"message": "Weight transfer initialized"})
    assert f["empty_start"] == (200, {"message": "Weight update started"})
    assert f["empty_finish"] == (200, {"message": "Weight update finished"})
    assert f["start"][0] == 200
    assert f["second_start"][0] == 500 and "already active" in \
        f["second_start"][1]["error"]["message"], f["second_start"]
    assert f["finish"] == (200, {"message": "Weight update finished"})
    assert "does not support draft model weight updates" in f["draft"], f["draft"]
    assert f["start2"][0] == 200
    code, body = f["bad_update"]
    assert code == 500 and "Invalid update_info for WtxWeightTransferEngine" in \
        body["error"]["message"], body
    assert f["start3"] == (200, {"message": "Weight update started"})
    assert f["finish3"] == (200, {"message": "Weight update finished"})
    assert f["reinit"] == (200, {"message": "Weight transfer initialized"})
    assert all(s["serving"] for s in f["states"]), f["states"]
    for rank in (1, 2):
        assert r[rank]["active"] is False
        assert r[rank]["weight_version"] is None  # nothing committed: no version invented


def _expected_version(front, args):
    out = {}
    w1 = hf_weights(1)
    _trainer_engine(front, args, None, Source(w1)).send_weights()
    manifests = _manifests(front)
    w2 = hf_weights(2)
    engine = _trainer_engine(front, args, manifests, Source(w2), prefix="exp")
    engine.send_weights()
    out["version"] = wtx.expected_version([wtx.Manifest.from_json(m) for m in manifests],
                                          w2)["version"]
    out["after"] = _forward(front)
    out["scales_fresh"] = front.to_workers(_scales_fresh)
    # A source missing a tensor: the commit is refused (coverage), the rank holds, and the
    # worker's session still ends so the next update can start.
    partial = dict(w2)
    del partial["model.layers.0.mlp.up_proj.weight"]
    with pytest.raises(Exception) as failed:
        _trainer_engine(front, args, None, Source(partial), prefix="short").send_weights()
    out["short"] = str(failed.value)
    out["start_after"] = _post(front, "start_weight_update")
    out["finish_after"] = _post(front, "finish_weight_update")
    return out


def test_TrainerEngineCommitsTheExpectedVersionWithPostLoadProcessingOnTheServedModel(
        tmp_path):
    r = world(_expected_version, {"dir": str(tmp_path)})
    f = r[0]
    assert_matches(f["after"], reference_forward(hf_weights(2), IDS))
    assert all(f["scales_fresh"]), "post-load processing did not run on the served model"
    assert "up_proj" in f["short"], f["short"]
    assert f["start_after"][0] == 200 and f["finish_after"][0] == 200
    for rank in (1, 2):
        assert r[rank]["active"] is False
    # The last commit is the expected one (the short update aborted, holding).
    assert r[1]["weight_version"] == f["version"] == r[2]["weight_version"]


# ------------------------------------- layerwise reload of parameters over a hash chunk

# Parameters of 64 KiB and more per rank: a source's loads cover whole hash chunks (64 KiB),
# which wtx hashes when they land; vLLM's layerwise reload writes a layer's bytes into the live
# storage only once the layer is complete, so a landing at load time would hash the old bytes.
BIG = dict(vocab=512, hidden=256, heads=8, kv_heads=4, head=32, inter=512, layers=2)


def make_big_model(tp, tp_rank, group):
    from vllm_model import VllmLlama
    return VllmLlama(tp, tp_rank, group, config=BIG)


def _verify(worker, tp_rank):
    return worker.weight_transfer_engine.participant.verify()


def _layerwise_big(front, args):
    out = {}
    # Packed in chunks of about 256 KiB: each chunk's tensors reach the loader together.
    _trainer_engine(front, args, None, Source(hf_weights(1, config=BIG)),
                    packed_buffer_size_bytes=256 * 1024).send_weights()
    out["verify_first"] = front.to_workers(_verify)
    manifests = _manifests(front)
    w2 = hf_weights(2, config=BIG)
    _trainer_engine(front, args, manifests, Source(w2), prefix="exp").send_weights()
    out["version"] = wtx.expected_version([wtx.Manifest.from_json(m) for m in manifests],
                                          w2)["version"]
    out["verify_second"] = front.to_workers(_verify)
    out["after"] = _forward(front)
    out["scales_fresh"] = front.to_workers(_scales_fresh)
    return out


def test_LayerwiseReloadOfParametersOverAHashChunkCommitsTheBytesTheLayerServes(tmp_path):
    r = world(_layerwise_big, {"dir": str(tmp_path)}, model=make_big_model)
    f = r[0]
    for report in f["verify_first"] + f["verify_second"]:  # the live bytes are the version's
        assert report["ok"] and report["chunks_differing"] == 0, report
    assert_matches(f["after"], reference_forward(hf_weights(2, config=BIG), IDS, config=BIG))
    assert all(f["scales_fresh"])
    assert r[1]["weight_version"] == f["version"] == r[2]["weight_version"]


# ------------------------------------------------------------ reload_mode "direct", TP 2

def _received(worker, tp_rank):
    eng = worker.weight_transfer_engine
    return {"in_place": eng.received_in_place, "reserved": eng.received_reserved}


def _direct(front, args):
    out = {}
    w1, w2, w3 = hf_weights(1), hf_weights(2), hf_weights(3)
    # Unpacked (one broadcast per tensor): wtx receives in place.
    _trainer_engine(front, args, None, Source(w1), gate="restore", packed=False).send_weights()
    out["received"] = front.to_workers(_received)
    out["after_first"] = _forward(front)
    # The last source of the round is malformed (one row short): every other source already
    # landed in the live parameters when the model's loader refuses it on every rank. vLLM
    # alone would serve those mixed bytes ("a failed direct update leaves the weights
    # undefined"); wtx restores the previous version from its before-images.
    bad = "model.layers.1.mlp.down_proj.weight"
    w2 = {k: v for k, v in w2.items() if k != bad} | {bad: w2[bad][:-1].clone()}
    _aborted_restore_round(front, args, Source(w2), out, "after_abort", packed=False)
    # Packed (main's default: several tensors per broadcast): the inner's own receive, loaded
    # through the model's loader; it commits alike.
    _trainer_engine(front, args, None, Source(w3), gate="restore",
                    prefix="again").send_weights()
    out["received_packed"] = front.to_workers(_received)
    out["after_third"] = _forward(front)
    return out


def test_DirectReloadReceivesInPlaceThroughVllmsNcclEngineAndRestoresAFailedRound(tmp_path):
    r = world(_direct, {"dir": str(tmp_path)}, reload_mode="direct")
    front = r[0]
    sources = len(hf_weights(1))
    for got in front["received"]:  # per worker: every source through wtx's in-place receive
        # Replicated sources (the norms) land in place; TP-split ones are reserved, received
        # into one buffer and copied into this rank's parts.
        assert got["in_place"] > 0 and got["in_place"] + got["reserved"] == sources, got
    assert_matches(front["after_first"], reference_forward(hf_weights(1), IDS))
    assert "down_proj" in front["failure"], front["failure"]
    assert front["resume"] == (200, {"status": "resumed"})
    assert torch.equal(front["after_abort"], front["after_first"])  # bit for bit
    assert all(got == {"in_place": 0, "reserved": 0} for got in front["received_packed"])
    assert_matches(front["after_third"], reference_forward(hf_weights(3), IDS))
    for rank in (1, 2):
        st = r[rank]["status"]
        assert st["serving"] and not st["dirty"] and st["committed_tx"].startswith("again"), st


# ------------------------------------------------------------------------- sparse, TP 1

def _sparse(front, args):
    from vllm.distributed.weight_transfer.nccl_engine import _group_of
    from vllm.distributed.weight_transfer.sparse_nccl_engine import (
        SparseNCCLWeightTransferEngine, SparseWeightPatch)
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
    import threading
    out = {}
    w1 = hf_weights(1)
    _trainer_engine(front, args, None, Source(w1), tp=1).send_weights()
    d = args["dir"]
    client = HTTPVLLMWeightSyncClient(front.url)
    client.init_weight_transfer_engine({
        "journal_dir": os.path.join(d, "rank{rank}"), "coordinator_journal": os.path.join(d, "coord"),
        "inner": "sparse_nccl",
        "inner_init_info": {"master_address": UPDATE_GROUP_ADDRESS[0],
                            "master_port": UPDATE_GROUP_ADDRESS[1], "rank_offset": 1,
                            "world_size": 2}})
    # Runtime names: the fused qkv_proj (its k rows) and a plain o_proj.
    g = torch.Generator().manual_seed(5)
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    o = "model.layers.1.self_attn.o_proj.weight"
    patches = [SparseWeightPatch(qkv, torch.tensor([32 * 32 + 3, 33 * 32 + 7], dtype=torch.int32),
                                 torch.randn(2, generator=g).to(torch.bfloat16)),
               SparseWeightPatch(o, torch.tensor([0, 5, 100], dtype=torch.int32),
                                 torch.randn(3, generator=g).to(torch.bfloat16))]
    client.start_weight_update()
    info = {"names": [p.name for p in patches], "dtype_names": ["bfloat16"] * 2,
            "shapes": [[p.values.numel()] for p in patches],
            "num_updates_list": [p.values.numel() for p in patches]}
    t = threading.Thread(target=client.update_weights, args=(info,))
    t.start()
    SparseNCCLWeightTransferEngine.trainer_send_weights(
        patches, {"group": _group_of(*UPDATE_GROUP_ADDRESS)})
    t.join()
    client.finish_weight_update()
    # What the patches mean in checkpoint coordinates: k_proj row 0 (qkv row 32) and o_proj.
    w2 = {k: v.clone() for k, v in w1.items()}
    k = w2["model.layers.0.self_attn.k_proj.weight"]
    k.view(-1)[3] = patches[0].values[0]
    k.view(-1)[1 * 32 + 7] = patches[0].values[1]
    w2[o].view(-1)[torch.tensor([0, 5, 100])] = patches[1].values
    out["expected"] = reference_forward(w2, IDS)
    out["after"] = _forward(front)
    out["states"] = front.executor.collective_rpc("wtx_serving_state")
    return out


def test_SparseNcclPatchesInRuntimeNamesCommitAsWtxDeltaPatches(tmp_path):
    r = world(_sparse, {"dir": str(tmp_path)}, tp=1)
    f = r[0]
    assert_matches(f["after"], f["expected"])
    assert f["states"][0]["serving"], f["states"]
    st = r[1]["status"]
    assert st["serving"] and st["committed_tx"].startswith("vllm-"), st


# ------------------------------------------------- data-parallel replicas, pipeline stages

class _FailWhere:
    """The loader of `name` fails on the workers whose parallel_config `field` is `value`
    (rank: the rank within its replica; data_parallel_index: its replica)."""

    def __init__(self, name, field, value):
        self.name, self.field, self.value = name, field, value

    def __call__(self, worker, tp_rank):
        if getattr(worker.vllm_config.parallel_config, self.field) == self.value:
            worker.model_runner.model.fail_on = self.name


def _each_forward(worker, tp_rank):
    """This worker's forward pass (TP 1 here), or why the gate refused it."""
    try:
        return worker.execute_model(IDS)
    except RuntimeError as e:
        return str(e)


def _replicas(front, args):
    out = {}
    # One journal per replica is required: the same paths are refused, naming the field.
    with pytest.raises(Exception) as shared:
        _trainer_engine(front, args, None, Source(hf_weights(1)), tp=2)
    out["shared"] = str(shared.value)
    engine = _trainer_engine(front, args, None, Source(hf_weights(1)), tp=2,
                             journal="dp{dp_rank}/rank{rank}", coordinator="dp{dp_rank}/coord")
    engine.send_weights()
    out["forward"] = front.to_workers(_each_forward)
    return out


def test_DataParallelReplicasCommitEachInItsOwnJournalsToTheSameVersion(tmp_path):
    r = world(_replicas, {"dir": str(tmp_path)}, tp=1, layout=Layout(tp=1, dp=2))
    f = r[0]
    assert "journal_dir" in f["shared"] and "{dp_rank}" in f["shared"], f["shared"]
    for logits in f["forward"]:
        assert_matches(logits, reference_forward(hf_weights(1), IDS))
    # Each replica its own transaction and journals; the same bytes, the same version.
    assert r[1]["weight_version"] == r[2]["weight_version"] is not None
    assert sorted(os.listdir(tmp_path)) == ["dp0", "dp1"]
    for d in ("dp0", "dp1"):
        assert sorted(os.listdir(tmp_path / d)) == ["coord", "rank0"]


def make_stage_model(tp, tp_rank, group):
    """Pipeline stage `parallel_config.rank` of 2 (TP 1): its layer, and the embedding or the
    final norm and LM head (vLLM's PPMissingLayer elsewhere)."""
    from vllm_model import VllmLlama, keep_stage
    from vllm.distributed.parallel_state import get_world_group
    stage = torch.distributed.get_rank(get_world_group().cpu_group)
    return keep_stage(VllmLlama(tp, tp_rank, group), stage, 2)


def _versions(worker, tp_rank):
    return worker.weight_transfer_engine.participant.status()["version"]


def _stages(front, args):
    out = {"manifests": _manifests_after(front, args, hf_weights(1))}
    out["first"] = front.to_workers(_versions)
    # The loader fails on the second stage alone: the first stage aborts too.
    front.to_workers(_FailWhere("model.layers.1.mlp.down_proj.weight", "rank", 1))
    with pytest.raises(Exception) as failed:
        _trainer_engine(front, args, None, Source(hf_weights(2)), tp=2,
                        prefix="bad").send_weights()
    out["failure"] = str(failed.value)
    out["held"] = front.to_workers(_each_forward)
    front.to_workers(_clear_failures)
    _trainer_engine(front, args, None, Source(hf_weights(3)), tp=2,
                    prefix="again").send_weights()
    out["third"] = front.to_workers(_versions)
    return out


def _manifests_after(front, args, weights):
    """The first update (every source to both stages; each keeps its own), then the stages'
    manifests."""
    _trainer_engine(front, args, None, Source(weights), tp=2).send_weights()
    return _manifests(front)


def test_PipelineStagesCommitOrAbortTogether(tmp_path):
    r = world(_stages, {"dir": str(tmp_path)}, tp=1, layout=Layout(tp=1, pp=2),
              model=make_stage_model)
    f = r[0]
    manifests = [wtx.Manifest.from_json(m) for m in f["manifests"]]
    # Each stage holds only its share (the trainer sends every source to both).
    held = [{s["source"] for q in m.params for s in q["shards"]} for m in manifests]
    assert held[0] and held[1] and not held[0] & held[1]
    assert held[0] | held[1] == set(hf_weights(1))
    # One version over both stages: exactly the bytes sent, each stage its own share.
    first = wtx.expected_version(manifests, hf_weights(1))["version"]
    assert f["first"] == [first, first]
    # One transaction over both stages (vLLM's world group): stage 1's failure aborts stage 0.
    assert "rank 1" in f["failure"] and "cannot load" in f["failure"], f["failure"]
    for refused in f["held"]:
        assert isinstance(refused, str) and "execute_model refused" in refused, refused
    third = wtx.expected_version(manifests, hf_weights(3))["version"]
    assert f["third"] == [third, third]
    assert r[1]["status"]["committed_tx"] == r[2]["status"]["committed_tx"]


def _experts_over_replicas(front, args):
    out = {}
    # One transaction over both replicas: the group's ranks name the journals, no {dp_rank}.
    _trainer_engine(front, args, None, Source(hf_weights(1)), tp=2).send_weights()
    front.to_workers(_FailWhere("model.layers.1.mlp.down_proj.weight",
                                "data_parallel_index", 1))
    with pytest.raises(Exception) as failed:
        _trainer_engine(front, args, None, Source(hf_weights(2)), tp=2,
                        prefix="bad").send_weights()
    out["failure"] = str(failed.value)
    out["held"] = front.to_workers(_each_forward)
    return out


def test_ExpertParallelReplicasCommitOrAbortTogether(tmp_path):
    r = world(_experts_over_replicas, {"dir": str(tmp_path)}, tp=1,
              layout=Layout(tp=1, dp=2, ep=True))
    f = r[0]
    assert "rank 1" in f["failure"] and "cannot load" in f["failure"], f["failure"]
    for refused in f["held"]:  # replica 0 aborted with replica 1
        assert isinstance(refused, str) and "execute_model refused" in refused, refused
    assert r[1]["weight_version"] == r[2]["weight_version"] is not None
    assert sorted(os.listdir(tmp_path)) == ["coord", "rank0", "rank1"]


def _replicas_of_stages(front, args):
    with pytest.raises(Exception) as refused:
        _trainer_engine(front, args, None, Source(hf_weights(1)), tp=4,
                        journal="dp{dp_rank}/rank{rank}", coordinator="dp{dp_rank}/coord")
    return str(refused.value)


def test_ReplicasOfSeveralStagesAreRefusedNamingTheLayout(tmp_path):
    r = world(_replicas_of_stages, {"dir": str(tmp_path)}, tp=1,
              layout=Layout(tp=1, dp=2, pp=2))
    assert "E_UNSUPPORTED" in r[0] and "pipeline_parallel_size 2" in r[0], r[0]
    assert "data_parallel_size 2" in r[0], r[0]
    assert not os.listdir(tmp_path)  # refused before any journal opened


# ------------------------------------------------------------- a worker without the gate

def test_EngineBuiltWithoutTheServingGateHookRefusesToInitialize(tmp_path):
    """wtx registered by hand in a worker (not through wtx.vllm.register(), so the gate's hook
    is not on vLLM's Worker.execute_model): init_transfer_engine refuses before anything opens,
    naming the missing hook; once the hooks are in, the same call gets past the check."""
    import subprocess
    import sys
    code = (
        "import os, sys, torch\n"
        "from types import SimpleNamespace\n"
        "import vllm_world\n"  # puts the doubles first on sys.path
        "from vllm.config import WeightTransferConfig\n"
        "from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory\n"
        "import wtx, wtx.vllm\n"
        "torch.distributed.init_process_group('gloo', rank=0, world_size=1, "
        "init_method='file://' + sys.argv[1] + '/pg')\n"
        "WeightTransferEngineFactory.register_engine('wtx', 'wtx.vllm', "
        "'WtxWeightTransferEngine')\n"
        "eng = WeightTransferEngineFactory.create_engine(WeightTransferConfig(backend='wtx'), "
        "vllm_world.vllm_config(1), torch.device('cpu'), torch.nn.Linear(2, 2))\n"
        "info = {'journal_dir': sys.argv[1] + '/j/rank{rank}', "
        "'coordinator_journal': sys.argv[1] + '/j/coord', 'inner': 'no_such_inner'}\n"
        "for hooked in (False, True):\n"
        "    if hooked:\n"
        "        wtx.vllm.install_hooks()\n"
        "    try:\n"
        "        eng.init_transfer_engine(info)\n"
        "    except wtx.Error as e:\n"
        "        print(e.code, '|', e.message)\n"
        "print(os.path.exists(sys.argv[1] + '/j'))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__),
                                                       os.environ["PYTHONPATH"]]))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert len(lines) == 3, out.stdout + out.stderr
    assert lines[0].startswith("E_UNSUPPORTED |"), lines[0]
    assert "Worker.execute_model" in lines[0] and "general_plugins" in lines[0], lines[0]
    # With the hooks in, the same info gets past the gate to its own error (the inner's name).
    assert "no_such_inner" in lines[1], lines[1]
    assert lines[2] == "False", lines[2]  # no journal was opened by either call


# --------------------------------------------------------------------- the older contract

def test_OlderVllmContractLogsAtRegistrationAndTheConfiguredEngineRefusesNamingTheVersion(
        tmp_path):
    """vLLM before 0.25: engines without start/finish. vLLM calls each general plugin without a
    try, so register() must not raise there (a server not using wtx would not start): it logs,
    naming the version, and installs no hook; a server configured with backend "wtx" gets the
    engine's refusal (E_UNSUPPORTED naming the version and what to upgrade to)."""
    import subprocess
    import sys
    root = tmp_path / "old"
    pkg = root / "vllm" / "distributed" / "weight_transfer"
    pkg.mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text('__version__ = "0.21.0"\n')
    (root / "vllm" / "distributed" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    # The older base: receive_weights(update_info, load_weights), no start/finish.
    (pkg / "base.py").write_text(
        "class WeightTransferEngine:\n"
        "    def __init__(self, config, parallel_config): pass\n"
        "    def receive_weights(self, update_info, load_weights): pass\n")
    (pkg / "factory.py").write_text(
        "import importlib\n"
        "class WeightTransferEngineFactory:\n    _registry = {}\n"
        "    @classmethod\n    def register_engine(cls, n, m, c=None):\n"
        "        cls._registry[n] = lambda: getattr(importlib.import_module(m), c)\n"
        "    @classmethod\n    def create_engine(cls, config, parallel_config):\n"
        "        return cls._registry[config]()(config, parallel_config)\n")
    code = ("import logging, wtx, wtx.vllm\n"
            "logging.basicConfig(level=logging.WARNING, format='LOG %(message)s')\n"
            "wtx.vllm.register()\n"  # vLLM's load_general_plugins: no try around it
            "from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory "
            "as F\n"
            "print('registered', sorted(F._registry))\n"
            "try:\n    F.create_engine('wtx', None)\n"
            "except wtx.Error as e:\n    print(e.code, e.message)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ["PYTHONPATH"]]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "registered ['wtx']", out.stdout + out.stderr
    assert lines[1].startswith("E_UNSUPPORTED"), out.stdout + out.stderr
    assert "0.21.0" in lines[1] and "0.25" in lines[1], lines[1]
    log = out.stderr
    assert "LOG wtx.vllm.register" in log and "0.21.0" in log, log
    assert "no serving-gate hook" in log, log
