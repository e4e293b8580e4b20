#!/usr/bin/env python3
"""A full update through the wtx weight-transfer backend against the inner broadcast alone.

Two processes over gloo on loopback (world rank 0: an engine rank holding the model's live
parameters, TP 1; world rank 1: the trainer holding HF-named source tensors). Each round,
interleaved and the order rotating, one full update of every source by each arm:

  * inner: the "torch_broadcast" transport alone, as vLLM's engines without wtx: the trainer
    broadcasts each source; the engine receives it and its loader copies the slices into the
    live parameters (fused q/k/v and gate/up parts);
  * wtx: the same transport wrapped by WtxWeightTransferEngine: start_weight_update,
    update_weights (each full source received straight into the live parameters it is, reserved
    and landed through the participant: coverage, hash, journal), finish_weight_update
    (prepare, the logged decision, commit);
  * wtx-copy: the same with receive_in_place off: each source received into the transport's
    buffer and written by name (copy and hash in one pass), as through an inner engine without
    a destination hook (vLLM's own);
  * wtx+expect: the same, with the trainer computing the expected version of what it sends
    (a hash of every byte, on the trainer) and shipping it;
  * physical: the limit of this transport: each source broadcast straight into the live
    parameter it feeds (into a buffer and copied only where it is not one contiguous run), no
    loader, no bookkeeping. Every arm is also reported against it (physical / arm: 1.0 is the
    limit).
  * vllm-nccl: vLLM's own NCCL engine alone (NCCLWeightTransferEngine with reload_mode
    "direct": a fresh buffer per tensor, broadcast from rank 0 of its communicator, the model's
    loader copies it into the live parameters), driven as vLLM's worker drives it (start,
    receive, finish);
  * wtx-vllm-nccl: the same engine as the wtx backend's inner, the same trainer broadcasts:
    wtx receives in place over that engine's own communicator (wtx/vllm/_direct.py), every
    source reserved, landed, hashed and committed.
  * vllm-nccl-packed / wtx-vllm-nccl-packed: the same two with vLLM main's default wire, packed
    rounds (the trainer packs tensors into buffers of --packed-mib MiB, vLLM's default 1024, and
    broadcasts each; the engine receives each buffer and hands its views to the loader): wtx
    writes each view into its live parameters, copying and hashing in one pass.

vLLM cannot be installed here: the last two arms run vLLM's engine as the double in
tests/python/vllm_double mirrors it (its communicator over gloo), put first on sys.path.

The time of a round runs on the trainer from its first send to the engine's answer that the
update is in (committed, for the wtx arms). Figures (min and median over rounds): the ratio
inner / wtx (1.0: the transaction costs nothing over the transport; the issue's goal: >= 0.95),
inner / wtx+expect, vllm-nccl / wtx-vllm-nccl and vllm-nccl-packed / wtx-vllm-nccl-packed (the
same goal through vLLM's own engine, unpacked and packed).

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/vllm_backend_bench.py \\
        [--model tests/conformance/models/qwen2.5-0.5b/config.json] [--rounds 5] [--json]
        [--packed-mib 1024]
"""

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
# vLLM's weight-transfer code as the tests' double mirrors it; first, so that wtx.vllm's
# engine subclasses its base class as it does under vLLM.
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python", "vllm_double"))

import wtx  # noqa: E402
import wtx.vllm  # noqa: E402
DEFAULT_MODEL = os.path.join(HERE, "..", "..", "tests", "conformance", "models", "qwen2.5-0.5b",
                             "config.json")
TRAINER, ENGINE = 0, 1  # the trainer is rank 0 of vLLM's NCCL group, as vLLM has it
THREADS = int(os.environ.get("WTX_BENCH_THREADS", "0"))  # the participant's data-path threads
ARMS = ("physical", "inner", "wtx", "wtx-copy", "wtx+expect", "vllm-nccl", "wtx-vllm-nccl",
        "vllm-nccl-packed", "wtx-vllm-nccl-packed")
NCCL_ADDRESS = ("127.0.0.1", 29611)  # the key of vLLM's (gloo) update group in the double
VLLM_ARMS = ("vllm-nccl", "wtx-vllm-nccl", "vllm-nccl-packed", "wtx-vllm-nccl-packed")
# --packed-mib (vLLM's DEFAULT_PACKED_BUFFER_SIZE_BYTES: 1 GiB)
PACKED_BYTES = int(os.environ.get("WTX_BENCH_PACKED_MIB", "1024")) << 20


def sources_of(manifest):
    """{source name: (shape, [(param, shard box, source box)])} of the manifest."""
    out = {}
    for p in manifest.params:
        for s in p["shards"]:
            if s.get("source"):
                shape, parts = out.setdefault(s["source"], (s["source_shape"], []))
                parts.append((p["name"], s["box"], s["source_box"]))
    return out


def _slices(box):
    return tuple(slice(b, e) for b, e in box)


