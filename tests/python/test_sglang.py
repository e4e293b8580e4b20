"""wtx.sglang's adapter against a double of SGLang's model runner (its documented calls:
update_weights_from_distributed / _from_tensor / _from_disk answering (success, message)),
2 engine processes (TP=2 tiny Llama, world ranks 0 and 1) and a trainer (world rank 2) over
gloo. The trainer drives each call on both engine ranks (as SGLang's scheduler does) and
broadcasts the tensors; every call ends in a commit of exactly the sent bytes (the version the
trainer computed, reported as weight_version) or in an abort with no rank serving."""

import os

import torch
import torch.distributed as dist

import wtx
import wtx.vllm
from harness import IDS, run_world
from tiny_llama import hf_weights, reference_forward
from vllm_doubles import make_model
from wtx.sglang import WtxSglangAdapter

TRAINER = 2
NAMES = sorted(hf_weights(0))
GROUP = "wtx-weight-sync"


class ModelRunnerDouble:
    """What the adapter needs of SGLang's ModelRunner: `model` and `_model_update_group`."""

    def __init__(self, model, update_group):
        self.model = model
        self._model_update_group = {}
        self.update_group = update_group


def engine(rank, args):
    tp = dist.new_group([0, 1])
    world = dist.new_group([0, 1, 2])
    model = make_model(rank, tp)
    model.fail_on = args.get("fail_on", {}).get(rank)
    a = WtxSglangAdapter(ModelRunnerDouble(model, world))
    a.update_groups[GROUP] = (world, TRAINER)  # the trainer sends
    d = args["dir"]
    a.init_wtx(os.path.join(d, f"rank{rank}"), os.path.join(d, "coord"), group=tp,
               load=args.get("load", "write_source"))
    everyone = [None] * 3
    dist.all_gather_object(everyone, a.participant.manifest.to_json())
    log = []
    received = []  # per call: sources received straight into live memory, and through a buffer
    while True:
        box = [None]
        try:
            dist.broadcast_object_list(box, src=TRAINER)
        except RuntimeError:
            break
        method, kw = box[0]
        if method == "exit":
            break
        log.append((method, getattr(a, method)(**kw), a.weight_version))
        received.append((a._receiver.in_place, a._receiver.buffered))
    return {"log": log, "status": a.participant.status(), "logits": model(IDS),
            "received": received}


def _call(method, **kw):
    dist.broadcast_object_list([(method, kw)], src=TRAINER)


def trainer(args):
    dist.new_group([0, 1])
    world = dist.new_group([0, 1, 2])  # the update group: the trainer sends on it
    everyone = [None] * 3
    dist.all_gather_object(everyone, None)
    manifests = [wtx.Manifest.from_json(everyone[r]) for r in (0, 1)]
    out = []
    for step in args["steps"]:
        w = hf_weights(step["seed"])
        names = [n for n in NAMES if n not in step.get("skip", ())]
        version = wtx.expected_version(manifests, {n: w[n] for n in NAMES})["version"]
        sent = list(names)
        tensors = [w[n] for n in names]
        if step.get("expect", True):
            v = "0" * 32 if step.get("bogus") else version
            sent.append(wtx.vllm.EXPECTED_VERSION_NAME)
            tensors.append(wtx.vllm.expected_version_tensor(v))
        if step["how"] == "tensor":
            _call("update_weights_from_tensor", named_tensors=list(zip(sent, tensors)),
                  weight_version=step["tx"], **step.get("extra", {}))
        else:
            _call("update_weights_from_distributed", names=sent,
                  dtypes=[str(t.dtype).replace("torch.", "") for t in tensors],
                  shapes=[list(t.shape) for t in tensors], group_name=GROUP,
                  weight_version=step["tx"], **step.get("extra", {}))
            if not step.get("refused"):
                for i, t in enumerate(tensors):
                    if step.get("die_after") == i:
                        os._exit(3)
                    dist.broadcast(t.contiguous().view(torch.uint8), src=TRAINER, group=world)
        out.append({"version": version, "ref": reference_forward(w, IDS)})
    _call("update_weights_from_disk", model_path="/ckpt/step-9")
    _call("exit")
    return out


