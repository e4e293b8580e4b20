"""wtx inside SGLang as SGLang's own code runs it (issues 44 and 49), against doubles that mirror
SGLang's source where a request enters (sglang_double/README.md): every request goes through the
TokenizerManager (the methods SGLang's HTTP routes call) to each TP rank's Scheduler, where one
turn of its event loop dispatches it through the TypeBasedDispatcher that Scheduler.__init__
builds of bound methods -> the update handlers (the Scheduler's own in v0.5.12.post1, its
weight_updater's on main) -> TpModelWorker's positional forwarders -> the ModelRunner methods;
generation too (a request queued, run by a turn of the loop that is not paused). 2 TP ranks
(global ranks 1, 2) and a trainer process (global rank 0) that sends its weights in buckets as
slime, miles and verl do (pause, one request per bucket with the step's weight_version and
flush_cache=False, continue). $WTX_SGLANG_DOUBLE picks the SGLang shape: v0_5_12_post1
(default) or main (CTest runs both: python.sglang, python.sglang_main). Aborts are judged by
the live model: a forward pass after an abort equals the previous version's output, or nothing
is generated."""

import asyncio
import os
import sys

import pytest
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = os.environ.get("WTX_SGLANG_DOUBLE", "v0_5_12_post1")
assert SHAPE in ("v0_5_12_post1", "main"), f"WTX_SGLANG_DOUBLE: unknown shape {SHAPE!r}"
sys.path[:0] = [os.path.join(HERE, "sglang_double", SHAPE),
                os.path.join(HERE, "sglang_double", "common")]

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
        from sglang.srt.model_executor.model_runner import ServerArgs
        tp_group, tp_rank = g["tp"], rank - 1
        runner = ModelRunner(VllmLlama(TP, tp_rank, tp_group), tp_rank, tp_size=TP,
                             server_args=ServerArgs(
                                 enable_weights_cpu_backup=args.get("backup", False)))
    worker = TpModelWorker(runner, tp_rank)
    d = args["dir"]
    if args.get("plugin"):
        # As SGLang starts a scheduler process: its plugins (wtx's entry point, configured by
        # the environment) load first, then the Scheduler is built, and installs wtx.
        from sglang.srt.managers.scheduler import run_scheduler_process
        sys.path.insert(0, args["plugin"])
        os.environ["WTX_SGLANG_JOURNAL_DIR"] = d
        os.environ["WTX_SGLANG_LOAD"] = args.get("load", "write_source")
        os.environ["WTX_SGLANG_SERVING_GATE"] = args.get("gate", "hold")
        if args.get("lineage"):
            os.environ["WTX_SGLANG_LINEAGE"] = args["lineage"]
        if args.get("fleet"):  # tests/python/test_fleet_registry.py
            os.environ["WTX_SGLANG_FLEET_REGISTRY"] = args["fleet"]["registry"]
            os.environ["WTX_SGLANG_FLEET"] = args["fleet"]["name"]
            os.environ["WTX_SGLANG_REPLICA"] = args["fleet"]["replica"]
        scheduler = run_scheduler_process(worker, tp_group)
    else:
        scheduler = Scheduler(worker, tp_group)
        wtx.sglang.install(scheduler, os.path.join(d, f"rank{tp_rank}"),
                           os.path.join(d, "coord"), load=args.get("load", "write_source"),
                           serving_gate=args.get("gate", "hold"))
    while True:
        box = [None]
        dist.broadcast_object_list(box, src=0, group=g["ctrl"])
        kind, arg = box[0]
        if kind == "exit":
            break
        try:
            if kind == "__test__":  # the test looks at the rank (not a request)
                result = ("ok", arg(scheduler, tp_rank))
            else:  # one turn of the scheduler's event loop with the requests received
                result = ("ok", scheduler.event_loop_iteration([arg]))
        except Exception as e:  # SGLang's scheduler process would die here: recorded
            result = ("raised", f"{type(e).__name__}: {e}")
        dist.all_gather_object([None] * 3, result, group=g["ctrl"])
    return {"status": scheduler.wtx.participant.status()}


