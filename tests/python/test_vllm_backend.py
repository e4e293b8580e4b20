"""wtx.vllm's weight-transfer backend ("wtx") with wtx's own torch_broadcast transports
(vllm_doubles.py; vLLM's factory and base class from vllm_double/, written from vLLM's source;
the engine as vLLM's own worker, engine core and routes run it: test_vllm_main.py): 2 engine processes (a TP=2 tiny Llama, world ranks 0 and 1) and 1 trainer
process (world rank 2) over gloo. The trainer drives the four phases as vLLM's
collective_rpc / HTTP routes would (a command broadcast to the engine ranks, rank 0's answer
broadcast back) and sends the bytes through the inner transport's trainer side. Every update
ends in a commit of exactly the sent bytes (the version the trainer computed, logits equal to
the trainer's forward) or in an abort with no rank serving."""

import json
import os

import pytest
import torch
import torch.distributed as dist

import wtx
import wtx.vllm
from conftest import TINY_LLAMA
from harness import IDS, run_world
from tiny_llama import hf_weights, reference_forward
from vllm_doubles import (BroadcastEngine, VllmWorkerDouble,
                          install_fake_vllm, make_model)

TRAINER = 2
NAMES = sorted(hf_weights(0))


def assert_matches(logits, ref):
    assert torch.allclose(logits, ref, atol=2e-2, rtol=2e-2), (logits - ref).abs().max()


# ------------------------------------------------------------------------------- engine side

def _answer(result):
    box = [result]
    dist.broadcast_object_list(box, src=0)  # rank 0's answer reaches the trainer
    return box[0]


def engine(rank, args):
    tp = dist.new_group([0, 1])
    model = make_model(rank, tp)
    model.fail_on = args.get("fail_on", {}).get(rank)
    worker = VllmWorkerDouble(model, rank, tp, inner=args.get("inner", "bcast"))
    log = []

    def trainer_lost(e):  # the control plane is gone: end the open update (it aborts)
        try:
            outcome = ("ok", worker.finish_weight_update())
        except wtx.Aborted as a:
            outcome = ("aborted", a.decision)
        except wtx.Error as w:
            outcome = ("error", w.code)
        log.append(("trainer_lost", str(e)[:80], outcome))

    while True:
        box = [None]
        try:
            dist.broadcast_object_list(box, src=TRAINER)
        except RuntimeError as e:
            trainer_lost(e)
            break
        method, arg = box[0]
        if method == "exit":
            break
        try:
            r = getattr(worker, method)(*([] if arg is None else [arg]))
            result = ("ok", r)
        except wtx.Aborted as e:
            result = ("aborted", e.decision)
        except Exception as e:  # recorded: the test reads it
            result = ("error", getattr(e, "code", type(e).__name__), str(e))
        st = worker.engine.participant.status() if worker.engine.participant else None
        log.append((method, result, st))
        try:
            _answer((result, st))
        except RuntimeError as e:
            trainer_lost(e)
            break
        if method == "init_weight_transfer_engine":  # the manifests, for the expected version
            everyone = [None] * 3
            dist.all_gather_object(everyone, worker.engine.participant.manifest.to_json())
    status = worker.engine.participant.status()
    return {"log": log, "status": status, "logits": model(IDS),
            "weight_version": worker.engine.weight_version}


# ------------------------------------------------------------------------------ trainer side

def _call(method, arg=None):
    dist.broadcast_object_list([(method, arg)], src=TRAINER)
    box = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _send(names_tensors, inner, manifests):
    args = {"inner": inner, "inner_args": {"src": TRAINER}}
    if manifests is not None:
        args["manifests"] = manifests
    return wtx.vllm.WtxWeightTransferEngine.trainer_send_weights(iter(names_tensors), args)