def deployment(rank, world, args):
    return trainer(args) if rank == TRAINER else engine(rank, args)


def run(tmp_path, steps, **kw):
    return run_world(deployment, 3, dict(dir=str(tmp_path), steps=steps, **kw))


def test_DistributedAndTensorUpdatesCommitAndReportTheCommittedVersion(tmp_path):
    steps = [{"tx": "step-1", "seed": 1, "how": "distributed"},
             {"tx": "step-2", "seed": 2, "how": "tensor"}]
    results, codes = run(tmp_path, steps)
    assert set(results) == {0, 1, 2}, codes
    t = results[TRAINER]
    for r in (0, 1):
        log = results[r]["log"]
        for i in range(2):
            method, (ok, msg), version = log[i]
            assert ok, msg
            assert version == t[i]["version"] and t[i]["version"] in msg
        assert results[r]["status"]["committed_tx"] == "step-2"  # the label is the tx id
        # The broadcast: replicated tensors (norms) land straight in live memory; TP slices of
        # a full tensor through a buffer copied into the reserved views.
        in_place, buffered = results[r]["received"][0]
        assert in_place > 0 and buffered > 0
        assert results[r]["status"]["serving"] is True
        assert torch.allclose(results[r]["logits"], t[1]["ref"], atol=2e-2, rtol=2e-2)
        # update_weights_from_disk is refused, naming why; nothing changed.
        ok, msg = log[2][1]
        assert not ok and "update_weights_from_disk" in msg and "wtx load" in msg


def test_WrongVersionMissingNameAndRefusedFormatAbortOrRefuse(tmp_path):
    steps = [{"tx": "s1", "seed": 1, "how": "distributed"},
             {"tx": "s2", "seed": 2, "how": "distributed", "bogus": True},
             {"tx": "s3", "seed": 3, "how": "tensor", "expect": False,
              "skip": ["model.norm.weight"]},
             {"tx": "s4", "seed": 4, "how": "distributed", "refused": True,
              "extra": {"load_format": "flattened_bucket"}}]
    results, codes = run(tmp_path, steps)
    assert set(results) == {0, 1, 2}, codes
    for r in (0, 1):
        log = results[r]["log"]
        assert log[0][1][0] is True
        ok, msg = log[1][1]
        assert not ok and "E_VERSION_MISMATCH" in msg, msg
        ok, msg = log[2][1]
        assert not ok and "aborted" in msg and "model.norm.weight" in msg, msg
        ok, msg = log[3][1]
        assert not ok and "refused: load_format 'flattened_bucket'" in msg, msg
        assert results[r]["status"]["serving"] is False  # the last full update aborted
        assert results[r]["status"]["committed_tx"] == "s1"


def test_LoaderRaisingOnOneRankAbortsBothAndTrainerKilledMidSendAborts(tmp_path):
    steps = [{"tx": "s1", "seed": 1, "how": "distributed"}]
    results, codes = run(tmp_path, steps, load="load_weights",
                         fail_on={0: "model.layers.1.mlp.gate_proj.weight"})
    assert set(results) == {0, 1, 2}, codes
    for r in (0, 1):
        ok, msg = results[r]["log"][0][1]
        assert not ok and "rank 0: model.layers.1.mlp.gate_proj.weight" in msg, msg
        assert results[r]["status"]["serving"] is False

    steps = [{"tx": "s1", "seed": 1, "how": "distributed", "die_after": 4}]
    results, codes = run(tmp_path / "killed", steps)
    assert codes[TRAINER] == 3 and set(results) == {0, 1}, codes
    for r in (0, 1):
        ok, msg = results[r]["log"][0][1]
        assert not ok and "aborted" in msg and "receive" in msg, msg
        assert results[r]["status"]["serving"] is False
        assert results[r]["status"]["active_tx"] is None
