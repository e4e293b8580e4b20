"""An RL loop whose every weight sync is a wtx transaction, through vLLM's weight-transfer
contract (the "wtx" backend around the "torch_broadcast" transport).

Three processes over gloo on this machine: world ranks 0 and 1 are the two tensor-parallel
ranks of an inference engine holding a small policy (vLLM-style column/row-parallel layers);
world rank 2 is the trainer. Each of --steps steps the trainer "trains" (a sparse update of the
policy), then pushes the weights through the engine's four phases: init_transfer_engine (once),
start_weight_update, update_weights (the inner transport broadcasts the bytes), and
finish_weight_update (the all-ranks commit). Step 1 sends every tensor (a full update, with the
expected version the trainer computed); the next steps send only the changed elements (a delta
of sparse patches on the committed version). At --fail-at the trainer has a bug: one patch
index lies past its tensor. wtx refuses the patch on every rank, the update aborts on both
ranks, no rank serves, and the next step recovers with a full update.

After every step the engines run the policy and the trainer compares the logits with its own:
a committed step must match exactly what the trainer holds.

    python3 examples/rl_loop/rl_loop.py [--steps 10] [--fail-at 5] [--dir DIR]

Exit status 0 when every step ended as expected (committed and matching, or the injected
failure aborted with no rank serving and the loop recovered), 1 otherwise.
"""

import argparse
import datetime
import json
import os
import shutil
import socket
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import wtx
import wtx.vllm

TRAINER = 2
HIDDEN, VOCAB = 32, 48


class ColumnParallelLinear(nn.Module):
    """vLLM's class name: the output rows are split over the TP ranks."""

    def __init__(self, in_features: int, out_features: int, tp: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out_features // tp, in_features),
                                   requires_grad=False)


class RowParallelLinear(nn.Module):
    """vLLM's class name: the input columns are split over the TP ranks."""

    def __init__(self, in_features: int, out_features: int, tp: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out_features, in_features // tp),
                                   requires_grad=False)


class Policy(nn.Module):
    """One TP rank of a tiny policy: embed -> up (column) -> relu -> down (row) -> head."""

    def __init__(self, tp: int, tp_rank: int, group: object) -> None:
        super().__init__()
        self.tp, self.tp_rank, self.group = tp, tp_rank, group
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.embed.weight.requires_grad_(False)
        self.up = ColumnParallelLinear(HIDDEN, 4 * HIDDEN, tp)
        self.down = RowParallelLinear(4 * HIDDEN, HIDDEN, tp)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight.requires_grad_(False)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        h = torch.relu(x @ self.up.weight.t()) @ self.down.weight.t()
        if self.tp > 1:
            dist.all_reduce(h, group=self.group)
        return (x + h) @ self.head.weight.t()

    @torch.no_grad()
    def load_weights(self, weights):
        """The model's own loader (vLLM's shape): full (HF-named) tensors, sliced here."""
        for name, w in weights:
            dst = dict(self.named_parameters())[name]
            if name == "up.weight":
                n = dst.shape[0]
                dst.copy_(w[self.tp_rank * n:(self.tp_rank + 1) * n])
            elif name == "down.weight":
                n = dst.shape[1]
                dst.copy_(w[:, self.tp_rank * n:(self.tp_rank + 1) * n])
            else:
                dst.copy_(w)


def full_policy(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"embed.weight": torch.randn(VOCAB, HIDDEN, generator=g),
            "up.weight": torch.randn(4 * HIDDEN, HIDDEN, generator=g) * 0.1,
            "down.weight": torch.randn(HIDDEN, 4 * HIDDEN, generator=g) * 0.1,
            "head.weight": torch.randn(VOCAB, HIDDEN, generator=g) * 0.1}


def reference(w: dict, ids: torch.Tensor) -> torch.Tensor:
    x = w["embed.weight"][ids]
    return (x + torch.relu(x @ w["up.weight"].t()) @ w["down.weight"].t()) @ w["head.weight"].t()


IDS = torch.tensor([1, 7, 22, 47, 3, 3, 30])


# ------------------------------------------------------------------------------ the engine

def engine(rank: int, tp_group: object, work: str, fail_at: int) -> None:
    model = Policy(2, rank, tp_group)
    eng = wtx.vllm.WtxWeightTransferEngine({"backend": "wtx", "inner": "torch_broadcast"},
                                           None, torch.device("cpu"), model)
    eng.process_group = tp_group
    while True:
        box: List[Any] = [None]
        dist.broadcast_object_list(box, src=TRAINER)  # the control plane (vLLM: HTTP / RPC)
        method, arg, step = box[0]
        if method == "exit":
            break
        try:
            if method == "init_transfer_engine":
                eng.init_transfer_engine(eng.parse_init_info(arg))
            elif method == "update_weights":
                eng.update_weights(arg)
            else:
                getattr(eng, method)()
            answer: Dict[str, Any] = {"ok": True, "version": eng.weight_version}
        except wtx.Aborted as e:
            answer = {"ok": False, "aborted": str(e)[:300]}
        except Exception as e:  # noqa: BLE001 (reported to the trainer)
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
        participant = eng.participant
        if method == "finish_weight_update" and participant is not None:
            answer["serving"] = participant.status()["serving"]
            answer["logits"] = model(IDS)
        everyone: List[Any] = [None] * 3
        dist.all_gather_object(everyone, answer)
        if method == "init_transfer_engine" and answer["ok"] and participant is not None:
            # The trainer computes a full update's expected version from every rank's manifest.
            dist.all_gather_object(everyone, participant.manifest.to_json())
    eng.shutdown()