def trainer(args):
    dist.new_group([0, 1])
    install_fake_vllm()
    d = args["dir"]
    init = {"journal_dir": os.path.join(d, "rank{rank}"),
            "coordinator_journal": os.path.join(d, "coord"), "load": args.get("load", "write_source"),
            "inner_init_info": {"src": TRAINER}}
    init.update(args.get("init", {}))
    answers = [_call("init_weight_transfer_engine", init)]
    everyone = [None] * 3
    dist.all_gather_object(everyone, None)
    manifests = [everyone[0], everyone[1]]
    steps, version, current = [], None, None
    for step in args["steps"]:
        w = hf_weights(step["seed"])
        kind = step.get("kind", "full")
        names = step.get("names", NAMES)
        names = [n for n in names if n not in step.get("skip", ())]
        answers.append(_call("start_weight_update"))
        fields = {k: step[k] for k in ("modules", "sources", "step", "lineage") if k in step}
        if kind != "full":
            fields["base"] = version
        expect = kind == "full" and not step.get("no_expect")
        if kind == "delta":
            patches = step["patches"](current)
            info = {"names": [n for n, _ in patches],
                    "dtype_names": ["bfloat16"] * len(patches),
                    "shapes": [list(current[n].shape) for n, _ in patches],
                    "counts": [len(i) for _, (i, _) in patches],
                    "wtx": dict(fields, tx=step["tx"], kind=kind,
                                sources=[n for n, _ in patches])}
            _call_async("update_weights", info)
            _send(patches, args.get("inner", "bcast"), None)
            new = {n: t.clone() for n, t in current.items()}
            for n, (i, v) in patches:
                new[n].view(-1)[i] = v
            w = new
        else:
            items = [(n, w[n]) for n in names]
            info = wtx.vllm.trainer_update_info(items, tx=step["tx"], kind=kind,
                                                expect_version=expect, **fields)
            _call_async("update_weights", info)
            if step.get("die_after") is not None:
                inner_items = items[:step["die_after"]]
                BroadcastEngine.trainer_send_weights(iter(inner_items), {"src": TRAINER})
                os._exit(3)  # killed mid-send
            if step.get("bogus_version"):
                BroadcastEngine.trainer_send_weights(
                    iter(items + [(wtx.vllm.EXPECTED_VERSION_NAME,
                                   wtx.vllm.expected_version_tensor("0" * 32))]),
                    {"src": TRAINER})
                sent_version = None
            else:
                sent_version = _send(items, args.get("inner", "bcast"),
                                     manifests if expect else None)
            if kind == "partial":
                w = dict(current, **{n: w[n] for n in names})
        answers.append(_wait_async())
        finish = _call("finish_weight_update")
        answers.append(finish)
        committed = finish[0][0] == "ok"
        if committed:
            version = finish[0][1]["version"]
            current = w
        steps.append({"committed": committed, "sent_version": sent_version if kind != "delta"
                      else None, "version": finish[0][1].get("version") if committed else None,
                      "ref": reference_forward(current, IDS) if current else None})
    dist.broadcast_object_list([("exit", None)], src=TRAINER)
    return {"answers": answers, "steps": steps}


# update_weights runs while the trainer sends: the command goes out first (the engine ranks
# then block in the inner transport's receive), rank 0's answer is read after the send.
def _call_async(method, arg):
    dist.broadcast_object_list([(method, arg)], src=TRAINER)


def _wait_async():
    box = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def deployment(rank, world, args):
    if rank == TRAINER:
        return trainer(args)
    return engine(rank, args)


def run(tmp_path, steps, **kw):
    results, codes = run_world(deployment, 3, dict(dir=str(tmp_path), steps=steps, **kw))
    return results, codes


def _serving_none(results):
    return all(not results[r]["status"]["serving"] for r in (0, 1))


# ------------------------------------------------------------------------------------- cases

