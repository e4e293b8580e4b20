"""wtx inside SGLang as SGLang's own code runs it (issue 44), against doubles that mirror
SGLang's source (sglang_double/README.md): requests go through the scheduler's update handlers
-> TpModelWorker's positional forwarders -> the ModelRunner methods wtx installs, on 2 TP
ranks (global ranks 1, 2), with a trainer process (global rank 0) that sends its weights in
buckets as slime, miles and verl do (pause, one request per bucket with the step's
weight_version and flush_cache=False, continue). Aborts are judged by the live model: a forward
pass after an abort equals the previous version's output, or generation stays paused."""

import os
import sys

import pytest
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "sglang_double"))

import wtx  # noqa: E402
import wtx.sglang  # noqa: E402
from harness import IDS, run_world  # noqa: E402
from tiny_llama import hf_weights, reference_forward  # noqa: E402
from sglang.srt.managers import io_struct as io  # noqa: E402

TP = 2
ADDRESS = ("127.0.0.1", 29777)
GROUP = "weight_update_group"
NAMES = sorted(hf_weights(0))


def _groups():
    g = {"ctrl": dist.new_group([0, 1, 2]), "update": dist.new_group([0, 1, 2]),
         "tp": dist.new_group([1, 2]),
         "stages": [dist.new_group([1]), dist.new_group([2])]}  # TP 1 per stage (args "pp")
    from sglang.srt.model_executor import model_runner
    model_runner.GROUPS["%s:%d" % ADDRESS] = g["update"]
    return g


def engine(rank, g, args):
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.model_executor.model_runner import ModelRunner
    from vllm_model import VllmLlama
    if args.get("pp"):  # two pipeline stages of TP 1
        from sglang.srt.distributed.parallel_state import init_world_group
        init_world_group(g["tp"])  # the server's world: both stages
        tp_group, tp_rank = g["stages"][rank - 1], 0
        from vllm_model import keep_stage  # each stage holds its own layers only
        runner = ModelRunner(keep_stage(VllmLlama(1, 0, tp_group), rank - 1, 2), 0, tp_size=1,
                             pp_rank=rank - 1, pp_size=2)
    else:
        tp_group, tp_rank = g["tp"], rank - 1
        runner = ModelRunner(VllmLlama(TP, tp_rank, tp_group), tp_rank, tp_size=TP)
    worker = TpModelWorker(runner, tp_rank)
    d = args["dir"]
    if args.get("plugin"):
        # As SGLang starts a scheduler process: its plugins (wtx's entry point, configured by
        # the environment) load first, then the Scheduler is built, and installs wtx.
        from sglang.srt.managers.scheduler import run_scheduler_process
        sys.path.insert(0, args["plugin"])
        os.environ["WTX_SGLANG_JOURNAL_DIR"] = d
        os.environ["WTX_SGLANG_LOAD"] = args.get("load", "write_source")
        scheduler = run_scheduler_process(worker, tp_group)
    else:
        scheduler = Scheduler(worker, tp_group)
        wtx.sglang.install(scheduler, os.path.join(d, f"rank{tp_rank}"),
                           os.path.join(d, "coord"), load=args.get("load", "write_source"),
                           serving_gate=args.get("gate", "hold"))
    while True:
        box = [None]
        dist.broadcast_object_list(box, src=0, group=g["ctrl"])
        method, arg = box[0]
        if method == "exit":
            break
        try:
            if method == "__test__":
                result = ("ok", arg(scheduler, tp_rank))
            else:
                result = ("ok", getattr(scheduler, method)(arg))
        except Exception as e:  # SGLang's event loop would die here: recorded for the test
            result = ("raised", f"{type(e).__name__}: {e}")
        dist.all_gather_object([None] * 3, result, group=g["ctrl"])
    return {"status": scheduler.wtx.participant.status()}