def engine(manifest, work, tp_group):
    model = wtx.module_from_manifest(manifest)
    params = dict(model.named_parameters())
    srcs = sources_of(manifest)
    inner = wtx.vllm.TorchBroadcastEngine({"inner": "torch_broadcast"})
    inner.init_transfer_engine(inner.parse_init_info({"src": TRAINER}))

    @torch.no_grad()
    def physical(info):  # each source straight into the live parameter it feeds
        for name, dtype, shape in zip(info["names"], info["dtype_names"], info["shapes"]):
            parts = srcs[name][1]
            whole = [[0, d] for d in shape]
            into = None
            if len(parts) == 1 and [list(r) for r in parts[0][2]] == whole:
                view = params[parts[0][0]][_slices(parts[0][1])]
                into = view if view.is_contiguous() else None
            t = into if into is not None else torch.empty(shape, dtype=getattr(torch, dtype))
            dist.broadcast(t.view(torch.uint8), src=TRAINER)
            if into is None:
                for param, box, sbox in parts:
                    params[param][_slices(box)].copy_(t[_slices(sbox)])

    @torch.no_grad()
    def plain_loader(weights):  # what an engine's own loader does, without wtx
        for name, t in weights:
            for param, box, sbox in srcs[name][1]:
                params[param][_slices(box)].copy_(t[_slices(sbox)])

    from vllm.config import WeightTransferConfig
    from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

    # The served model's own loader (vLLM's load_weights): the copies plain_loader makes.
    model.__class__ = type("ServedModel", (type(model),),
                           {"load_weights": lambda self, weights: plain_loader(weights)})
    vllm_config = SimpleNamespace(
        parallel_config=SimpleNamespace(world_size=1, rank=0, data_parallel_index=0),
        model_config=SimpleNamespace(dtype=torch.bfloat16), speculative_config=None)
    nccl_init = {"master_address": NCCL_ADDRESS[0], "master_port": NCCL_ADDRESS[1],
                 "rank_offset": 1, "world_size": 2}
    packed_init = dict(nccl_init, packed=True, packed_buffer_size_bytes=PACKED_BYTES)
    vllm_alone, vllm_packed = (NCCLWeightTransferEngine(
        WeightTransferConfig(backend="nccl", reload_mode="direct"), vllm_config,
        torch.device("cpu"), model) for _ in range(2))
    vllm_alone.init_transfer_engine(vllm_alone.parse_init_info(nccl_init))
    vllm_packed.init_transfer_engine(vllm_packed.parse_init_info(packed_init))

    wtx.vllm.install_hooks()  # the serving gate, as the plugin installs it in vLLM's workers
    eng = wtx.vllm.WtxWeightTransferEngine(
        WeightTransferConfig(backend="wtx", reload_mode="direct"), vllm_config,
        torch.device("cpu"), model)
    eng.process_group = tp_group
    init = {"journal_dir": os.path.join(work, "rank0"),
            "coordinator_journal": os.path.join(work, "coord"),
            "manifest": manifest.to_json(), "threads": THREADS}
    inners = {"torch_broadcast": {"src": TRAINER}, "nccl": nccl_init,
              "nccl-packed": packed_init}
    current = "torch_broadcast"
    eng.init_transfer_engine(dict(init, inner=current, inner_init_info=inners[current]))
    while True:
        box = [None]
        dist.broadcast_object_list(box, src=TRAINER)
        arm, info = box[0]
        if arm == "exit":
            break
        want = {"wtx-vllm-nccl": "nccl", "wtx-vllm-nccl-packed": "nccl-packed"}.get(
            arm, "torch_broadcast")
        if arm not in ("vllm-nccl", "vllm-nccl-packed") and want != current:  # not timed
            current = want
            eng.init_transfer_engine(dict(init, inner=current.split("-")[0],
                                          inner_init_info=inners[current]))
        dist.barrier()  # the round starts on both sides together
        t0 = time.perf_counter()
        if arm == "physical":
            physical(info)
            ok = True
            phases = {"receive": time.perf_counter() - t0}
        elif arm == "inner":
            inner.receive_weights(inner.parse_update_info(info), plain_loader)
            ok = True
            phases = {"receive": time.perf_counter() - t0}
        elif arm in ("vllm-nccl", "vllm-nccl-packed"):  # as vLLM's worker drives its own
            alone = vllm_alone if arm == "vllm-nccl" else vllm_packed
            alone.start_weight_update()
            alone.receive_weights(alone.parse_update_info(info))
            alone.finish_weight_update()
            ok = True
            phases = {"receive": time.perf_counter() - t0}
        else:
            eng.receive_in_place = arm != "wtx-copy"
            eng.start_weight_update()
            t1 = time.perf_counter()
            eng.update_weights(info)
            t2 = time.perf_counter()
            ok = eng.finish_weight_update()["outcome"] == "committed"
            phases = {"start": t1 - t0, "receive": t2 - t1, "finish": time.perf_counter() - t2}
        if os.environ.get("WTX_BENCH_PHASES"):
            print(arm, {k: round(v, 4) for k, v in phases.items()}, file=sys.stderr)
        dist.broadcast_object_list([ok], src=ENGINE)
    eng.shutdown()