def test_FullThenPartialThenSparseDeltaCommitExactlyTheSentBytes(tmp_path):
    mlp = "model.layers.1.mlp"
    mlp_names = [n for n in NAMES if n.startswith(mlp + ".")] + [
        "model.layers.1.post_attention_layernorm.weight"]

    def patches(current):
        g = torch.Generator().manual_seed(7)
        out = []
        for n in ("model.norm.weight", "model.layers.0.mlp.down_proj.weight"):
            idx = torch.randperm(current[n].numel(), generator=g)[:5].sort().values
            out.append((n, (idx, (torch.randn(5, generator=g)).to(torch.bfloat16))))
        return out

    steps = [{"tx": "t1", "seed": 1},
             {"tx": "t2", "seed": 2, "kind": "partial", "modules": [mlp], "names": mlp_names},
             {"tx": "t3", "seed": 2, "kind": "delta", "patches": patches}]
    results, codes = run(tmp_path, steps, inner="sparse")
    assert set(results) == {0, 1, 2}, codes
    t = results[TRAINER]["steps"]
    assert [s["committed"] for s in t] == [True, True, True], results[TRAINER]["answers"]
    # The full update committed the version the trainer computed from what it sent.
    assert t[0]["version"] == t[0]["sent_version"]
    for r in (0, 1):
        assert results[r]["status"]["serving"] is True
        assert results[r]["weight_version"] == t[2]["version"]
        assert_matches(results[r]["logits"], t[2]["ref"])


def test_UpdateInfoStepIsTheLineagesStepAndNeverGoesBack(tmp_path):
    """Issue 51: update_info.wtx.step is the step of init_info.lineage the update commits; a
    step at or below the committed one is refused on every rank and changes nothing; without a
    step the next one is taken."""
    steps = [{"tx": "t1", "seed": 1, "step": 5}, {"tx": "t2", "seed": 2, "step": 5},
             {"tx": "t3", "seed": 3}]
    results, codes = run(tmp_path, steps, init={"lineage": "policy-v"})
    assert set(results) == {0, 1, 2}, codes
    t = results[TRAINER]["steps"]
    assert [s["committed"] for s in t] == [True, False, True], results[TRAINER]["answers"]
    assert "E_STEP_REGRESSION" in json.dumps(results[TRAINER]["answers"])
    for r in (0, 1):
        st = results[r]["status"]
        assert st["serving"] and st["step"] == 6 and st["lineage"] == "policy-v", st
        assert_matches(results[r]["logits"], t[2]["ref"])


def test_NewestContractEngineAndModelLoaderBracketedByReserveLanded(tmp_path):
    # The inner engine of the newest contract loads into the model it was given (wtx's proxy);
    # load "load_weights" runs the model's own loader between reserve and landed.
    steps = [{"tx": "t1", "seed": 3}]
    results, codes = run(tmp_path, steps, inner="bcast2", load="load_weights")
    assert set(results) == {0, 1, 2}, codes
    t = results[TRAINER]["steps"]
    assert t[0]["committed"] and t[0]["version"] == t[0]["sent_version"], results[TRAINER]
    for r in (0, 1):
        assert_matches(results[r]["logits"], t[0]["ref"])


def test_MissingNameAbortsAndNoRankServes(tmp_path):
    # Without an expected version (a trainer that sends only some names cannot compute the
    # full one): the commit aborts on the coverage, naming what is missing.
    steps = [{"tx": "t1", "seed": 1, "skip": ["model.layers.1.mlp.down_proj.weight"],
              "no_expect": True}]
    results, codes = run(tmp_path, steps)
    assert set(results) == {0, 1, 2}, codes
    finish = results[TRAINER]["answers"][-1][0]
    assert finish[0] == "aborted", finish
    assert any(m["param"] == "model.layers.1.mlp.down_proj.weight"
               for v in finish[1]["votes"] for m in v.get("missing", [])) or \
        "missing" in str(finish[1]), finish
    assert _serving_none(results)


def test_WrongExpectedVersionAborts(tmp_path):
    steps = [{"tx": "t1", "seed": 1}, {"tx": "t2", "seed": 2, "bogus_version": True}]
    results, codes = run(tmp_path, steps)
    assert set(results) == {0, 1, 2}, codes
    t = results[TRAINER]["steps"]
    assert t[0]["committed"] and not t[1]["committed"]
    finish = results[TRAINER]["answers"][-1][0]
    assert finish[0] == "aborted" and "E_VERSION_MISMATCH" in str(finish[1]), finish
    assert _serving_none(results)