class Trainer:
    def __init__(self, g):
        self.g = g
        self.pending = []  # tensors the next request's broadcast carries (through the tokenizer)

    def tokenizer(self):
        """SGLang's TokenizerManager in front of the schedulers (this process plays it)."""
        from sglang.srt.managers.tokenizer_manager import TokenizerManager
        return TokenizerManager(lambda method, req: [
            reply for _, reply in self.call(method, req)])

    def call(self, method, arg=None, send=()):
        """One request to every TP rank's scheduler; `send` is broadcast on the update group
        meanwhile (the trainer's side of update_weights_from_distributed)."""
        dist.broadcast_object_list([(method, arg)], src=0, group=self.g["ctrl"])
        send, self.pending = list(send) + self.pending, []
        for t in send:
            dist.broadcast(t.contiguous().view(torch.uint8) if t.dtype == torch.bfloat16 else t,
                           src=0, group=self.g["update"])
        out = [None] * 3
        dist.all_gather_object(out, None, group=self.g["ctrl"])
        return out[1:]

    def bucket(self, w, names, version, load_format=None):
        req = io.UpdateWeightsFromDistributedReqInput(
            names=names, dtypes=["bfloat16"] * len(names), shapes=[list(w[n].shape) for n in names],
            group_name=GROUP, flush_cache=False, weight_version=version, load_format=load_format)
        if load_format == "flattened_bucket":
            flat = torch.cat([w[n].contiguous().view(torch.uint8).flatten() for n in names])
            return self.call("update_weights_from_distributed", req, [flat])
        return self.call("update_weights_from_distributed", req, [w[n] for n in names])

    def step(self, w, version, buckets=3, fail_bucket=None):
        """slime's update_weights: pause, buckets, continue. Returns each bucket's answers."""
        self.call("pause_generation", io.PauseGenerationReqInput(mode="abort"))
        answers = []
        chunks = [NAMES[i::buckets] for i in range(buckets)]
        for i, names in enumerate(chunks):
            answers.append(self.bucket(w, names, version))
            if fail_bucket is not None and i == fail_bucket:
                break  # the trainer stops at the failed bucket (slime raises on it)
        self.call("continue_generation", io.ContinueGenerationReqInput())
        return answers

    def exit(self):
        dist.broadcast_object_list([("exit", None)], src=0, group=self.g["ctrl"])


def world(target, args):
    def entry(rank, size, a):
        g = _groups()
        if rank == 0:
            t = Trainer(g)
            t.call("init_weights_update_group", io.InitWeightsUpdateGroupReqInput(
                master_address=ADDRESS[0], master_port=ADDRESS[1], rank_offset=1,
                world_size=3, group_name=GROUP))
            try:
                return target(t, a)
            finally:
                t.exit()
        return engine(rank, g, a)

    results, _ = run_world(entry, TP + 1, args, timeout=150)
    return results


def _state(scheduler, tp_rank):
    st = scheduler.wtx.participant.status()
    return {"paused": scheduler._engine_paused, "version": st["version"],
            "active_tx": st["active_tx"], "serving": st["serving"], "dirty": st["dirty"]}


def _clear(scheduler, tp_rank):
    scheduler.tp_worker.model_runner.model.fail_on = None


def assert_matches(logits, ref):
    assert torch.allclose(logits, ref, atol=2e-2, rtol=2e-2), (logits - ref).abs().max()


# ------------------------------------------------------------------------------------ cases

class _FailOn:
    def __init__(self, name):
        self.name = name

    def __call__(self, scheduler, tp_rank):
        if tp_rank == 1:
            scheduler.tp_worker.model_runner.model.fail_on = self.name


def _bucketed_through_the_tokenizer(t, args):
    """As an SGLang server runs it: the tokenizer process loaded its plugins too, so the
    step's weight_version is published at the commit point only."""
    import asyncio
    from sglang.srt.plugins import load_plugins
    sys.path.insert(0, args["plugin"])
    os.environ["WTX_SGLANG_JOURNAL_DIR"] = args["dir"]
    load_plugins()
    tm = t.tokenizer()
    w = hf_weights(1)
    out = {"versions": []}
    asyncio.run(tm.pause_generation(io.PauseGenerationReqInput(mode="abort")))
    for names in [NAMES[i::3] for i in range(3)]:
        req = io.UpdateWeightsFromDistributedReqInput(
            names=names, dtypes=["bfloat16"] * len(names),
            shapes=[list(w[n].shape) for n in names], group_name=GROUP, flush_cache=False,
            weight_version="7")
        t.pending = [w[n] for n in names]
        out.setdefault("replies", []).append(asyncio.run(tm.update_weights_from_distributed(req)))
        out["versions"].append(tm.server_args.weight_version)
    asyncio.run(tm.continue_generation(io.ContinueGenerationReqInput()))
    out["published"] = tm.server_args.weight_version
    out["after"] = t.call("__test__", _state)
    out["logits"] = t.call("generate", IDS)[0][1]
    return out


def test_WeightVersionIsPublishedAtTheCommitPointOnly(tmp_path):
    from vllm_world import plugin_path
    r = world(_bucketed_through_the_tokenizer,
              {"dir": str(tmp_path), "plugin": plugin_path("sglang.srt.plugins")})
    f = r[0]
    assert all(ok for ok, _ in f["replies"]), f["replies"]
    assert f["versions"] == ["default"] * 3, f["versions"]  # not after each bucket
    assert f["published"] == "7"
    for _, st in f["after"]:
        assert st["serving"] and not st["paused"], st
    assert_matches(f["logits"], reference_forward(hf_weights(1), IDS))


