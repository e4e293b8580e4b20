#!/usr/bin/env python3
"""A tracked full update through the Python module against torch's own param.copy_(src).

Both sides move the same source tensors into the same live torch tensors, in the same process,
interleaved round by round (order alternating): the baseline is `live[name].copy_(src[name])`
for every parameter; the tracked update is begin, `Participant.write` of every parameter,
and commit (prepare hashes the live bytes, the decision is logged and synced). The figure is
median(copy_) / median(update): 1.0 means tracking costs nothing over the bare copy.

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/python_update_bench.py \
        [--model tests/conformance/models/qwen2.5-0.5b/config.json] [--rounds 5] [--json]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import wtx

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "..", "..", "tests", "conformance", "models", "qwen2.5-0.5b",
                             "config.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="HF config.json (tp 1, bf16)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    m = wtx.Manifest.from_hf_config(a.model, tp=1, rank=0, dtype="bf16")
    live = {p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
    g = torch.Generator().manual_seed(1)
    src = {n: torch.randn(t.shape, generator=g).to(torch.bfloat16) for n, t in live.items()}
    nbytes = sum(t.numel() * t.element_size() for t in live.values())
    with tempfile.TemporaryDirectory() as d:
        p = wtx.Participant.open(os.path.join(d, "rank0"), m, rank=0, tensors=live)
        c = wtx.Coordinator.open(os.path.join(d, "coord"), participants=[p])

        def copy_():
            for n, t in live.items():
                t.copy_(src[n])

        def update(i):
            tx = f"tx{i}"
            c.begin(tx)
            for n, t in src.items():
                p.write(n, t)
            out = c.commit(tx)
            assert out["outcome"] == "committed", out

        copies, updates = [], []
        update(-1)  # warm: page in the live tensors and the journal
        copy_()
        for i in range(a.rounds):
            order = [0, 1] if i % 2 == 0 else [1, 0]
            for which in order:
                t0 = time.perf_counter()
                if which == 0:
                    copy_()
                else:
                    update(i)
                (copies if which == 0 else updates).append(time.perf_counter() - t0)
        for n, t in live.items():
            assert torch.equal(t, src[n]), n
    mc, mu = statistics.median(copies), statistics.median(updates)
    out = {"update_vs_copy_": mc / mu, "bytes": nbytes, "params": len(live),
           "copy_s": mc, "update_s": mu, "copy_gbps": nbytes / mc / 1e9,
           "update_gbps": nbytes / mu / 1e9, "rounds": a.rounds,
           "torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{len(live)} params, {nbytes / 1e6:.0f} MB; param.copy_ {mc * 1e3:.1f} ms "
              f"({out['copy_gbps']:.2f} GB/s); tracked update {mu * 1e3:.1f} ms "
              f"({out['update_gbps']:.2f} GB/s); update_vs_copy_ {out['update_vs_copy_']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
