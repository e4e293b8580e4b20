"""wtx.m2n: transfer plans run from K trainer processes straight into N engine processes over
gloo (one torch.distributed world: trainers first, then engines), each update committing exactly
the version a gathered full write commits, or aborting on every engine rank with the named
cause."""

import json
import os

import pytest
import torch
import torch.distributed as dist

import wtx
import wtx.m2n
from harness import run_world
from wtx.torch_dist import Group

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conformance", "models")


def _config(model):
    return os.path.join(MODELS, model, "config.json")


def _engine_manifests(args):
    tp, ep = args["tp"], args.get("ep", 1)
    ranks = ep if ep > 1 else tp
    cfg = json.load(open(_config(args["model"])))
    return [wtx.Manifest.from_hf_config(dict(cfg), tp=tp, rank=r, dtype="bf16", ep=ep)
            for r in range(ranks)]


def _sources(manifests, seed):
    """Every source the engine ranks read, full, deterministic (the 'gathered' weights)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for m in manifests:
        for p in m.params:
            for s in p["shards"]:
                if s["source"] and s["source"] not in out:
                    out[s["source"]] = torch.randn(s["source_shape"], generator=g).to(torch.bfloat16)
    return dict(sorted(out.items()))


def _held(args, rank, sources):
    """What trainer rank `rank` holds: {source: (tensor, box)}."""
    spec = args["trainer"]
    if spec.startswith("fsdp:"):
        k = int(spec.split(":")[1])
        out = {}
        for name, t in sources.items():
            c = -(-t.shape[0] // k)
            lo, hi = min(rank * c, t.shape[0]), min((rank + 1) * c, t.shape[0])
            if hi > lo:
                box = [[lo, hi]] + [[0, d] for d in t.shape[1:]]
                out[name] = (t[lo:hi].clone(), box)
        return out
    # tp:K / ep:E trainers: laid out as vLLM lays out a rank of those degrees.
    degrees = dict(term.split(":") for term in spec.split(","))
    tp, ep = int(degrees.get("tp", 1)), int(degrees.get("ep", 1))
    m = wtx.Manifest.from_hf_config(_config(args["model"]), tp=tp, rank=rank, dtype="bf16", ep=ep)
    out = {}
    for p in m.params:
        for s in p["shards"]:
            if s["source"]:
                box = [list(r) for r in s["source_box"]]
                out[s["source"]] = (wtx.slice_source(sources[s["source"]], box).clone(), box)
    return out


def _plan(args, manifests):
    plan = wtx.plan_transfer(manifests, args["trainer"], hf_config=_config(args["model"]))
    edit = args.get("edit_plan")
    if edit is None:
        return plan
    j = json.loads(plan.to_json())
    del j["bytes"]
    if edit == "drop":
        j["pieces"].pop(len(j["pieces"]) // 2)
    elif edit == "duplicate":
        j["pieces"].insert(0, j["pieces"][0])
    return wtx.TransferPlan.from_json(json.dumps(j))


def _trainer(rank, args, plan, sources):
    held = _held(args, rank, sources)
    for name in args.get("lose", {}).get(rank, ()):
        del held[name]
    if rank == args.get("corrupt"):  # a piece changes after its digest: in-flight corruption
        real = wtx.m2n.piece_digest
        done = []

        def corrupting(t):
            d = real(t)
            if not done and t.numel() > 1:
                t.view(torch.int16)[t.numel() // 2] ^= 0x40
                done.append(True)
            return d
        wtx.m2n.piece_digest = corrupting
    if rank == args.get("die"):  # killed mid-send: after its first piece is on its way
        real_isend = dist.isend

        def dying(t, dst, *a, **k):
            w = real_isend(t, dst, *a, **k)
            w.wait()
            os._exit(9)
        dist.isend = dying
    engines = args.get("engine_ranks")
    try:
        out = {"sent": wtx.m2n.send(plan, held, rank=rank, tx="tx1", engine_ranks=engines)}
        if args.get("send_twice"):  # a trainer bug: the same pieces again, for no transaction
            out["again"] = wtx.m2n.send(plan, held, rank=rank, tx="tx1", engine_ranks=engines)
    except wtx.Error as e:
        return {"error": e.message}
    if args.get("delta"):
        new = {n: (_changed(t), box) for n, (t, box) in held.items()}
        base = {n: t for n, (t, _) in held.items()}
        if args.get("stale_base") == rank:  # believes the engine already has one new tensor
            name = sorted(base)[0]
            base[name] = new[name][0]
        out["delta"] = wtx.m2n.send(plan, new, rank=rank, tx="tx2", base=base,
                                    engine_ranks=engines)
    return out


def _changed(t):
    """Every 7th element of a held tensor, plus one: the delta the tests send."""
    out = t.clone()
    flat = out.view(-1)
    flat[::7] += 1
    return out


def _engine_rank(n, args, manifests, group):
    """Engine rank n: its live tensors (zeroed; the caller keeps them alive, as an engine its
    parameters), its participant over them, and the engine ranks' 2PC group."""
    m = manifests[n]
    tensors = {p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
    p = wtx.Participant.open(os.path.join(args["dir"], f"rank{n}"), m, rank=n, tensors=tensors,
                             kernel_identity="k")
    return tensors, p, Group(p, os.path.join(args["dir"], "coord"), group=group)


def _engine(n, args, plan, manifests, sources, group):
    live, p, g = _engine_rank(n, args, manifests, group)
    expected = wtx.expected_version(manifests, sources)["version"]
    try:
        out = wtx.m2n.receive(plan, g, "tx1", engine_ranks=args.get("engine_ranks"))
    except wtx.Aborted as e:
        return {"aborted": e.decision, "status": p.status(), "expected": expected}
    if args.get("delta"):
        k = args["k"]
        patched = {name: t.clone() for name, t in sources.items()}
        for t in range(k):  # what each trainer rank changes of what it holds
            for name, (piece, box) in _held(args, t, sources).items():
                wtx.slice_source(patched[name], box).copy_(_changed(piece))
        full = out
        try:
            out = wtx.m2n.receive(plan, g, "tx2", kind="delta",
                                  engine_ranks=args.get("engine_ranks"))
        except wtx.Aborted as e:
            return {"aborted": e.decision, "status": p.status(), "full": full}
        return {"outcome": out, "status": p.status(), "full": full,
                "expected": wtx.expected_version(manifests, patched)["version"]}
    return {"outcome": out, "status": p.status(), "expected": expected}


def body(rank, world, args):
    k = args["k"]
    n = world - k
    group = dist.new_group(list(range(k, world)))
    manifests = _engine_manifests(args)
    sources = _sources(manifests, seed=7)
    plan = _plan(args, manifests)
    if rank < k:
        return _trainer(rank, args, plan, sources)
    assert len(manifests) == n
    return _engine(rank - k, args, plan, manifests, sources, group)


def _run(tmp_path, k, **args):
    args.update(dir=str(tmp_path), k=k)
    n = args["ep"] if args.get("ep", 1) > 1 else args["tp"]
    res, codes = run_world(body, k + n, args)
    return [res.get(r) for r in range(k)], [res[k + e] for e in range(n)], codes


@pytest.mark.parametrize("model,trainer,tp,ep", [
    ("tiny-llama", "fsdp:2", 2, 1),
    ("tiny-qwen3-moe", "fsdp:2", 2, 1),
    ("tiny-llama", "fsdp:4", 2, 1),
    ("tiny-llama", "tp:2", 4, 1),
    ("tiny-qwen3-moe", "ep:2", 1, 4),
])
def test_ShardedTrainersCommitTheVersionOfAGatheredFullWrite(tmp_path, model, trainer, tp, ep):
    k = int(trainer.split(":")[1])
    trainers, engines, _ = _run(tmp_path, k, model=model, trainer=trainer, tp=tp, ep=ep)
    plan_bytes = sum(t["sent"]["bytes"] for t in trainers)
    live = sum(sum(torch.zeros(p["shape"], dtype=torch.bfloat16).numel() * 2
                   for p in m.params)
               for m in _engine_manifests({"model": model, "tp": tp, "ep": ep}))
    assert plan_bytes <= live  # vocabulary padding is live but sent by nobody
    for e in engines:
        assert e["outcome"]["outcome"] == "committed", e
        assert e["outcome"]["version"] == e["expected"]
        assert e["status"]["serving"]
    received = [e["outcome"]["m2n"] for e in engines]
    assert sum(r["bytes"] for r in received) == plan_bytes
    # Row slices land straight in live memory; column slices (row-parallel) through a buffer.
    assert sum(r["in_place"] for r in received) > 0


def _aborted(engines, code=None, text=()):
    for e in engines:
        assert "aborted" in e, e
        assert not e["status"]["serving"]
    blob = json.dumps([e["aborted"] for e in engines])
    if code:
        assert code in blob, blob
    for t in text:
        assert t in blob, blob
    return blob


def test_CorruptedPieceAbortsWithVersionMismatchNamingSourceBoxAndSender(tmp_path):
    _, engines, _ = _run(tmp_path, 2, model="tiny-llama", trainer="fsdp:2", tp=2, corrupt=1)
    _aborted(engines, "E_VERSION_MISMATCH", ["from trainer rank 1: landed digest"])


def test_MissingPieceAbortsWithCoverageIncomplete(tmp_path):
    _, engines, _ = _run(tmp_path, 2, model="tiny-llama", trainer="fsdp:2", tp=2,
                         edit_plan="drop")
    _aborted(engines, "E_COVERAGE_INCOMPLETE")


def test_OverlappingPieceAbortsWithDuplicateWrite(tmp_path):
    _, engines, _ = _run(tmp_path, 2, model="tiny-llama", trainer="fsdp:2", tp=2,
                         edit_plan="duplicate")
    _aborted(engines, text=["expected earlier in this transaction"])


def test_SenderKilledMidSendAbortsNamingIt(tmp_path):
    trainers, engines, codes = _run(tmp_path, 2, model="tiny-llama", trainer="fsdp:2", tp=2,
                                    die=1)
    assert codes[1] == 9
    _aborted(engines, "E_UPDATE_FAILED", ["trainer rank 1"])


def test_SenderLackingAPieceFailsBeforeSendingAndEnginesAbortNamingIt(tmp_path):
    trainers, engines, _ = _run(tmp_path, 2, model="tiny-llama", trainer="fsdp:2", tp=2,
                                lose={0: ["model.norm.weight"]})
    assert "source 'model.norm.weight'" in trainers[0]["error"]
    _aborted(engines, "E_UPDATE_FAILED",
             ["trainer rank 0: source 'model.norm.weight'", "holds none of the source"])


def test_PiecesSentToTheWrongRankAreRefusedBeforeAnyByteLands(tmp_path):
    # The trainers swap the engine ranks: each engine gets the other's pieces.
    args = dict(model="tiny-llama", trainer="fsdp:2", tp=2, dir=str(tmp_path), k=2)

    def swapped(rank, world, a):
        if rank < 2:
            a = dict(a, engine_ranks=[3, 2])
        return body(rank, world, a)
    res, _ = run_world(swapped, 4, args)
    blob = _aborted([res[2], res[3]])
    assert ("sent to the wrong rank" in blob or "to this rank, the plan" in blob
            or "are not this plan" in blob), blob
    for e in (res[2], res[3]):
        assert not e["status"]["dirty"] or e["status"]["version"] is None


def test_TransferPlanInPythonRefusesWhatNoTrainerHoldsAndRoundTrips():
    ms = _engine_manifests({"model": "tiny-llama", "tp": 2})
    plan = wtx.plan_transfer(ms, "fsdp:3")
    again = wtx.TransferPlan.from_json(plan.to_json())
    assert again.pieces() == plan.pieces() and again.total_bytes == plan.total_bytes
    assert sum(plan.bytes_per_engine) == plan.total_bytes
    plan.check_engine(1, ms[1])
    with pytest.raises(wtx.Error, match="holds other source boxes"):
        plan.check_engine(0, ms[1])
    held = [{"model.norm.weight": [[[0, 32]]]}, {}]
    with pytest.raises(wtx.Error, match="no trainer rank of 'explicit:2' holds source"):
        wtx.plan_transfer(ms, held)
    with pytest.raises(wtx.Error, match="trainer spec 'tp:2': a tp/ep trainer"):
        wtx.plan_transfer(ms, "tp:2")
    with pytest.raises(wtx.Error, match="outside the source"):
        wtx.plan_transfer(ms, [{"model.norm.weight": [[[0, 10**6]]]}])


def test_DeltaByPiecesOnTheCommittedBase(tmp_path):
    """patch(source_box=...) in one process: pieces of two senders cover each source's held
    part once; the delta commits the version of the patched full tensors."""
    ms = _engine_manifests({"model": "tiny-llama", "tp": 1})
    m = ms[0]
    sources = _sources(ms, seed=3)
    tensors = {p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
    p = wtx.Participant.open(str(tmp_path / "r0"), m, rank=0, tensors=tensors,
                             kernel_identity="k")
    c = wtx.Coordinator.open(str(tmp_path / "c"), participants=[p])
    c.begin("t1")
    plan = wtx.plan_transfer(ms, "fsdp:2")
    for t, _, src, box in plan.pieces():
        piece = wtx.slice_source(sources[src], box).contiguous()
        p.expect_piece(src, box, f"trainer rank {t}", wtx.piece_digest(piece))
        p.write_source(src, piece, source_box=box)
    base = c.commit("t1")["version"]
    c.begin("t2", kind="delta", base=base, sources=list(sources))
    patched = {k: v.clone() for k, v in sources.items()}
    for t, _, src, box in plan.pieces():
        lo, hi = box[0]
        cols = 1
        for b, e in box[1:]:
            cols *= e - b
        idx = torch.arange(lo * cols, hi * cols, 5, dtype=torch.int64)
        flat = patched[src].view(-1)
        flat[idx] += 1
        p.patch(src, idx, flat[idx].clone(), source_box=box)
    with pytest.raises(wtx.Error, match="overlaps the piece"):
        t, _, src, box = plan.pieces()[0]
        p.patch(src, torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.bfloat16),
                source_box=box)
    out = c.commit("t2", expect_version=wtx.expected_version(ms, patched)["version"])
    assert out["outcome"] == "committed"
    assert out["version"] != base


@pytest.mark.parametrize("model,trainer,tp,ep", [
    ("tiny-llama", "fsdp:2", 2, 1),
    ("tiny-qwen3-moe", "ep:2", 1, 4),
    ("tiny-llama", "tp:2", 4, 1),
])
def test_DeltaByPiecesThroughTheRunnerCommitsThePatchedVersion(tmp_path, model, trainer, tp, ep):
    k = int(trainer.split(":")[1])
    trainers, engines, _ = _run(tmp_path, k, model=model, trainer=trainer, tp=tp, ep=ep,
                                delta=True)
    for e in engines:
        assert e["outcome"]["outcome"] == "committed", e
        assert e["outcome"]["version"] == e["expected"]
        assert e["outcome"]["version"] != e["full"]["version"]
        assert e["outcome"]["m2n"]["patched"] > 0
    # Only the changed elements travel (a seventh, each as an int64 index and a bf16 value).
    full = sum(t["sent"]["bytes"] for t in trainers)
    delta = sum(t["delta"]["bytes"] for t in trainers)
    assert delta < full * 0.8


def test_DeltaOnABaseTheEngineDoesNotHoldAbortsOnTheDigest(tmp_path):
    _, engines, _ = _run(tmp_path, 2, model="tiny-llama", trainer="fsdp:2", tp=2, delta=True,
                         stale_base=1)
    _aborted(engines, "E_VERSION_MISMATCH", ["from trainer rank 1: landed digest"])


# ------------------------------------------------------------------- issue 45, 2: binding

def _twice_body(rank, world, args):
    """A trainer that sends its pieces twice for tx1: the engines' tx1 commits, the extra
    message is refused at their next receive (tx2, which commits what was sent for tx2)."""
    k = args["k"]
    group = dist.new_group(list(range(k, world)))
    manifests = _engine_manifests(args)
    plan = _plan(args, manifests)
    s1, s2 = _sources(manifests, seed=7), _sources(manifests, seed=8)
    if rank < k:
        held1, held2 = _held(args, rank, s1), _held(args, rank, s2)
        wtx.m2n.send(plan, held1, rank=rank, tx="tx1")
        wtx.m2n.send(plan, held1, rank=rank, tx="tx1")  # the bug: sent again
        wtx.m2n.send(plan, held2, rank=rank, tx="tx2")
        return {}
    live, _, g = _engine_rank(rank - k, args, manifests, group)
    first = wtx.m2n.receive(plan, g, "tx1")
    second = wtx.m2n.receive(plan, g, "tx2")
    return {"first": first, "second": second,
            "v1": wtx.expected_version(manifests, s1)["version"],
            "v2": wtx.expected_version(manifests, s2)["version"]}


def test_SecondSendOfATransactionIsRefusedNamingItAndTheNextTransactionCommitsItsOwn(tmp_path):
    args = dict(dir=str(tmp_path), k=2, model="tiny-llama", trainer="fsdp:2", tp=2)
    res, codes = run_world(_twice_body, 4, args)
    for e in (2, 3):
        r = res[e]
        assert r["first"]["version"] == r["v1"], r
        assert r["second"]["version"] == r["v2"], r  # not the re-sent tx1 bytes
        refused = r["second"]["m2n"]["refused"]
        assert refused and all("'tx1'" in x and "a second send" in x for x in refused), refused


def _layout_body(rank, world, args):
    """Trainers running the plan of another layout (the same ranks, live dtype f32) while the
    engines run bf16: refused at the first header."""
    k = args["k"]
    group = dist.new_group(list(range(k, world)))
    manifests = _engine_manifests(args)
    plan = _plan(args, manifests)
    if rank < k:
        other = [wtx.Manifest.from_hf_config(_config(args["model"]), tp=2, rank=r, dtype="f32")
                 for r in range(2)]
        wrong = wtx.plan_transfer(other, args["trainer"], hf_config=_config(args["model"]))
        sources = _sources(manifests, seed=7)
        held = {n: (t.to(torch.float32), b) for n, (t, b) in _held(args, rank, sources).items()}
        try:
            wtx.m2n.send(wrong, held, rank=rank, tx="tx1")
        except wtx.Error as e:
            return {"error": e.message}
        return {}
    live, _, g = _engine_rank(rank - k, args, manifests, group)
    try:
        wtx.m2n.receive(plan, g, "tx1")
    except wtx.Aborted as e:
        return {"aborted": e.decision}
    return {"committed": True}


def test_TrainersOnAnotherPlanAreRefusedAtTheFirstHeaderNamingIt(tmp_path):
    args = dict(dir=str(tmp_path), k=2, model="tiny-llama", trainer="fsdp:2", tp=2)
    res, codes = run_world(_layout_body, 4, args, timeout=60)
    for e in (2, 3):
        reason = res[e]["aborted"]["reason"]
        assert "another plan" in reason and "'tx1'" in reason, reason


def _engine_dies_body(rank, world, args):
    if rank == 3:  # engine rank 1 dies as its receive begins
        def dying(*a, **k):
            os._exit(9)
        wtx.m2n._next_header = dying
    return body(rank, world, args)


def test_EngineRankDyingMidReceiveAbortsTheSurvivorsNamingTheCrash(tmp_path):
    args = dict(model="tiny-llama", trainer="fsdp:2", tp=2, dir=str(tmp_path), k=2)
    res, codes = run_world(_engine_dies_body, 4, dict(args, k=2), timeout=90)
    assert codes.get(3) == 9, codes
    survivor = res[2]
    assert "aborted" in survivor, survivor
    error = survivor["aborted"]["error"]
    assert error["code"] in ("E_CRASHED", "E_UPDATE_FAILED"), error
    assert not survivor["status"]["serving"]