def _bucketed(t, args):
    out = {}
    w = hf_weights(1)
    t.call("pause_generation", io.PauseGenerationReqInput(mode="retract"))
    chunks = [NAMES[i::3] for i in range(3)]
    out["b1"] = t.bucket(w, chunks[0], "7")
    out["b2"] = t.bucket(w, chunks[1], "7")
    out["mid"] = t.call("__test__", _state)  # nothing committed before the commit point
    out["b3"] = t.bucket(w, chunks[2], "7", load_format="flattened_bucket")
    t.call("continue_generation", io.ContinueGenerationReqInput())
    out["after"] = t.call("__test__", _state)
    out["logits"] = t.call("generate", IDS)[0][1]
    return out


@pytest.mark.parametrize("through", ["install", "plugin"])
def test_BucketedStepCommitsAtContinueGenerationAndNotBefore(tmp_path, through):
    args = {"dir": str(tmp_path)}
    if through == "plugin":  # SGLang's own plugin loading finds wtx's entry point
        from vllm_world import plugin_path
        args["plugin"] = plugin_path("sglang.srt.plugins")
    r = world(_bucketed, args)
    f = r[0]
    for answers in (f["b1"], f["b2"], f["b3"]):
        for kind, reply in answers:
            assert kind == "ok" and reply.success, reply
            assert "commits at continue_generation" in reply.message, reply.message
    for _, st in f["mid"]:
        assert st["active_tx"] and st["version"] is None, st
    for _, st in f["after"]:
        assert st["serving"] and not st["paused"] and st["active_tx"] is None, st
    assert_matches(f["logits"], reference_forward(hf_weights(1), IDS))


def _fail_then_recover(t, args):
    out = {}
    out["first"] = t.step(hf_weights(1), "1")
    out["v1"] = t.call("__test__", _state)
    t.call("__test__", _FailOn(NAMES[3]))  # in the first bucket
    out["failed"] = t.step(hf_weights(2), "2", fail_bucket=0)
    out["held"] = t.call("__test__", _state)
    out["generate_held"] = t.call("generate", IDS)
    t.call("__test__", _clear)
    out["again"] = t.step(hf_weights(3), "3")
    out["after"] = t.call("__test__", _state)
    out["logits"] = t.call("generate", IDS)[0][1]
    return out


def _failed_bucket_answer(answers):
    last = answers[-1]
    return [reply for _, reply in last]


def test_FailedBucketAbortsEveryRankAndGenerationStaysPausedUntilAFullStep(tmp_path):
    r = world(_fail_then_recover, {"dir": str(tmp_path), "load": "load_weights"})
    f = r[0]
    for reply in _failed_bucket_answer(f["failed"]):
        assert not reply.success, reply  # both ranks answer the failure, naming rank 1
        assert "rank 1" in reply.message and "cannot load" in reply.message, reply.message
    for _, st in f["held"]:
        assert st["paused"] and st["dirty"] and not st["serving"], st
    assert all(kind == "ok" and logits is None for kind, logits in f["generate_held"])
    for _, st in f["after"]:
        assert st["serving"] and not st["paused"], st
    assert_matches(f["logits"], reference_forward(hf_weights(3), IDS))


class _FailOnStage:
    def __init__(self, name, stage):
        self.name, self.stage = name, stage

    def __call__(self, scheduler, tp_rank):
        runner = scheduler.tp_worker.model_runner
        if runner.pp_rank == self.stage:
            runner.model.fail_on = self.name


def _manifest(scheduler, tp_rank):
    return scheduler.wtx.participant.manifest.to_json()


def _stages(t, args):
    out = {}
    t.step(hf_weights(1), "1")
    out["manifests"] = [m for _, m in t.call("__test__", _manifest)]
    out["first"] = t.call("__test__", _state)
    stage1 = next(n for n in NAMES if n.startswith("model.layers.1."))
    t.call("__test__", _FailOnStage(stage1, 1))  # a source only the second stage holds
    out["failed"] = t.step(hf_weights(2), "2", buckets=1, fail_bucket=0)
    out["held"] = t.call("__test__", _state)
    t.call("__test__", _clear)
    t.step(hf_weights(3), "3")
    out["after"] = t.call("__test__", _state)
    return out