# ----------------------------------------------------------------------------- the trainer

def control(method: str, arg: object = None, step: int = 0, wait: bool = True) -> list:
    dist.broadcast_object_list([(method, arg, step)], src=TRAINER)
    return answers() if wait else []


def answers() -> list:
    everyone = [None] * 3
    dist.all_gather_object(everyone, None)
    return everyone[:2]


def trainer(work: str, steps: int, fail_at: int) -> bool:
    init = {"journal_dir": os.path.join(work, "engine-rank{rank}"),
            "coordinator_journal": os.path.join(work, "engine-coordinator"),
            "load": "load_weights", "inner": "torch_broadcast",
            "inner_init_info": {"src": TRAINER}}
    ok = all(a["ok"] for a in control("init_transfer_engine", init))
    if not ok:
        print("init failed", flush=True)
        control("exit", wait=False)
        return False
    manifests = [wtx.Manifest.from_json(m) for m in _manifests()]
    w = full_policy(0)
    committed: Optional[Dict[str, torch.Tensor]] = None  # the weights the engine serves
    version = None
    g = torch.Generator().manual_seed(1)
    for step in range(1, steps + 1):
        for t in w.values():  # "training": a sparse update
            mask = torch.rand(t.shape, generator=g) < 0.05
            t += mask * torch.randn(t.shape, generator=g) * 0.05
        full = committed is None
        control("start_weight_update", None, step)
        items: List[Tuple[str, Any]]
        if committed is None:
            items = [(n, w[n]) for n in sorted(w)]
            info = wtx.vllm.trainer_update_info(items, tx=f"step-{step}", kind="full",
                                                expect_version=True)
            info["counts"] = [None] * len(info["names"])
        else:
            base = {n: committed[n].view(-1) for n in committed}
            items = []
            for n in sorted(w):
                idx = (w[n].view(-1) != base[n]).nonzero().view(-1)
                val = w[n].view(-1)[idx].clone()
                if step == fail_at and n == "up.weight":  # the injected trainer bug
                    idx = torch.cat([idx, torch.tensor([w[n].numel()])])
                    val = torch.cat([val, torch.zeros(1)])
                items.append((n, (idx, val)))
            info = wtx.vllm.broadcast_update_info(items)
            info["wtx"] = {"tx": f"step-{step}", "kind": "delta", "base": version,
                           "sources": sorted(w)}
        control("update_weights", info, step, wait=False)
        args: Dict[str, Any] = {"inner": "torch_broadcast", "inner_args": {"src": TRAINER}}
        if full:
            args["manifests"] = manifests
        expected = wtx.vllm.WtxWeightTransferEngine.trainer_send_weights(iter(items), args)
        updated = answers()
        done = control("finish_weight_update", None, step)
        committed_now = all(a["ok"] for a in done)
        if committed_now:
            version = done[0]["version"]
            committed = {n: t.clone() for n, t in w.items()}
            diff = max(float((a["logits"] - reference(w, IDS)).abs().max()) for a in done)
            good = diff < 1e-4 and (expected is None or expected == version)
            what = f"committed {version[:12]}, logits max |diff| {diff:.1e}"
        else:
            why = done[0].get("aborted") or done[0].get("error") or updated
            serving = [a["serving"] for a in done]
            good = step == fail_at and not any(serving)
            what = f"aborted ({'injected' if step == fail_at else 'UNEXPECTED'}); " \
                   f"serving {serving}: {str(why)[:120]}"
            committed = None  # the next step recovers with a full update
        print(f"step {step:2d} {'full ' if full else 'delta'} {what}", flush=True)
        ok = ok and good
    control("exit", wait=False)
    return ok


def _manifests() -> list:
    everyone = [None] * 3
    dist.all_gather_object(everyone, None)
    return everyone[:2]


def main_process(rank: int, port: int, work: str, steps: int, fail_at: int, q) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=3, timeout=datetime.timedelta(seconds=60))
    tp_group = dist.new_group([0, 1])
    if rank == TRAINER:
        q.put(trainer(work, steps, fail_at))
    else:
        engine(rank, tp_group, work, fail_at)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--fail-at", type=int, default=5)
    ap.add_argument("--dir", default=None, help="journals (default: a fresh temporary folder, "
                    "removed at the end unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary journals")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix="wtx-rl-loop-")
    try:
        return _run(a, work)
    finally:
        if a.dir is None and not a.keep:
            shutil.rmtree(work, ignore_errors=True)


def _run(a: argparse.Namespace, work: str) -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=main_process, args=(r, port, work, a.steps, a.fail_at, q))
             for r in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    ok = (not q.empty()) and q.get() and all(p.exitcode == 0 for p in procs)
    kept = a.dir is not None or a.keep
    print(json.dumps({"ok": bool(ok), "journals": work if kept else None, "wtx": wtx.__file__}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