class SchedulerDied(Exception):
    """A request's handler raised on a rank (SGLang's scheduler process exits)."""


class Trainer:
    def __init__(self, g):
        self.g = g
        self.pending = []  # tensors the next request's broadcast carries
        self.replies = []  # every rank's (kind, replies) of the last request
        self.tm = None

    def tokenizer(self):
        """SGLang's TokenizerManager in front of the schedulers (this process plays it)."""
        from sglang.srt.managers.tokenizer_manager import TokenizerManager
        if self.tm is None:
            self.tm = TokenizerManager(self.send)
        return self.tm

    def _round(self, kind, arg, send=()):
        dist.broadcast_object_list([(kind, arg)], src=0, group=self.g["ctrl"])
        send, self.pending = list(send) + self.pending, []
        for t in send:  # the trainer's side of update_weights_from_distributed
            dist.broadcast(t.contiguous().view(torch.uint8) if t.dtype == torch.bfloat16 else t,
                           src=0, group=self.g["update"])
        out = [None] * 3
        dist.all_gather_object(out, None, group=self.g["ctrl"])
        return out[1:]

    def send(self, req):
        """The request through one turn of every TP rank's event loop; TP rank 0's (outputs to
        the tokenizer, outputs to the detokenizer) come back, as SGLang returns them."""
        self.replies = self._round("request", req)
        died = [msg for kind, msg in self.replies if kind == "raised"]
        if died:
            raise SchedulerDied(" | ".join(died))
        return self.replies[0][1]

    def inspect(self, fn):
        return [r for _, r in self._round("__test__", fn)]

    def run(self, coro):
        return asyncio.run(coro)

    def bucket(self, w, names, version, load_format=None):
        """One update_weights_from_distributed request through the tokenizer; returns its
        (success, message) and every rank's reply."""
        req = io.UpdateWeightsFromDistributedReqInput(
            names=names, dtypes=["bfloat16"] * len(names), shapes=[list(w[n].shape) for n in names],
            group_name=GROUP, flush_cache=False, weight_version=version, load_format=load_format)
        if load_format == "flattened_bucket":
            self.pending = [torch.cat([w[n].contiguous().view(torch.uint8).flatten()
                                       for n in names])]
        else:
            self.pending = [w[n] for n in names]
        answer = self.run(self.tokenizer().update_weights_from_distributed(req))
        return answer, [out[0][0] for _, out in self.replies]

    def pause(self, mode="abort"):
        self.run(self.tokenizer().pause_generation(io.PauseGenerationReqInput(mode=mode)))

    def resume(self):
        self.run(self.tokenizer().continue_generation(io.ContinueGenerationReqInput()))

    def generate(self, rid="r"):
        return self.run(self.tokenizer().generate_request(rid, IDS))

    def step(self, w, version, buckets=3, fail_bucket=None, mode="abort"):
        """slime's update_weights: pause, buckets, continue. Returns each bucket's answers."""
        self.pause(mode)
        answers = []
        for i, names in enumerate([NAMES[i::buckets] for i in range(buckets)]):
            answers.append(self.bucket(w, names, version))
            if fail_bucket is not None and i == fail_bucket:
                break  # the trainer stops at the failed bucket (slime raises on it)
        self.resume()
        return answers

    def exit(self):
        dist.broadcast_object_list([("exit", None)], src=0, group=self.g["ctrl"])