def test_PipelineStagesCommitOrAbortTogether(tmp_path):
    """Two pipeline stages (installed by SGLang's plugin loading): one step spans both, so a
    bucket failing on the second stage aborts the first too; the next full step serves."""
    from vllm_world import plugin_path
    r = world(_stages, {"dir": str(tmp_path), "load": "load_weights", "pp": 2,
                        "plugin": plugin_path("sglang.srt.plugins")})
    f = r[0]
    manifests = [wtx.Manifest.from_json(m) for m in f["manifests"]]
    held = [{s["source"] for q in m.params for s in q["shards"]} for m in manifests]
    assert held[0] and held[1] and not held[0] & held[1]  # each stage its own layers
    assert held[0] | held[1] == set(NAMES)
    first = wtx.expected_version(manifests, hf_weights(1))["version"]
    assert [st["version"] for _, st in f["first"]] == [first, first]
    for reply in _failed_bucket_answer(f["failed"]):
        assert not reply.success and "rank 1" in reply.message, reply
    for _, st in f["held"]:
        assert st["paused"] and not st["serving"], st  # the first stage holds too
    third = wtx.expected_version(manifests, hf_weights(3))["version"]
    assert [st["version"] for _, st in f["after"]] == [third, third]
    assert sorted(os.listdir(tmp_path)) == ["coordinator", "rank0", "rank1"]


def _restore(t, args):
    out = {}
    t.step(hf_weights(1), "1")
    out["before"] = t.call("generate", IDS)[0][1]
    t.call("__test__", _FailOn(NAMES[0]))  # in the first bucket
    out["failed"] = t.step(hf_weights(2), "2", fail_bucket=0)
    out["after"] = t.call("__test__", _state)
    out["logits"] = t.call("generate", IDS)[0][1]
    return out


def test_RestoreGateGeneratesFromThePreviousVersionAfterAnAbort(tmp_path):
    r = world(_restore, {"dir": str(tmp_path), "load": "load_weights", "gate": "restore"})
    f = r[0]
    assert all(not reply.success for reply in _failed_bucket_answer(f["failed"]))
    for _, st in f["after"]:
        assert st["serving"] and not st["paused"] and not st["dirty"], st
    assert torch.equal(f["logits"], f["before"])


def _call_shapes(t, args):
    from sglang.srt.model_executor.model_runner import LocalSerializedTensor
    from sglang.srt.utils import MultiprocessingSerializer
    out = {}
    w = hf_weights(4)
    t.call("pause_generation", io.PauseGenerationReqInput(mode="abort"))
    # The tensor path as verl sends it: per-rank values wrapped, one payload per TP rank.
    named = [(n, LocalSerializedTensor(values=[MultiprocessingSerializer.serialize(w[n])] * TP))
             for n in NAMES]
    payload = MultiprocessingSerializer.serialize(named, output_str=True)
    out["tensor"] = t.call("update_weights_from_tensor", io.UpdateWeightsFromTensorReqInput(
        serialized_named_tensors=[payload] * TP, weight_version="4", flush_cache=False))
    t.call("continue_generation", io.ContinueGenerationReqInput())
    out["after"] = t.call("__test__", _state)
    out["logits"] = t.call("generate", IDS)[0][1]
    out["disk"] = t.call("update_weights_from_disk", io.UpdateWeightFromDiskReqInput(
        model_path="/nonexistent", recapture_cuda_graph=True))
    out["auto"] = t.call("update_weights_from_tensor", io.UpdateWeightsFromTensorReqInput(
        serialized_named_tensors=[payload] * TP, load_format="auto"))
    out["no_group"] = t.call("update_weights_from_distributed",
                             io.UpdateWeightsFromDistributedReqInput(
                                 names=[], dtypes=[], shapes=[], group_name="nope"))
    out["end"] = t.call("__test__", _state)
    return out


def test_SglangsOwnCallShapesReachWtx(tmp_path):
    r = world(_call_shapes, {"dir": str(tmp_path)})
    f = r[0]
    assert all(kind == "ok" and reply.success for kind, reply in f["tensor"]), f["tensor"]
    for _, st in f["after"]:
        assert st["serving"] and st["version"], st
    assert_matches(f["logits"], reference_forward(hf_weights(4), IDS))
    # Disk: refused with SGLang's answer shape (TpModelWorker's keyword reached wtx).
    assert all(kind == "ok" and not reply.success and "wtx" in reply.message
               for kind, reply in f["disk"]), f["disk"]
    # What SGLang raises, wtx raises alike: "auto" on the tensor path, an unknown group.
    assert all(kind == "raised" and "Unknown load_format=auto" in msg for kind, msg in f["auto"])
    assert all(kind == "raised" and "AssertionError" in msg and "nope" in msg
               for kind, msg in f["no_group"])
    for _, st in f["end"]:
        assert st["serving"], st