def test_EngineRankRaisingInReceiveAbortsEveryRank(tmp_path):
    # Rank 1's loader raises on one name: the rest of the broadcast is still drained (rank 0
    # and the trainer are not left hanging), and the update aborts on both ranks.
    steps = [{"tx": "t1", "seed": 1}, {"tx": "t2", "seed": 2}]
    results, codes = run(tmp_path, steps, load="load_weights",
                         fail_on={1: "model.layers.0.mlp.up_proj.weight"})
    assert set(results) == {0, 1, 2}, codes
    log1 = results[1]["log"]
    # The failing chunk aborts the update on every rank at once (the failures are exchanged
    # before update_weights returns), naming the rank and cause.
    update = [e for e in log1 if e[0] == "update_weights"][0]
    assert update[1][0] == "aborted" and "cannot load" in update[1][1]["reason"], update
    assert "rank 1" in update[1][1]["reason"], update
    update0 = [e for e in results[0]["log"] if e[0] == "update_weights"][0]
    assert update0[1][0] == "aborted" and "rank 1" in update0[1][1]["reason"], update0
    assert not results[TRAINER]["steps"][0]["committed"]
    assert _serving_none(results)


def test_TrainerKilledMidSendAbortsAndNoRankServes(tmp_path):
    steps = [{"tx": "t1", "seed": 1, "die_after": 5}]
    results, codes = run(tmp_path, steps)
    assert codes[TRAINER] == 3, codes
    assert set(results) == {0, 1}, codes
    for r in (0, 1):
        # The broadcast breaks in update_weights: every rank aborts there, at once; the
        # finish after the trainer was lost says the update already ended.
        update = [e for e in results[r]["log"] if e[0] == "update_weights"][0]
        assert update[1][0] == "aborted", update
        lost = results[r]["log"][-1]
        assert lost[0] == "trainer_lost" and lost[2] == ("error", "E_UPDATE_FAILED"), lost
        assert results[r]["status"]["serving"] is False
        assert results[r]["status"]["active_tx"] is None


# ------------------------------------------------------------------ one process: bad inputs

@pytest.fixture
def solo(tmp_path):
    """An engine over a 1-process gloo group (TP 1), not initialized."""
    import datetime
    from conftest import free_port
    if not dist.is_initialized():  # a one-process group, destroyed after the case
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                                world_size=1, timeout=datetime.timedelta(seconds=30))
    install_fake_vllm()
    from vllm_doubles import LoaderLlama, vllm_config, weight_transfer_config
    model = LoaderLlama(1, 0, None)
    eng = wtx.vllm.WtxWeightTransferEngine(weight_transfer_config(), vllm_config(1, 0),
                                           torch.device("cpu"), model)
    yield eng, str(tmp_path)
    eng.shutdown()
    dist.destroy_process_group()  # the multi-process cases fork from this process


def test_BadInitInfoIsAnErrorNamingTheField(solo):
    eng, d = solo
    with pytest.raises(wtx.Error) as e:
        eng.parse_init_info({"journal_dir": d + "/r", "inner_initinfo": {}})
    assert "inner_initinfo" in e.value.message
    with pytest.raises(wtx.Error) as e:
        eng.parse_init_info({"coordinator_journal": d + "/c"})
    assert "journal_dir" in e.value.message
    with pytest.raises(wtx.Error) as e:
        eng.parse_init_info({"journal_dir": d + "/r", "load": "mmap"})
    assert "init_info.load" in e.value.message
    with pytest.raises(wtx.Error) as e:
        eng.init_transfer_engine({"journal_dir": d + "/r", "coordinator_journal": d + "/c",
                                  "inner": "rdma"})
    assert "'rdma' is not registered" in e.value.message and "bcast" in e.value.message
    assert eng.participant is None  # nothing stays open