def trainer(manifest, rounds):
    from vllm.distributed.weight_transfer.nccl_engine import _group_of
    from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer
    nccl = _group_of(*NCCL_ADDRESS)  # vLLM's trainer-side communicator (rank 0 of it)
    g = torch.Generator().manual_seed(1)
    items = [(n, torch.randn(shape, generator=g).to(torch.bfloat16))
             for n, (shape, _) in sorted(sources_of(manifest).items())]
    times = {a: [] for a in ARMS}
    n = 0
    for r in range(rounds + 1):  # round 0 warms up, not counted
        order = ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)]
        for arm in order:
            n += 1
            expect = arm == "wtx+expect"
            info = wtx.vllm.trainer_update_info(items, tx=f"bench-{n}", kind="full",
                                                expect_version=expect)
            if arm in ("inner", "physical", "vllm-nccl", "vllm-nccl-packed"):
                info.pop("wtx")
            dist.broadcast_object_list([(arm, info)], src=TRAINER)
            dist.barrier()
            t0 = time.perf_counter()
            if arm.endswith("-packed"):  # vLLM main's default trainer wire: packed buffers
                packed_nccl_broadcast_producer(iter(items), nccl, 0, lambda item: item[1],
                                               buffer_size_bytes=PACKED_BYTES)
            elif arm in VLLM_ARMS:  # vLLM's trainer side unpacked: one broadcast per tensor
                for _, t in items:
                    nccl.broadcast(t, src=0, stream=None)
            else:
                args = {"inner": "torch_broadcast", "inner_args": {"src": TRAINER}}
                if expect:
                    args["manifests"] = [manifest]
                wtx.vllm.WtxWeightTransferEngine.trainer_send_weights(iter(items), args)
            box = [None]
            dist.broadcast_object_list(box, src=ENGINE)
            dt = time.perf_counter() - t0
            if not box[0]:
                raise RuntimeError(f"round {r} {arm}: the update did not commit")
            if r > 0:
                times[arm].append(dt)
    dist.broadcast_object_list([("exit", None)], src=TRAINER)
    return times


def process(rank, port, model_path, rounds, work, q):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=600))
    manifest = wtx.Manifest.from_hf_config(model_path, tp=1, rank=0, dtype="bf16")
    tp_group = dist.new_group([ENGINE])  # collective: both processes create it
    from vllm.distributed.weight_transfer import nccl_engine
    nccl_engine.GROUPS["%s:%d" % NCCL_ADDRESS] = dist.new_group([TRAINER, ENGINE])
    if rank == ENGINE:
        engine(manifest, work, tp_group)
    else:
        q.put(trainer(manifest, rounds))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="HF config.json (tp 1, bf16)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--packed-mib", type=int, default=1024,
                    help="the packed arms' buffer size (vLLM's default: 1024)")
    a = ap.parse_args()
    os.environ["WTX_BENCH_PACKED_MIB"] = str(a.packed_mib)  # the spawned processes read it
    work = tempfile.mkdtemp(prefix="wtx-backend-bench-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=process, args=(r, port, a.model, a.rounds, work, q))
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        times = q.get(timeout=3600)
        for p in procs:
            p.join(timeout=60)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the journals of the rounds: not kept
    m = wtx.Manifest.from_hf_config(a.model, tp=1, rank=0, dtype="bf16")
    ratio = lambda arm: [i / w for i, w in zip(times["inner"], times[arm])]  # noqa: E731
    out = {"bench": "vllm_backend", "model": os.path.basename(os.path.dirname(a.model)),
           "bytes": m.total_bytes, "rounds": a.rounds, "torch_threads": torch.get_num_threads(),
           "seconds": {k: [round(x, 4) for x in v] for k, v in times.items()},
           "inner_vs_wtx": {"min": round(min(ratio("wtx")), 3),
                            "median": round(statistics.median(ratio("wtx")), 3)},
           "inner_vs_wtx_copy": {"min": round(min(ratio("wtx-copy")), 3),
                                 "median": round(statistics.median(ratio("wtx-copy")), 3)},
           "inner_vs_wtx_expect": {"min": round(min(ratio("wtx+expect")), 3),
                                   "median": round(statistics.median(ratio("wtx+expect")), 3)}}
    for alone, with_wtx in (("vllm-nccl", "wtx-vllm-nccl"),
                            ("vllm-nccl-packed", "wtx-vllm-nccl-packed")):
        r = [i / w for i, w in zip(times[alone], times[with_wtx])]
        out[f"{alone}_vs_{with_wtx}".replace("-", "_")] = {
            "min": round(min(r), 3), "median": round(statistics.median(r), 3)}
    out["packed_mib"] = a.packed_mib
    # Every arm against the physical limit (physical / arm; 1.0: as fast as the limit).
    limit = lambda arm: [p / w for p, w in zip(times["physical"], times[arm])]  # noqa: E731
    out["physical_vs"] = {arm: {"min": round(min(limit(arm)), 3),
                                "median": round(statistics.median(limit(arm)), 3)}
                          for arm in ARMS if arm != "physical"}
    if a.json:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
