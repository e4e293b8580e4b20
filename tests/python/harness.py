"""Multi-process harness: a torch.distributed (gloo, 127.0.0.1) world of separate processes
forked from the test, each running `target(rank, world, args)`; results come back over a queue.
The tiny-Llama engine ranks and the trainer of the end-to-end tests live here too."""

import datetime
import multiprocessing as mp
import os
import pickle
import queue
import traceback

import torch
import torch.distributed as dist

import wtx
from conftest import free_port
from tiny_llama import TpLlama, hf_weights, reference_forward
from wtx.vllm import WtxWorkerExtension

IDS = torch.tensor([1, 5, 9, 33, 40, 63, 2, 17])


def _entry(target, rank, world, port, args, q):
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=30))
        result = target(rank, world, args)
        # Plain pickle copies tensors (the queue's own pickler would share them through file
        # descriptors of a process that is about to exit).
        q.put((rank, "ok", pickle.dumps(result)))
    except BaseException:  # report everything to the test
        q.put((rank, "error", traceback.format_exc()))
    q.close()
    q.join_thread()
    os._exit(0)  # no teardown collectives with peers that may be gone


def run_world(target, world, args, timeout=90):
    """Runs target in `world` processes; returns ({rank: result}, {rank: exitcode})."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(target, r, world, port, args, q))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    try:
        while len(results) < world:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
            try:
                rank, status, payload = q.get(timeout=0.2)
            except queue.Empty:
                continue
            if status == "error":
                raise AssertionError(f"rank {rank} failed:\n{payload}")
            results[rank] = pickle.loads(payload)
    finally:
        for p in procs:
            p.join(timeout=timeout)
            if p.is_alive():
                p.kill()
                p.join()
    return results, {r: p.exitcode for r, p in enumerate(procs)}


# ---------------------------------------------------------------- the tiny-Llama deployment
# World ranks 0 and 1: the two TP ranks of the engine; world rank 2: the trainer.
TRAINER = 2


class Worker(WtxWorkerExtension):
    def __init__(self, model):
        self.model = model


def _sources_of(step, names):
    skip = set(step.get("skip", ()))
    only = step.get("only")
    return [n for n in names if n not in skip and (only is None or n in only)]


def engine(rank, world, args):
    tp = dist.new_group([0, 1])
    model = TpLlama(2, rank, tp)
    worker = Worker(model)
    d = args["dir"]
    worker.init_wtx(os.path.join(d, f"rank{rank}"), os.path.join(d, "coord"), group=tp,
                    kernel_identity="tiny-llama", **args.get("open", {}).get(rank, {}))
    p = worker.wtx_participant
    everyone = [None] * world
    dist.all_gather_object(everyone, p.manifest.to_json())
    names = sorted(hf_weights(0))
    out = []
    for step in args["steps"]:
        begin = dict(step.get("begin", {}))
        if begin.get("kind") in ("partial", "delta") and begin.get("base") is None:
            begin["base"] = p.status()["version"]  # the version the last step committed
        _rebind(model, step.get("rebind_before", {}).get(rank))
        try:
            worker.start_weight_update(step["tx"], **begin)
        except wtx.Error as e:  # a refused begin: recorded, the step ends here on every rank
            out.append({"begin_error": e.code, "message": e.message, "status": p.status(),
                        "logits": model(IDS)})
            continue
        if step.get("mode", "inplace") == "update_weights":
            # vLLM's weight-transfer path: full HF tensors broadcast, routed by the manifest.
            for name in _sources_of(step, names):
                t = torch.empty(hf_weights(0)[name].shape, dtype=torch.bfloat16)
                dist.broadcast(t.view(torch.uint8), src=TRAINER)  # gloo: no bf16 collectives
                worker.update_weights([(name, t)])
        else:
            for name in _sources_of(step, names):
                for s in p.manifest.source_shards(name):
                    land(p, s)
        _rebind(model, step.get("rebind_during", {}).get(rank))
        if "stray" in step:  # a write that bypasses wtx (a buggy loader)
            model.model.norm.weight.data[step["stray"]] += 1
        try:
            outcome = worker.finish_weight_update()
        except wtx.Aborted as e:  # an abort raises; the scenario records its decision
            outcome = e.decision
        out.append({"outcome": outcome, "status": p.status(), "logits": model(IDS),
                    "verify": p.verify() if step.get("verify_after") else None})
    return out


# The parameter an engine rebinds in the identity tests (a row-parallel weight of layer 0).
REBOUND = "model.layers.0.mlp.down_proj.weight"


def _rebind(model, how):
    """The engine replaces REBOUND's storage, as post-load processing does: "same" copies its
    bytes (param.data = clone), "zeros" gives it other bytes."""
    if how is None:
        return
    param = dict(model.named_parameters())[REBOUND]
    param.data = param.data.clone() if how == "same" else torch.zeros_like(param.data)


def land(p, shard):
    """The trainer's slice of one shard arrives straight in the live tensor (in-place landing):
    reserve, receive into the live view, landed."""
    view = p.reserve(shard["param"], shard=shard["id"])
    assert view.is_contiguous()  # a row range of the row-major live tensor
    dist.recv(view, src=TRAINER)
    p.landed(shard["param"], shard=shard["id"])


def trainer(rank, world, args):
    dist.new_group([0, 1])  # collective: every world rank takes part
    everyone = [None] * world
    dist.all_gather_object(everyone, None)
    manifests = [wtx.Manifest.from_json(everyone[r]) for r in (0, 1)]
    names = sorted(hf_weights(0))
    refs = []
    for step in args["steps"]:
        w = hf_weights(step["seed"])
        if step.get("mode", "inplace") == "update_weights":
            for name in _sources_of(step, names):
                dist.broadcast(w[name].contiguous().view(torch.uint8), src=TRAINER)
        else:
            for name in _sources_of(step, names):
                for r in (0, 1):
                    for s in manifests[r].source_shards(name):
                        dist.send(wtx.slice_source(w[name], s["source_box"]).contiguous(), dst=r)
        refs.append(reference_forward(w, IDS))
    return refs


def deployment(rank, world, args):
    return trainer(rank, world, args) if rank == TRAINER else engine(rank, world, args)


def run_deployment(tmp_path, steps, **kw):
    results, codes = run_world(deployment, 3, dict(dir=str(tmp_path), steps=steps, **kw))
    assert set(results) == {0, 1, 2}, codes
    return [results[0], results[1]], results[2]