def test_MetricLabelsOfTheInitInfoReachTheRanksSeries(solo):
    eng, d = solo
    with pytest.raises(wtx.Error) as e:
        eng.parse_init_info({"journal_dir": d + "/r", "metric_labels": {"replica": 1}})
    assert "init_info.metric_labels" in e.value.message
    with pytest.raises(wtx.Error) as e:
        eng.init_transfer_engine({"journal_dir": d + "/r", "coordinator_journal": d + "/c",
                                  "inner": "bcast", "inner_init_info": {"src": 0},
                                  "metric_labels": {"pod": "a"}})
    assert "metric label 'pod'" in e.value.message
    assert eng.participant is None
    eng.init_transfer_engine({"journal_dir": d + "/r", "coordinator_journal": d + "/c",
                              "inner": "bcast", "inner_init_info": {"src": 0},
                              "metric_labels": {"fleet": "policy-x"}})
    prometheus_client = pytest.importorskip("prometheus_client")
    text = prometheus_client.generate_latest().decode()
    assert 'wtx_serving{fleet="policy-x",rank="0",role="rank"} 0.0' in text, text
    assert 'wtx_held_info{fleet="policy-x",rank="0",reason="not_loaded",role="rank"} 1.0' in text


def test_BadUpdateInfoIsAnErrorNamingTheFieldAndAbortsTheUpdate(solo):
    eng, d = solo
    eng.init_transfer_engine({"journal_dir": d + "/r", "coordinator_journal": d + "/c",
                              "inner": "bcast", "inner_init_info": {"src": 0}})
    eng.start_weight_update()
    with pytest.raises(wtx.Error) as e:
        eng.update_weights({"names": ["a"], "dtype_names": [], "shapes": [[1]],
                            "wtx": {"tx": "t1"}})
    assert "names, dtype_names and shapes differ" in e.value.message
    with pytest.raises(wtx.Error) as e:
        eng.update_weights({"names": [], "dtype_names": [], "shapes": [],
                            "wtx": {"tx": "t1", "kind": "sparse"}})
    assert "update_info.wtx.kind" in e.value.message
    with pytest.raises(wtx.Error) as e:
        eng.update_weights({"names": [], "dtype_names": [], "shapes": [],
                            "wtx": {"tx": "t1", "txid": "x"}})
    assert "txid" in e.value.message
    for bad in (-1, "7", True):
        with pytest.raises(wtx.Error) as e:
            eng.update_weights({"names": [], "dtype_names": [], "shapes": [],
                                "wtx": {"tx": "t1", "step": bad}})
        assert "update_info.wtx.step" in e.value.message
    with pytest.raises(wtx.Error) as e:
        eng.finish_weight_update()
    assert e.value.code == "E_UPDATE_FAILED"
    assert eng.participant.status()["active_tx"] is None


def test_RegisterIsIdempotentAndRefusesATakenName():
    factory = install_fake_vllm()
    wtx.vllm.register()
    wtx.vllm.register()
    assert factory.WeightTransferEngineFactory._registry["wtx"]() is \
        wtx.vllm.WtxWeightTransferEngine
    with pytest.raises(wtx.Error) as e:
        wtx.vllm.register("bcast")
    assert "already" in e.value.message and "BroadcastEngine" in e.value.message
    wtx.vllm.register_inner("sparse-own", wtx.vllm.TorchBroadcastEngine)
    wtx.vllm.register_inner("sparse-own", wtx.vllm.TorchBroadcastEngine)  # same: no-op
    with pytest.raises(wtx.Error):
        wtx.vllm.register_inner("sparse-own", BroadcastEngine)


def test_NameOrShapeThatDiffersFromTheManifestAbortsNamingIt(solo):
    # One process, TP 1: the inner broadcast from rank 0 of a 1-process world hands over the
    # buffers as they are; what matters is what wtx does with a name or shape it does not
    # expect: the update fails naming it, and the finish aborts it.
    eng, d = solo
    eng.init_transfer_engine({"journal_dir": d + "/r", "coordinator_journal": d + "/c",
                              "inner": "bcast", "inner_init_info": {"src": 0}})
    for names, shapes, want in [(["model.nrm.weight"], [[32]], "E_UNKNOWN_SOURCE"),
                                (["model.norm.weight"], [[31]], "model.norm.weight")]:
        eng.start_weight_update()
        with pytest.raises(wtx.Error) as e:
            eng.update_weights({"names": names, "dtype_names": ["bfloat16"], "shapes": shapes,
                                "wtx": {"tx": "t-" + names[0] + str(shapes[0][0])}})
        assert want in str(e.value), e.value
        assert isinstance(e.value, wtx.Aborted)  # aborted on every rank, at once
        with pytest.raises(wtx.Error) as a:  # a finish after it: the update already ended
            eng.finish_weight_update()
        assert a.value.code == "E_UPDATE_FAILED" and names[0] in str(a.value), a.value
        assert eng.participant.status()["active_tx"] is None
        assert eng.participant.status()["serving"] is False