def world(target, args):
    def entry(rank, size, a):
        g = _groups()
        if rank == 0:
            t = Trainer(g)
            t.send(io.InitWeightsUpdateGroupReqInput(
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
            "active_tx": st["active_tx"], "serving": st["serving"], "dirty": st["dirty"],
            "committed_tx": st["committed_tx"]}


def _clear(scheduler, tp_rank):
    scheduler.tp_worker.model_runner.model.fail_on = None


def assert_matches(logits, ref):
    assert logits is not None, "nothing was generated"
    assert torch.allclose(logits, ref, atol=2e-2, rtol=2e-2), (logits - ref).abs().max()


# ------------------------------------------------------------------------------------ cases

class _FailOn:
    def __init__(self, name):
        self.name = name

    def __call__(self, scheduler, tp_rank):
        if tp_rank == 1:
            scheduler.tp_worker.model_runner.model.fail_on = self.name


def _plugin_args(tmp_path, **more):
    from vllm_world import plugin_path
    return dict({"dir": str(tmp_path), "plugin": plugin_path("sglang.srt.plugins")}, **more)


def _load_tokenizer_plugins(args):
    """The tokenizer process loads SGLang's plugins too (wtx's entry point hooks its
    TokenizerManager)."""
    from sglang.srt.plugins import load_plugins
    sys.path.insert(0, args["plugin"])
    os.environ["WTX_SGLANG_JOURNAL_DIR"] = args["dir"]
    load_plugins()


def _published_at_commit(t, args):
    _load_tokenizer_plugins(args)
    tm = t.tokenizer()
    out = {"versions": [], "replies": []}
    t.pause()
    for names in [NAMES[i::3] for i in range(3)]:
        out["replies"].append(t.bucket(hf_weights(1), names, "7")[0])
        out["versions"].append(tm.model_info()["weight_version"])
    t.resume()
    out["published"] = tm.model_info()["weight_version"]
    out["after"] = t.inspect(_state)
    out["logits"] = t.generate()
    # A failed step publishes nothing: the label stays "7".
    t.inspect(_FailOn(NAMES[0]))
    out["failed"] = t.step(hf_weights(2), "8", fail_bucket=0)
    out["published_after_failure"] = tm.model_info()["weight_version"]
    return out


def test_WeightVersionIsPublishedAtTheCommitPointOnly(tmp_path):
    """Through SGLang's tokenizer and both processes' plugin loading: the step's label is
    published once every rank serves the committed version (check_weights' payload, typed
    as this SGLang shape's wire requires), never after a bucket, never after a failed step."""
    f = world(_published_at_commit, _plugin_args(tmp_path, load="load_weights"))[0]
    assert all(ok for ok, _ in f["replies"]), f["replies"]
    assert f["versions"] == ["default"] * 3, f["versions"]  # not after each bucket
    assert f["published"] == "7"
    for st in f["after"]:
        assert st["serving"] and not st["paused"] and st["committed_tx"].startswith(
            "sglang-7-"), st
    assert_matches(f["logits"], reference_forward(hf_weights(1), IDS))
    assert not f["failed"][-1][0][0], f["failed"]
    assert f["published_after_failure"] == "7"


def _published_after_restore(t, args):
    _load_tokenizer_plugins(args)
    tm = t.tokenizer()
    out = {}
    t.step(hf_weights(1), "1")
    out["first"] = tm.model_info()["weight_version"]
    t.inspect(_FailOn(NAMES[7]))  # in the second bucket: the first one went through
    out["failed"] = t.step(hf_weights(2), "2", fail_bucket=1)
    out["after"] = t.inspect(_state)
    out["published"] = tm.model_info()["weight_version"]
    return out


def test_ARestoredStepDoesNotPublishItsLabel(tmp_path):
    """With the restore gate, a step that aborts after some of its buckets went through leaves
    every rank serving the previous version: the tokenizer keeps the previous label (the
    ranks report which step's label they serve), not the aborted step's."""
    from vllm_world import plugin_path
    f = world(_published_after_restore,
              {"dir": str(tmp_path), "load": "load_weights", "gate": "restore",
               "plugin": plugin_path("sglang.srt.plugins")})[0]
    assert f["first"] == "1"
    assert f["failed"][0][0][0] and not f["failed"][-1][0][0], f["failed"]
    for st in f["after"]:
        assert st["serving"] and not st["paused"], st
    assert f["published"] == "1", f["published"]


def _steps_in_a_row(t, args):
    out = {"answers": [], "states": [], "logits": []}
    for step in (1, 2, 3):
        out["answers"].append(t.step(hf_weights(step), str(step)))
        out["states"].append(t.inspect(_state))
        out["logits"].append(t.generate(f"r{step}"))
    return out


@pytest.mark.parametrize("through", ["install", "plugin"])
def test_EveryStepCommitsAtItsContinueGenerationThroughTheDispatcher(tmp_path, through):
    """slime's loop, step after step, through SGLang's dispatcher: each step's buckets answer
    before the commit point, each step commits under its own weight_version at
    continue_generation (none joins the previous one), and generation serves it."""
    args = _plugin_args(tmp_path) if through == "plugin" else {"dir": str(tmp_path)}
    f = world(_steps_in_a_row, args)[0]
    for step, answers in enumerate(f["answers"], 1):
        for (ok, message), replies in answers:
            assert ok and "commits at continue_generation" in message, message
        for st in f["states"][step - 1]:
            assert st["serving"] and not st["paused"] and st["active_tx"] is None, st
            assert st["committed_tx"].startswith(f"sglang-{step}-"), st
        assert_matches(f["logits"][step - 1], reference_forward(hf_weights(step), IDS))


def _bucketed(t, args):
    out = {}
    w = hf_weights(1)
    t.pause("retract")
    chunks = [NAMES[i::3] for i in range(3)]
    out["b1"] = t.bucket(w, chunks[0], "7")
    out["b2"] = t.bucket(w, chunks[1], "7")
    out["mid"] = t.inspect(_state)  # nothing committed before the commit point
    out["b3"] = t.bucket(w, chunks[2], "7", load_format="flattened_bucket")
    t.resume()
    out["after"] = t.inspect(_state)
    out["logits"] = t.generate()
    return out


def test_BucketedStepCommitsAtContinueGenerationAndNotBefore(tmp_path):
    f = world(_bucketed, {"dir": str(tmp_path)})[0]
    for (ok, message), replies in (f["b1"], f["b2"], f["b3"]):
        assert ok, message
        for reply in replies:  # every TP rank's own answer
            assert reply.success and "commits at continue_generation" in reply.message, reply
    for st in f["mid"]:
        assert st["active_tx"] and st["version"] is None and st["paused"], st
    for st in f["after"]:
        assert st["serving"] and not st["paused"] and st["active_tx"] is None, st
    assert_matches(f["logits"], reference_forward(hf_weights(1), IDS))


def _unpaused_step(t, args):
    """A trainer that never pauses: wtx pauses generation while the step is open."""
    out = {}
    out["b1"] = t.bucket(hf_weights(1), NAMES[0::2], "1")
    out["mid"] = t.inspect(_state)
    out["gen_mid"] = t.generate("mid")  # queued: nothing runs on mixed bytes
    out["b2"] = t.bucket(hf_weights(1), NAMES[1::2], "1")
    t.resume()
    out["after"] = t.inspect(_state)
    out["logits"] = t.generate("after")
    return out


def test_AStepOpenWithoutAPauseHoldsGenerationUntilItCommits(tmp_path):
    f = world(_unpaused_step, {"dir": str(tmp_path)})[0]
    assert f["b1"][0][0] and f["b2"][0][0]
    for st in f["mid"]:
        assert st["paused"] and st["active_tx"], st
    assert f["gen_mid"] is None
    for st in f["after"]:
        assert st["serving"] and not st["paused"], st
    assert_matches(f["logits"], reference_forward(hf_weights(1), IDS))


def _fail_then_recover(t, args):
    out = {}
    out["first"] = t.step(hf_weights(1), "1")
    out["v1"] = t.inspect(_state)
    t.inspect(_FailOn(NAMES[3]))  # in the first bucket
    out["failed"] = t.step(hf_weights(2), "2", fail_bucket=0)
    out["held"] = t.inspect(_state)
    out["generate_held"] = t.generate("held")
    t.inspect(_clear)
    out["again"] = t.step(hf_weights(3), "3")
    out["after"] = t.inspect(_state)
    out["logits"] = t.generate("after")
    return out


def test_FailedBucketAbortsEveryRankAndGenerationStaysPausedUntilAFullStep(tmp_path):
    """slime pauses in "abort" mode (the tokenizer does not tell the schedulers): after a
    failed step, SGLang's own continue_generation reaches wtx through the dispatcher and is
    refused; nothing generates from the mixed bytes until a full step commits."""
    f = world(_fail_then_recover, {"dir": str(tmp_path), "load": "load_weights"})[0]
    (ok, message), replies = f["failed"][-1]
    assert not ok and "rank 1" in message and "cannot load" in message, message
    for reply in replies:  # both ranks answer the failure, naming rank 1
        assert not reply.success and "rank 1" in reply.message, reply
    for st in f["held"]:
        assert st["paused"] and st["dirty"] and not st["serving"], st
    assert f["generate_held"] is None
    for st in f["after"]:
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
    out["manifests"] = t.inspect(_manifest)
    out["first"] = t.inspect(_state)
    stage1 = next(n for n in NAMES if n.startswith("model.layers.1."))
    t.inspect(_FailOnStage(stage1, 1))  # a source only the second stage holds
    out["failed"] = t.step(hf_weights(2), "2", buckets=1, fail_bucket=0)
    out["held"] = t.inspect(_state)
    t.inspect(_clear)
    t.step(hf_weights(3), "3")
    out["after"] = t.inspect(_state)
    return out


def test_PipelineStagesCommitOrAbortTogether(tmp_path):
    """Two pipeline stages (installed by SGLang's plugin loading): one step spans both, so a
    bucket failing on the second stage aborts the first too; the next full step serves."""
    f = world(_stages, _plugin_args(tmp_path, load="load_weights", pp=2))[0]
    manifests = [wtx.Manifest.from_json(m) for m in f["manifests"]]
    held = [{s["source"] for q in m.params for s in q["shards"]} for m in manifests]
    assert held[0] and held[1] and not held[0] & held[1]  # each stage its own layers
    assert held[0] | held[1] == set(NAMES)
    first = wtx.expected_version(manifests, hf_weights(1))["version"]
    assert [st["version"] for st in f["first"]] == [first, first]
    for reply in f["failed"][-1][1]:
        assert not reply.success and "rank 1" in reply.message, reply
    for st in f["held"]:
        assert st["paused"] and not st["serving"], st  # the first stage holds too
    third = wtx.expected_version(manifests, hf_weights(3))["version"]
    assert [st["version"] for st in f["after"]] == [third, third]
    assert sorted(os.listdir(tmp_path)) == ["coordinator", "rank0", "rank1"]


def _restore(t, args):
    out = {}
    t.step(hf_weights(1), "1")
    out["before"] = t.generate("before")
    t.inspect(_FailOn(NAMES[0]))  # in the first bucket
    out["failed"] = t.step(hf_weights(2), "2", fail_bucket=0)
    out["after"] = t.inspect(_state)
    out["logits"] = t.generate("after")
    return out


def test_RestoreGateGeneratesFromThePreviousVersionAfterAnAbort(tmp_path):
    f = world(_restore, {"dir": str(tmp_path), "load": "load_weights", "gate": "restore"})[0]
    assert not f["failed"][-1][0][0]
    assert all(not reply.success for reply in f["failed"][-1][1])
    for st in f["after"]:
        assert st["serving"] and not st["paused"] and not st["dirty"], st
    assert torch.equal(f["logits"], f["before"])


def _call_shapes(t, args):
    from sglang.srt.model_executor.model_runner import LocalSerializedTensor
    from sglang.srt.utils import MultiprocessingSerializer
    out = {}
    w = hf_weights(4)
    tm = t.tokenizer()
    t.pause()
    # The tensor path as verl sends it: per-rank values wrapped, one payload per TP rank.
    named = [(n, LocalSerializedTensor(values=[MultiprocessingSerializer.serialize(w[n])] * TP))
             for n in NAMES]
    payload = MultiprocessingSerializer.serialize(named, output_str=True)
    out["tensor"] = t.run(tm.update_weights_from_tensor(io.UpdateWeightsFromTensorReqInput(
        serialized_named_tensors=[payload] * TP, weight_version="4", flush_cache=False)))
    t.resume()
    out["after"] = t.inspect(_state)
    out["logits"] = t.generate()
    out["disk"] = t.send(io.UpdateWeightFromDiskReqInput(
        model_path="/nonexistent", recapture_cuda_graph=True))[0]
    for key, req in (("auto", io.UpdateWeightsFromTensorReqInput(
            serialized_named_tensors=[payload] * TP, load_format="auto")),
                     ("no_group", io.UpdateWeightsFromDistributedReqInput(
                         names=[], dtypes=[], shapes=[], group_name="nope"))):
        try:
            t.send(req)
            out[key] = None
        except SchedulerDied as e:
            out[key] = str(e)
    out["end"] = t.inspect(_state)
    return out


def test_SglangsOwnCallShapesReachWtx(tmp_path):
    f = world(_call_shapes, {"dir": str(tmp_path)})[0]
    assert f["tensor"][0], f["tensor"]
    for st in f["after"]:
        assert st["serving"] and st["version"] and st["committed_tx"].startswith("sglang-4-"), st
    assert_matches(f["logits"], reference_forward(hf_weights(4), IDS))
    # Disk: refused with SGLang's answer shape (TpModelWorker's keyword reached wtx).
    assert all(not reply.success and "wtx" in reply.message for reply in f["disk"]), f["disk"]
    # What SGLang raises, wtx raises alike: "auto" on the tensor path, an unknown group.
    assert f["auto"] and "Unknown load_format=auto" in f["auto"], f["auto"]
    assert f["no_group"] and "AssertionError" in f["no_group"] and "nope" in f["no_group"]
    for st in f["end"]:
        assert st["serving"], st


def _release_resume(t, args):
    """slime's colocated loop: the weights' memory released while the trainer trains, resumed
    before the update."""
    out = {}
    tm = t.tokenizer()
    if args.get("first_step", True):
        t.step(hf_weights(1), "1")
        out["before"] = t.generate("before")
    t.run(tm.release_memory_occupation(io.ReleaseMemoryOccupationReqInput()))
    out["released"] = t.inspect(_state_and_why)
    t.run(tm.resume_memory_occupation(io.ResumeMemoryOccupationReqInput()))
    out["resumed"] = t.inspect(_state_and_why)
    t.resume()
    out["gen_resumed"] = t.generate("resumed")
    out["step"] = t.step(hf_weights(2), "2")
    out["after"] = t.inspect(_state_and_why)
    out["logits"] = t.generate("after")
    return out


def _state_and_why(scheduler, tp_rank):
    return dict(_state(scheduler, tp_rank), **scheduler.wtx.serving_state())


@pytest.mark.parametrize("backup", [True, False])
def test_ReleasedWeightsServeAgainOnlyWhenTheirBytesAreProvenOrAFullStepCommits(tmp_path,
                                                                             backup):
    """SGLang releases the weights' memory (content undefined) and maps it back, with or
    without its CPU backup: wtx holds from the release, checks the resumed bytes against the
    committed version, serves them again only when they match, and otherwise holds until a
    full step commits."""
    f = world(_release_resume, {"dir": str(tmp_path), "backup": backup})[0]
    for st in f["released"]:
        assert not st["serving"] and "released" in st["reason"] and st["paused"], st
    for st in f["resumed"]:
        if backup:
            assert st["serving"] and not st["dirty"], st
        else:
            assert not st["serving"] and st["dirty"] and st["paused"], st
    if backup:
        assert torch.equal(f["gen_resumed"], f["before"])
    else:
        assert f["gen_resumed"] is None  # nothing generated from undefined bytes
    assert all(ok for (ok, _), _ in f["step"])
    for st in f["after"]:
        assert st["serving"] and not st["paused"], st
    assert_matches(f["logits"], reference_forward(hf_weights(2), IDS))


def test_WeightsResumedWithNothingCommittedHoldUntilAFullStep(tmp_path):
    f = world(_release_resume, {"dir": str(tmp_path), "first_step": False})[0]
    for st in f["resumed"]:
        assert not st["serving"] and "no committed version" in st["reason"], st
    assert f["gen_resumed"] is None
    for st in f["after"]:
        assert st["serving"] and not st["paused"], st
    assert_matches(f["logits"], reference_forward(hf_weights(2), IDS))


# -------------------------------------------------------- installing where SGLang dispatches

class _Worker:
    tp_rank = 0

    def __init__(self):
        from sglang.srt.model_executor.model_runner import ModelRunner
        self.model_runner = ModelRunner(torch.nn.Linear(2, 2), 0)


def _scheduler_without(request_type):
    """A Scheduler of this shape whose dispatcher has no entry for `request_type` (an SGLang
    build that routes it elsewhere)."""
    from sglang.srt.managers.scheduler import Scheduler

    class Routed(Scheduler):
        def init_request_dispatcher(self):
            super().init_request_dispatcher()
            table = self._request_dispatcher._mapping
            del table[request_type]

    return Routed(_Worker(), None)


@pytest.mark.parametrize("missing", ["UpdateWeightsFromDistributedReqInput",
                                     "UpdateWeightsFromTensorReqInput",
                                     "ContinueGenerationReqInput", "CheckWeightsReqInput"])
def test_InstallRefusesWhereTheDispatcherWouldNotRouteToWtx(tmp_path, missing):
    from sglang.version import __version__
    scheduler = _scheduler_without(getattr(io, missing))
    with pytest.raises(wtx.Error) as e:
        wtx.sglang.install(scheduler, str(tmp_path / "rank0"), str(tmp_path / "coord"))
    assert e.value.code == "E_UNSUPPORTED"
    assert missing in e.value.message and __version__ in e.value.message, e.value.message
    assert not (tmp_path / "rank0").exists()  # refused before anything opened


def test_CheckDispatchNamesARequestTypeRoutedAwayFromWtx():
    """check_dispatch (run by install) reads SGLang's own table: a handler that is not wtx's
    for a request type a step needs is named, with SGLang's version."""
    from sglang.srt.managers.scheduler import Scheduler
    scheduler = Scheduler(_Worker(), None)
    with pytest.raises(wtx.Error) as e:
        wtx.sglang.check_dispatch(scheduler)
    assert e.value.code == "E_UNSUPPORTED"
    assert "UpdateWeightsFromDistributedReqInput" in e.value.message
    handler = wtx.sglang.resolve_handler(scheduler, io.ContinueGenerationReqInput)
    assert handler == scheduler.continue_generation  # the bound method __init__ collected


def test_AHookSetAfterConstructionIsNotWhatSglangCalls():
    """Why wtx rebinds the dispatcher's table: SGLang's dispatcher holds the bound methods
    Scheduler.__init__ collected, so an attribute set afterwards is never called."""
    from sglang.srt.managers.scheduler import Scheduler
    scheduler = Scheduler(_Worker(), None)
    calls = []
    owner = scheduler.weight_handlers()
    try:
        owner.check_weights = lambda req: calls.append(req)
    except AttributeError:  # main: the weight updater is a slots dataclass (read-only)
        pass
    answer = scheduler._request_dispatcher(io.CheckWeightsReqInput(action="checksum"))
    assert calls == [] and not answer.success


class _ListDispatcher:
    """TypeBasedDispatcher as older SGLang releases wrote it (python/sglang/utils.py, stored
    724c28ee): a list of (type, handler) pairs scanned with isinstance, first match wins."""

    def __init__(self, mapping):
        self._mapping = list(mapping)

    def __call__(self, obj):
        for ty, fn in self._mapping:
            if isinstance(obj, ty):
                return fn(obj)
        raise ValueError(f"Invalid object: {obj}")


def test_TheDispatcherTableIsRewrittenInEitherOfSglangsLayouts():
    """wtx routes a request type to its handler in SGLang's ordered-dict dispatcher and in the
    older list of pairs alike, wrapping the handler SGLang had bound there."""
    from sglang.srt.managers.scheduler import Scheduler
    for as_list in (False, True):
        scheduler = Scheduler(_Worker(), None)
        if as_list:
            scheduler._request_dispatcher = _ListDispatcher(
                scheduler._request_dispatcher._mapping.items())
        seen = []

        def make(original):
            return lambda req: seen.append(original(req)) or "wtx"

        wtx.sglang._rebind(scheduler, io.ContinueGenerationReqInput, make)
        scheduler._engine_paused = True
        assert scheduler._request_dispatcher(io.ContinueGenerationReqInput()) == "wtx"
        assert seen == [None] and not scheduler._engine_paused  # SGLang's own ran inside
        handler = wtx.sglang.resolve_handler(scheduler, io.ContinueGenerationReqInput)
        assert getattr(handler, "__wtx_handler__", False), as_list


def test_InstallingTwiceIntoOneSchedulerIsRefusedNamingIt(tmp_path):
    from sglang.srt.managers.scheduler import Scheduler
    scheduler = Scheduler(_Worker(), None)
    scheduler.wtx = object()  # an adapter already installed (the plugin's, say)
    with pytest.raises(wtx.Error) as e:
        wtx.sglang.install(scheduler, str(tmp_path / "rank0"), str(tmp_path / "coord"))
    assert e.value.code == "INVALID_ARGUMENT" and "already installed" in e.value.message
    assert not (tmp_path / "rank0").exists()


def _status(scheduler, tp_rank):
    return scheduler.wtx.participant.status()


def _step_regression(t, args):
    _load_tokenizer_plugins(args)
    tm = t.tokenizer()
    out = {}
    out["five"] = t.step(hf_weights(1), "5")
    out["back"] = t.step(hf_weights(2), "3")  # a trainer that restarted its count
    out["after_back"] = t.inspect(_status)
    out["published_after_back"] = tm.model_info()["weight_version"]
    out["six"] = t.step(hf_weights(3), "6")
    out["after_six"] = t.inspect(_status)
    return out


def test_AWeightVersionBelowTheCommittedStepIsRefused(tmp_path):
    """Issue 51's lineage through SGLang's dispatcher: a whole-number weight_version is the
    step; a step at or below the committed one is refused by name (E_STEP_REGRESSION), nothing
    changes and the previous label stays published; the next step commits."""
    f = world(_step_regression, _plugin_args(tmp_path, lineage="policy-s"))[0]
    assert all(ok for (ok, _), _ in f["five"]), f["five"]
    (ok, message), _ = f["back"][0]
    assert not ok and "E_STEP_REGRESSION" in message, message
    for st in f["after_back"]:
        assert st["step"] == 5 and st["lineage"] == "policy-s" and st["serving"], st
    assert f["published_after_back"] == "5"
    assert all(ok for (ok, _), _ in f["six"]), f["six"]
    for st in f["after_six"]:
        assert st["step"] == 6 and st["serving"], st
