#!/usr/bin/env python3
"""An M-to-N update (wtx.m2n) against all-gather-then-send of the same update.

Four processes over gloo on loopback by default: world ranks 0..K-1 are FSDP trainer ranks
(each holding dim-0 chunks of every source tensor), ranks K..K+N-1 the engine's TP ranks
(live parameters, a wtx participant each, 2PC over their own group). Each round, interleaved
and the order rotating, one full update of every source by each arm, both through wtx (a
journaled all-ranks transaction that commits):

  * m2n: wtx.m2n.send / wtx.m2n.receive on the transfer plan: each engine rank gets exactly the
    pieces it holds, straight from the trainer rank that holds them, digests checked;
  * gather: what a sharded trainer does without a plan: the trainer ranks all-gather each
    tensor, trainer rank 0 broadcasts it whole to the engine ranks, and each engine rank writes
    its shards with write_source.

The time of a round is from a barrier of all ranks to the last rank's end (every engine
committed). Figures: min and median per arm and their ratio m2n / gather (the issue's goal:
<= 0.6).

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/m2n_bench.py \\
        [--model tests/conformance/models/qwen2.5-0.5b/config.json] [--rounds 5] [--json]
"""

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import wtx
import wtx.m2n
from wtx.torch_dist import Group, decide_update

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "..", "..", "tests", "conformance", "models", "qwen2.5-0.5b",
                             "config.json")
ARMS = ("m2n", "gather")


def manifests(args):
    return [wtx.Manifest.from_hf_config(args.model, tp=args.engines, rank=r, dtype="bf16")
            for r in range(args.engines)]


def source_shapes(ms):
    out = {}
    for m in ms:
        for p in m.params:
            for s in p["shards"]:
                if s["source"]:
                    out[s["source"]] = s["source_shape"]
    return dict(sorted(out.items()))


def chunk(n, k, r):
    c = -(-n // k)
    return min(r * c, n), min((r + 1) * c, n)


def trainer(rank, args, shapes, plan, trainers, bcast):
    g = torch.Generator().manual_seed(rank)
    held = {}
    for name, shape in shapes.items():
        lo, hi = chunk(shape[0], args.trainers, rank)
        held[name] = (torch.randn([hi - lo] + shape[1:], generator=g).to(torch.bfloat16),
                      [[lo, hi]] + [[0, d] for d in shape[1:]])

    sends = [0]

    def m2n():
        sends[0] += 1
        wtx.m2n.send(plan, held, rank=rank, tx=f"m2n-{sends[0]}")

    def gather():
        for name, shape in shapes.items():
            local = held[name][0]
            rows = -(-shape[0] // args.trainers)
            padded = torch.zeros([rows] + shape[1:], dtype=torch.bfloat16)
            padded[:local.shape[0]] = local
            parts = [torch.empty_like(padded) for _ in range(args.trainers)]
            # gloo has no bf16 collectives: the bytes travel as uint8.
            dist.all_gather([t.view(torch.uint8) for t in parts], padded.view(torch.uint8),
                            group=trainers)
            if rank == 0:
                full = torch.cat(parts)[:shape[0]].contiguous()
                dist.broadcast(full.view(torch.uint8), src=0, group=bcast)
    return {"m2n": m2n, "gather": gather}


def engine(n, args, ms, plan, engines, bcast, workdir):
    m = ms[n]
    tensors = {p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
    p = wtx.Participant.open(os.path.join(workdir, f"rank{n}"), m, rank=n, tensors=tensors,
                             kernel_identity="bench", threads=args.threads)
    g = Group(p, os.path.join(workdir, "coord"), group=engines)
    shapes = source_shapes(ms)
    count = [0]

    rounds = [0]  # the m2n rounds alone: the trainers count them alike (the transaction id)

    def m2n():
        rounds[0] += 1
        wtx.m2n.receive(plan, g, f"m2n-{rounds[0]}")

    def gather():
        count[0] += 1
        tx = f"gather-{count[0]}"
        g.begin(tx)
        for name, shape in shapes.items():
            full = torch.empty(shape, dtype=torch.bfloat16)
            dist.broadcast(full.view(torch.uint8), src=0, group=bcast)
            p.write_source(name, full)
        decide_update(g, tx, None, None)
    # The engine's live tensors stay referenced for the whole run (wtx refuses a freed one).
    return {"m2n": m2n, "gather": gather, "_live": tensors}


def run(rank, world, port, args, out_path):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=600))
    torch.set_num_threads(1)
    k = args.trainers
    trainers = dist.new_group(list(range(k)))
    engines = dist.new_group(list(range(k, world)))
    bcast = dist.new_group([0] + list(range(k, world)))
    ms = manifests(args)
    plan = wtx.plan_transfer(ms, f"fsdp:{k}")
    with tempfile.TemporaryDirectory() as workdir:
        workdir_all = [workdir]
        dist.broadcast_object_list(workdir_all, src=k)
        if rank < k:
            arms = trainer(rank, args, source_shapes(ms), plan, trainers, bcast)
        else:
            arms = engine(rank - k, args, ms, plan, engines, bcast, workdir_all[0])
        times: dict = {a: [] for a in ARMS}
        for r in range(args.rounds + 1):  # round 0 warms up
            order = ARMS if r % 2 == 0 else tuple(reversed(ARMS))
            for arm in order:
                dist.barrier()
                t0 = time.perf_counter()
                arms[arm]()
                end = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(end, op=dist.ReduceOp.MAX)
                if r > 0:
                    times[arm].append(end.item())
        dist.barrier()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"times": times, "plan_bytes": plan.total_bytes, "pieces": len(plan)}, f)
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="each participant's data threads")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    world = args.trainers + args.engines
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        mp.start_processes(run, args=(world, port, args, out.name), nprocs=world,
                           start_method="fork")
        result = json.load(open(out.name))
    times = result["times"]
    summary = {a: {"min_s": min(times[a]), "median_s": statistics.median(times[a])} for a in ARMS}
    ratio = {"min": summary["m2n"]["min_s"] / summary["gather"]["min_s"],
             "median": summary["m2n"]["median_s"] / summary["gather"]["median_s"]}
    report = {"model": os.path.basename(os.path.dirname(os.path.abspath(args.model))),
              "trainers": args.trainers, "engines": args.engines, "rounds": args.rounds,
              "plan_bytes": result["plan_bytes"], "pieces": result["pieces"], "arms": summary,
              "m2n_over_gather": ratio}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['model']}: fsdp:{args.trainers} -> tp {args.engines}, {args.rounds} rounds, "
          f"{result['pieces']} pieces, {result['plan_bytes'] / 2**30:.2f} GiB planned")
    for a in ARMS:
        print(f"  {a:7s} min {summary[a]['min_s']:.3f} s  median {summary[a]['median_s']:.3f} s")
    print(f"  m2n / gather: min {ratio['min']:.2f}, median {ratio['median']:.2f} (goal <= 0.6)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