def _in_place_world(rank, world, args):
    """World rank 0: a TP-1 engine (wtx backend over torch_broadcast); rank 1: the trainer."""
    m = wtx.Manifest.from_hf_config(TINY_LLAMA, tp=1, rank=0, dtype="bf16")
    tp_group = dist.new_group([0])  # collective: both processes create it
    g = torch.Generator().manual_seed(5)
    items = sorted((s["source"], torch.randn(s["source_shape"], generator=g).to(torch.bfloat16))
                   for p in m.params for s in p["shards"])
    items = list(dict(items).items())
    bad = args.get("bad_shape")
    if bad:
        items = [(n, torch.zeros([t.shape[0] + 1] + list(t.shape[1:]), dtype=t.dtype)
                  if n == bad else t) for n, t in items]
    if rank == 1:
        dist.broadcast_object_list([wtx.vllm.trainer_update_info(items, tx="t1")], src=1)
        wtx.vllm.WtxWeightTransferEngine.trainer_send_weights(
            iter(items), {"inner": "torch_broadcast", "inner_args": {"src": 1}})
        return None
    model = wtx.module_from_manifest(m)
    eng = wtx.vllm.WtxWeightTransferEngine({"inner": "torch_broadcast"}, None,
                                           torch.device("cpu"), model)
    eng.process_group = tp_group
    eng.init_transfer_engine({"journal_dir": os.path.join(args["dir"], "r0"),
                              "coordinator_journal": os.path.join(args["dir"], "c"),
                              "manifest": m.to_json(), "inner": "torch_broadcast",
                              "inner_init_info": {"src": 1}})
    box = [None]
    dist.broadcast_object_list(box, src=1)
    eng.start_weight_update()
    error = None
    try:
        eng.update_weights(box[0])
    except wtx.Error as e:
        error = str(e)
    try:
        out = eng.finish_weight_update()
    except wtx.Error as a:  # aborted (at finish, or in update_weights already)
        out = {"outcome": "aborted", "reason": str(a)}
    return {"out": out, "error": error, "in_place": eng.received_in_place,
            "reserved": eng.received_reserved, "sources": len(items),
            "expected": wtx.expected_version([m], dict(items))["version"] if not bad else None,
            "status": eng.participant.status()}


def test_FullTensorsLandStraightInLiveMemoryAtTp1(tmp_path):
    res, _ = run_world(_in_place_world, 2, {"dir": str(tmp_path)})
    r = res[0]
    assert r["out"]["outcome"] == "committed", r
    assert r["out"]["version"] == r["expected"]
    assert r["in_place"] == r["sources"] and r["reserved"] == 0
    assert r["status"]["serving"]


def test_InPlaceReceiveOfAShapeThatDiffersFromTheManifestAbortsNamingIt(tmp_path):
    name = "model.layers.0.mlp.down_proj.weight"
    res, _ = run_world(_in_place_world, 2, {"dir": str(tmp_path), "bad_shape": name})
    r = res[0]
    assert r["out"]["outcome"] == "aborted" and name in r["error"], r
    assert not r["status"]["serving"]


def test_PerWorkerListPayloadGivesEachRankItsOwnEntry():
    """vLLM main's update payload may be a list with one dict per worker (rank r takes entry
    r; a single entry is everyone's); a list of another length is refused naming both."""
    from wtx.vllm._engine import _rank_payload
    a, b = {"names": ["a"]}, {"names": ["b"]}
    assert _rank_payload([a, b], 1, 2) is b and _rank_payload([a, b], 0, 2) is a
    assert _rank_payload([a], 1, 2) is a and _rank_payload(a, 1, 2) is a
    with pytest.raises(wtx.vllm.InvalidInfo) as e:
        _rank_payload([a, b, a], 0, 2)
    assert "3 per-worker payloads for 2 ranks" in e.value.message
    assert isinstance(e.value, ValueError)
