#!/usr/bin/env python3
"""A tracked full update through the Python module against torch's own param.copy_(src).

All arms move the same source tensors into the same live torch parameters (an nn.Module whose
named_parameters() are the manifest's), in the same process, interleaved round by round (the
order rotating):
  * copy_: `param.copy_(src[name])` for every parameter (the baseline);
  * update: begin, `Participant.write_source` of every source, commit (prepare hashes the live
    bytes, the decision is logged and synced), through a participant bound to the module, so
    every phase re-resolves every parameter's storage (issue 35's identity checks);
  * unchecked: the same through a participant opened with identity_checks=False.
Both participants use `threads` = torch's thread count. Figures (min and median over rounds):
update_vs_copy_ = copy_ / update (1.0: tracking costs nothing over the bare copy), and
identity_overhead = update / unchecked - 1 (what the identity checks add).

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/python_update_bench.py \\
        [--model tests/conformance/models/qwen2.5-0.5b/config.json] [--rounds 7] [--json]
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


module_from_manifest = wtx.module_from_manifest


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="HF config.json (tp 1, bf16)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    m = wtx.Manifest.from_hf_config(a.model, tp=1, rank=0, dtype="bf16")
    model = module_from_manifest(m)
    params = dict(model.named_parameters())
    g = torch.Generator().manual_seed(1)
    src = {}
    for p in m.params:
        for s in p["shards"]:
            src.setdefault(s["source"],
                           torch.randn(s["source_shape"], generator=g).to(torch.bfloat16))
    # The bytes each parameter ends with: its shards' slices of their sources (fused q/k/v,
    # gate/up), exactly what write_source lands.
    by_param = {}
    for p in m.params:
        full = torch.zeros(p["shape"], dtype=torch.bfloat16)
        for s in p["shards"]:
            full[tuple(slice(b, e) for b, e in s["box"])] = \
                src[s["source"]][tuple(slice(b, e) for b, e in s["source_box"])]
        by_param[p["name"]] = full
    nbytes = sum(t.numel() * t.element_size() for t in params.values())
    threads = torch.get_num_threads()
    times = {"copy_": [], "update": [], "unchecked": []}
    with tempfile.TemporaryDirectory() as d:
        checked = wtx.Participant.open(os.path.join(d, "rank0"), m, rank=0, tensors=model,
                                       threads=threads)
        unchecked = wtx.Participant.open(os.path.join(d, "rank0-unchecked"), m, rank=0,
                                         tensors=model, threads=threads, identity_checks=False)
        coords = {"update": wtx.Coordinator.open(os.path.join(d, "coord"),
                                                 participants=[checked]),
                  "unchecked": wtx.Coordinator.open(os.path.join(d, "coord-unchecked"),
                                                    participants=[unchecked])}
        parts = {"update": checked, "unchecked": unchecked}

        def copy_(_):
            with torch.no_grad():
                for n, t in params.items():
                    t.copy_(by_param[n])

        def tracked(which):
            def run(i):
                c, p = coords[which], parts[which]
                tx = f"{which}{i}"
                c.begin(tx)
                for n, t in src.items():
                    p.write_source(n, t)
                out = c.commit(tx)
                assert out["outcome"] == "committed", out
            return run

        arms = {"copy_": copy_, "update": tracked("update"), "unchecked": tracked("unchecked")}
        for fn in arms.values():  # warm: page in the live tensors and the journals
            fn(-1)
        names = list(arms)
        for i in range(a.rounds):
            order = names[i % 3:] + names[:i % 3]
            for which in order:
                t0 = time.perf_counter()
                arms[which](i)
                times[which].append(time.perf_counter() - t0)
        for n, t in params.items():
            assert torch.equal(t, by_param[n]), n
        checked.close()
        unchecked.close()
    mins = {k: min(v) for k, v in times.items()}
    meds = {k: statistics.median(v) for k, v in times.items()}
    out = {"update_vs_copy_": {"min": mins["copy_"] / mins["update"],
                               "median": meds["copy_"] / meds["update"]},
           "identity_overhead": {"min": mins["update"] / mins["unchecked"] - 1,
                                 "median": meds["update"] / meds["unchecked"] - 1},
           "seconds": {"min": mins, "median": meds}, "bytes": nbytes, "params": len(params),
           "rounds": a.rounds, "threads": threads, "torch": torch.__version__}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{len(params)} params, {nbytes / 1e6:.0f} MB, {threads} threads; "
              f"param.copy_ {meds['copy_'] * 1e3:.1f} ms (min {mins['copy_'] * 1e3:.1f}); "
              f"update {meds['update'] * 1e3:.1f} ms (min {mins['update'] * 1e3:.1f}); "
              f"unchecked {meds['unchecked'] * 1e3:.1f} ms (min {mins['unchecked'] * 1e3:.1f})")
        print(f"update_vs_copy_ median {out['update_vs_copy_']['median']:.3f} "
              f"min {out['update_vs_copy_']['min']:.3f}; identity_overhead median "
              f"{out['identity_overhead']['median'] * 100:+.2f}% "
              f"min {out['identity_overhead']['min'] * 100:+.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
