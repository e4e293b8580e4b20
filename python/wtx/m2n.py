"""M-to-N updates over torch.distributed: a transfer plan run from sharded trainer processes
straight into engine processes (docs/m2n.md).

    plan = wtx.plan_transfer(engine_manifests, "fsdp:2")
    # trainer rank t (K processes):
    wtx.m2n.send(plan, held, rank=t, tx="step-7")  # held: {source: (tensor, its source box)}
    # engine rank n (N processes; `group` a wtx.torch_dist.Group over the engine ranks):
    out = wtx.m2n.receive(plan, group, "step-7")

Every process is a rank of one default process group (gloo in tests, NCCL where present: then
the headers, digests and bounce buffers are device tensors, and a device piece is copied to the
host to be digested; not yet run on a GPU):
trainer rank t is global rank trainer_ranks[t] (default t), engine rank n is global rank
engine_ranks[n] (default K + n). Between a trainer rank and an engine rank, the trainer sends a
header (a status, the piece count and the mode, a hash of the plan's pieces between them, and
the digest of each piece, wtx.piece_digest) and then the pieces, in plan order, with
point-to-point sends. The engine rank checks the plan against its manifest, begins the
transaction on every engine rank, records each digest (Participant.expect_piece) before
any byte lands, receives each piece straight into reserved live memory where the piece is one
contiguous run of one shard (into a buffer copied into the reserved views otherwise), and
commits on every engine rank. Any failure on any engine rank -- a sender that died or could not
produce its pieces, a piece that never arrived, a digest that differs from the landed bytes --
aborts the transaction on all of them, and receive raises wtx.Aborted naming the rank and cause.
"""

import hashlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from . import _TORCH_DTYPES as _DTYPE_NAMES
from . import _fill_reserved, _whole_view
from ._wtx import Aborted, Error, TransferPlan, piece_digest
from .torch_dist import Group, decide_update

__all__ = ["plan_id", "receive", "send"]

_OK = 1
_FAILED = 0
_FULL = 0  # header modes: whole pieces, or patches by piece
_DELTA = 1
_MODES = {_FULL: "full", _DELTA: "delta"}
_DIGEST_BYTES = 16

Box = List[Tuple[int, int]]
Piece = Tuple[int, int, str, Box]



def _dtypes(plan: TransferPlan) -> Dict[str, torch.dtype]:
    """The torch dtype of each source's live dtype; wtx.Error naming a dtype this torch lacks
    (fp8 before torch 2.1)."""
    out = {}
    for name, s in plan.sources.items():
        dt = getattr(torch, _DTYPE_NAMES.get(s["dtype"], ""), None)
        if not isinstance(dt, torch.dtype):
            raise Error("INVALID_ARGUMENT", f"source '{name}': live dtype {s['dtype']} has no "
                        f"torch dtype in torch {torch.__version__}")
        out[name] = dt
    return out


def _global_ranks(plan: TransferPlan, trainer_ranks: Optional[Sequence[int]],
                  engine_ranks: Optional[Sequence[int]]) -> Tuple[List[int], List[int]]:
    k, n = plan.trainer_ranks, plan.engine_ranks
    trainers = list(trainer_ranks) if trainer_ranks is not None else list(range(k))
    engines = list(engine_ranks) if engine_ranks is not None else list(range(k, k + n))
    if len(trainers) != k or len(engines) != n:
        raise Error("INVALID_ARGUMENT",
                    f"the plan has {k} trainer and {n} engine ranks; got {len(trainers)} "
                    f"trainer_ranks and {len(engines)} engine_ranks")
    return trainers, engines


def _wire_device() -> torch.device:
    """Where the headers, digests and bounce buffers travel from: NCCL sends device tensors
    only, gloo host tensors."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _host_digest(t: torch.Tensor) -> bytes:
    """wtx.piece_digest of a tensor on any device (a device piece is copied to the host)."""
    return bytes.fromhex(piece_digest(t if t.device.type == "cpu" else t.cpu()))


def _pair_digest(pieces: Sequence[Piece]) -> bytes:
    """What a trainer rank and an engine rank agree on before any piece moves: a hash of the
    plan's pieces between them (sources and boxes, in order)."""
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    for _, _, src, box in pieces:
        h.update(repr((src, [tuple(r) for r in box])).encode())
    return h.digest()


def plan_id(plan: TransferPlan) -> str:
    """A short hash of what identifies a plan (its trainer spec, rank counts, piece count and
    bytes per engine rank): carried by every header with the transaction id, so a message of
    another plan or transaction is recognized as such (the pair digest then covers the exact
    pieces between two ranks)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(repr((plan.trainer_spec, plan.trainer_ranks, plan.engine_ranks, len(plan),
                   plan.total_bytes, list(plan.bytes_per_engine))).encode())
    return h.hexdigest()


def _id_bytes(tx: str, plan: str) -> bytes:
    return f"{tx}\n{plan}".encode()


def _box_str(box: Box) -> str:
    return "[" + ", ".join(f"[{b}, {e}]" for b, e in box) + "]"


def _piece_of(held: Mapping[str, Tuple[torch.Tensor, Box]], source: str, box: Box,
              dtype: torch.dtype) -> torch.Tensor:
    """The elements of `box` of `source` from the tensor this trainer rank holds, contiguous
    and in the live dtype; wtx.Error naming the source and box when it does not hold them."""
    if source not in held:
        raise Error("INVALID_ARGUMENT", f"source '{source}' piece {_box_str(box)}: this trainer "
                    "rank holds none of the source")
    tensor, at = held[source]
    if len(at) != len(box) or list(tensor.shape) != [e - b for b, e in at]:
        raise Error("INVALID_ARGUMENT", f"source '{source}': the held tensor is "
                    f"{list(tensor.shape)} but its box {_box_str(at)} says otherwise")
    if any(b < hb or e > he for (b, e), (hb, he) in zip(box, at)):
        raise Error("INVALID_ARGUMENT", f"source '{source}' piece {_box_str(box)} is not inside "
                    f"the box this trainer rank holds, {_box_str(at)}")
    part = tensor[tuple(slice(b - hb, e - hb) for (b, e), (hb, _) in zip(box, at))]
    return part.to(dtype).contiguous()


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _delta_of(new: torch.Tensor, old: torch.Tensor, box: Box,
              shape: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """The elements of piece `box` that differ (bit for bit) between `new` and `old`: their
    flat indices in the source (of `shape`) and their new values."""
    as_int = _INT_OF_SIZE[new.element_size()]
    a, b = new.reshape(-1), old.reshape(-1)
    local = (a.view(as_int) != b.view(as_int)).nonzero().squeeze(1)
    flat = torch.zeros_like(local)
    rem = local.clone()
    stride = 1
    strides = []
    for d in reversed(shape):
        strides.append(stride)
        stride *= d
    strides.reverse()
    for d in reversed(range(len(box))):
        extent = box[d][1] - box[d][0]
        flat += (rem % extent + box[d][0]) * strides[d]
        rem //= extent
    return flat, a[local].contiguous()


def send(plan: TransferPlan, held: Mapping[str, Tuple[torch.Tensor, Box]], *, rank: int,
         tx: str, base: Optional[Mapping[str, torch.Tensor]] = None,
         trainer_ranks: Optional[Sequence[int]] = None,
         engine_ranks: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """Sends every piece `plan` gives trainer rank `rank` to its engine rank (one call per
    trainer process).

    held: for each source this rank holds, (tensor, box): the tensor and the box of the source
    it is (source coordinates, [[lo, hi], ...]), e.g. FSDP rows [r*c, (r+1)*c).
    tx: the transaction the engine ranks receive it as (receive's `tx`): every message carries
    it and the plan's id (plan_id), so an engine rank refuses, naming it, a message of another
    transaction (a second send of the same pieces) or another plan, and drains it. Every engine
    rank gets a header from every trainer rank, one with no pieces included.
    Each piece is sliced from its tensor, converted to the live dtype, digested and sent. When a
    piece cannot be produced (a source or box this rank does not hold), nothing is sent: every
    engine rank it owes pieces gets a failed header naming the cause, and wtx.Error is raised
    here; a send that fails (an engine rank gone) raises wtx.Error E_UPDATE_FAILED naming the
    engine rank. Returns {"pieces": count, "bytes": bytes sent}.

    base: a delta (the engine ranks call receive(kind="delta")): for each held source, the
    tensor the engine holds now (the values this rank sent last, the same shape as the held
    tensor). Each piece then travels as the elements that differ bit for bit (flat source
    indices and values, a patch by piece), with the digest of the whole new piece: the engine
    rank checks that its patched bytes equal it, so a base that differs is caught too.
    """
    _, engines = _global_ranks(plan, trainer_ranks, engine_ranks)
    if not 0 <= rank < plan.trainer_ranks:
        raise Error("INVALID_ARGUMENT", f"rank {rank} is not a trainer rank of the plan "
                    f"({plan.trainer_ranks} ranks)")
    by_engine: Dict[int, List[Piece]] = {}
    for piece in plan.pieces(trainer=rank):
        by_engine.setdefault(piece[1], []).append(piece)
    tensors: Dict[int, List[torch.Tensor]] = {}
    patches: Dict[int, List[Tuple[torch.Tensor, torch.Tensor]]] = {}
    failure: Optional[str] = None
    try:
        dtypes = _dtypes(plan)
        for n, pieces in by_engine.items():
            tensors[n] = [_piece_of(held, src, box, dtypes[src]) for _, _, src, box in pieces]
            if base is not None:
                patches[n] = []
                for (_, _, src, box), new in zip(pieces, tensors[n]):
                    if src not in base:
                        raise Error("INVALID_ARGUMENT", f"source '{src}': no base tensor")
                    old = _piece_of({src: (base[src], held[src][1])}, src, box, dtypes[src])
                    patches[n].append(_delta_of(new, old, box, plan.sources[src]["shape"]))
    except Error as e:
        failure = f"trainer rank {rank}: {e.message}"
    mode = _FULL if base is None else _DELTA
    works = []
    sent = 0
    wire = _wire_device()
    ident = _id_bytes(tx, plan_id(plan))
    for n in range(plan.engine_ranks):
        pieces = by_engine.get(n, [])
        dst = engines[n]
        try:
            if failure is not None:
                msg = failure.encode()
                _send_frame([_FAILED, len(msg), mode], ident, dst, wire)
                dist.send(_bytes_tensor(msg).to(wire), dst)
                continue
            _send_frame([_OK, len(pieces), mode], ident, dst, wire)
            digests = _pair_digest(pieces) + b"".join(_host_digest(t) for t in tensors.get(n, []))
            dist.send(_bytes_tensor(digests).to(wire), dst)
            if not pieces:
                continue
            sizes = [v for t in tensors.get(n, []) for v in (t.numel(), t.element_size())]
            dist.send(torch.tensor(sizes, dtype=torch.int64).to(wire), dst)
            if base is None:
                out = tensors[n]
            else:  # the element counts, then each piece's indices and values
                counts = torch.tensor([i.numel() for i, _ in patches[n]], dtype=torch.int64)
                dist.send(counts.to(wire), dst)
                out = [t for i, v in patches[n] if i.numel() for t in (i, v)]
            for t in out:
                works.append((n, dist.isend(t.to(wire), dst)))
                sent += t.numel() * t.element_size()
        except RuntimeError as e:
            raise Error("E_UPDATE_FAILED", f"trainer rank {rank}: sending to engine rank {n} "
                        f"failed ({e})") from None
    for n, w in works:
        try:
            w.wait()
        except RuntimeError as e:
            raise Error("E_UPDATE_FAILED", f"trainer rank {rank}: sending to engine rank {n} "
                        f"failed ({e})") from None
    if failure is not None:
        raise Error("INVALID_ARGUMENT", failure)
    return {"pieces": sum(len(p) for p in by_engine.values()), "bytes": sent}


def _bytes_tensor(raw: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(
        0, dtype=torch.uint8)


def _send_frame(header: List[int], ident: bytes, dst: int, wire: torch.device) -> None:
    """A header: [status, count, mode, id length], then the id (transaction and plan)."""
    dist.send(torch.tensor(header + [len(ident)], dtype=torch.int64).to(wire), dst)
    dist.send(_bytes_tensor(ident).to(wire), dst)


def _recv_bytes(n: int, src: int, wire: torch.device) -> bytes:
    t = torch.empty(n, dtype=torch.uint8, device=wire)
    if n:
        dist.recv(t, src)
    return bytes(t.cpu().tolist())


_MAX_STALE = 8  # stale messages one receive refuses from a sender before giving up on it


def _next_header(t: int, src: int, ident: Tuple[str, str], mode: int, wire: torch.device,
                 stats: Dict[str, Any]) -> Any:
    """The header trainer rank t sent for this transaction: (count, mode, digests, delta
    counts, sizes), or a failure message. A message of another transaction of this plan (a trainer
    that sent twice) is refused, named in stats["refused"], drained, and the next one read; one
    of another plan is drained and is a failure naming it."""
    for _ in range(_MAX_STALE + 1):
        header = torch.zeros(4, dtype=torch.int64, device=wire)
        dist.recv(header, src)
        status, count, sent_mode, id_len = (int(v) for v in header.cpu())
        their_tx, _, their_plan = _recv_bytes(id_len, src, wire).decode(
            errors="replace").partition("\n")
        if status != _OK:
            msg = _recv_bytes(count, src, wire).decode(errors="replace")
            if their_tx == ident[0]:
                return msg
            stats["refused"].append(f"trainer rank {t}: a failed send of transaction "
                                    f"'{their_tx}' ({msg})")
            continue
        raw = _recv_bytes((count + 1) * _DIGEST_BYTES, src, wire)
        sizes = _recv_ints(2 * count, src, wire)
        delta_counts = _recv_ints(count, src, wire) if sent_mode == _DELTA and count else None
        got = (count, sent_mode, raw, delta_counts, sizes)
        if their_tx == ident[0] and their_plan == ident[1]:
            return got
        _drain(src, got, wire)
        what = f"transaction '{their_tx}' of plan {their_plan}"
        if their_plan != ident[1]:
            return (f"trainer rank {t} sent {what}, this rank runs transaction '{ident[0]}' of "
                    f"plan {ident[1]}: another plan (drained, refused)")
        stats["refused"].append(f"trainer rank {t}: {count} piece(s) of {what}, while this is "
                                f"'{ident[0]}' (a second send; drained, refused)")
    return (f"trainer rank {t} sent more than {_MAX_STALE} messages of other transactions; "
            "refused")


def _recv_ints(n: int, src: int, wire: torch.device) -> List[int]:
    t = torch.empty(n, dtype=torch.int64, device=wire)
    if n:
        dist.recv(t, src)
    return [int(v) for v in t.cpu()]


def _drain(src: int, got: Any, wire: torch.device) -> None:
    """Receives and drops the pieces a refused message carries (so its sender completes)."""
    count, sent_mode, _, delta_counts, sizes = got
    for i in range(count):
        numel, esize = sizes[2 * i], sizes[2 * i + 1]
        if sent_mode == _DELTA:
            k = delta_counts[i] if delta_counts else 0
            if k:
                dist.recv(torch.empty(k, dtype=torch.int64, device=wire), src)
                dist.recv(torch.empty(k * esize, dtype=torch.uint8, device=wire), src)
        else:
            dist.recv(torch.empty(numel * esize, dtype=torch.uint8, device=wire), src)


class _Landing:
    """One piece on the engine side: reserved, received (in place or into a buffer), landed."""

    def __init__(self, participant: Any, source: str, box: Box, dtype: torch.dtype,
                 device: torch.device):
        self.source, self.box = source, box
        self.reservations = participant.reserve_source(source, source_box=box)
        into = _whole_view(self.reservations, box, dtype)
        self.buffer: Optional[torch.Tensor] = None
        if into is None:  # through a buffer, copied into the reserved views at land()
            self.buffer = torch.empty([e - b for b, e in box], dtype=dtype, device=device)
        self.target = into if into is not None else self.buffer

    def land(self, participant: Any) -> None:
        if self.buffer is not None:
            _fill_reserved(self.reservations, self.buffer, self.box)
        participant.landed_source(self.source, source_box=self.box)


class _FailedRecv:
    """A receive that could not even be posted (the peer's connection is already gone): its
    wait raises as a receive that never completed does."""

    def __init__(self, error: RuntimeError) -> None:
        self.error = error

    def wait(self) -> None:
        raise self.error


def _irecv(tensor: torch.Tensor, src: int) -> Any:
    """dist.irecv, or a _FailedRecv when posting it already fails (a peer that died)."""
    try:
        return dist.irecv(tensor, src)
    except RuntimeError as e:
        return _FailedRecv(e)


def _receive_pieces(plan: TransferPlan, participant: Any, trainers: List[int],
                    failure: Optional[str], stats: Dict[str, Any], mode: int,
                    tx: str) -> Optional[str]:
    """Headers, digests, reservations (or patches), the receives and the landings of this
    engine rank. Returns the first failure (`failure` when given), naming the sender; after one,
    whatever the live senders still send is drained into scratch buffers, so that none is left
    waiting."""
    n = participant.rank
    try:
        dtypes = _dtypes(plan)
    except Error as e:  # the senders fail alike and send failed headers
        failure = failure or e.message
        dtypes = {name: torch.uint8 for name in plan.sources}  # drained as bytes
    by_trainer: Dict[int, List[Piece]] = {}
    for piece in plan.pieces(engine=n):
        by_trainer.setdefault(piece[0], []).append(piece)
    live: Dict[int, List[Piece]] = {}  # the senders that will send their pieces
    drains: List[Tuple[int, Any]] = []  # messages that match no piece of the plan: drained
    counts: Dict[int, List[int]] = {}  # delta senders: the changed elements of each piece
    wire = _wire_device()
    # Headers first, one from every trainer rank: every digest is recorded (and every piece
    # checked to belong here) before any byte lands.
    ident = (tx, plan_id(plan))
    for t in range(plan.trainer_ranks):
        pieces = by_trainer.get(t, [])
        try:
            got = _next_header(t, trainers[t], ident, mode, wire, stats)
        except RuntimeError as e:
            failure = failure or f"trainer rank {t}: no header ({e})"
            continue
        if isinstance(got, str):  # a failed header, or a message of another plan (drained)
            failure = failure or got
            continue
        count, sent_mode, raw, delta_counts, _ = got
        live[t] = pieces
        if delta_counts is not None:
            counts[t] = delta_counts
        if raw[:_DIGEST_BYTES] != _pair_digest(pieces):
            failure = failure or (
                f"trainer rank {t} sends {count} piece(s) to this rank, the plan {len(pieces)}"
                if count != len(pieces) else
                f"trainer rank {t}'s pieces for this rank are not this plan's (other boxes: "
                "another plan or engine layout)")
            live[t] = []  # what it sent cannot be matched to the plan; drained below
            drains.append((t, got))
            continue
        raw = raw[_DIGEST_BYTES:]
        if sent_mode != mode:
            failure = failure or (f"trainer rank {t} sends a {_MODES[sent_mode]} update, this "
                                  f"rank receives a {_MODES[mode]} one")
        for i, (_, _, src, box) in enumerate(pieces):
            if failure is not None:
                break
            try:
                participant.expect_piece(src, box, f"trainer rank {t}",
                                         raw[i * _DIGEST_BYTES:(i + 1) * _DIGEST_BYTES].hex())
            except Error as e:
                failure = e.message
    for t, got in drains:
        _drain(trainers[t], got, wire)
    landings: List[Tuple[int, Optional[_Landing], Any]] = []
    patches: List[Tuple[int, str, Box, torch.Tensor, torch.Tensor, List[Any]]] = []
    for t, pieces in sorted(live.items()):
        for i, (_, _, src, box) in enumerate(pieces):
            if t in counts:  # a delta sender: indices and values of the changed elements
                k = counts[t][i]
                idx = torch.empty(k, dtype=torch.int64, device=wire)
                val = torch.empty(k, dtype=dtypes[src], device=wire)
                works = [_irecv(idx, trainers[t]), _irecv(val, trainers[t])] if k else []
                patches.append((t, src, box, idx, val, works))
                continue
            landing = None
            if failure is None:
                try:
                    landing = _Landing(participant, src, box, dtypes[src], wire)
                except Error as e:
                    failure = e.message
            target = (landing.target if landing is not None else
                      torch.empty([e - b for b, e in box], dtype=dtypes[src], device=wire))
            landings.append((t, landing, _irecv(target, trainers[t])))
            if landing is not None:
                stats["pieces"] += 1
                stats["bytes"] += target.numel() * target.element_size()
                stats["in_place" if landing.buffer is None else "buffered"] += 1
    for t, landing, work in landings:
        try:
            work.wait()
        except RuntimeError as e:
            failure = failure or (f"trainer rank {t}: a piece never arrived ({e})"
                                  if landing is None else
                                  f"trainer rank {t}: source '{landing.source}' piece "
                                  f"{_box_str(landing.box)} never arrived ({e})")
            continue
        if landing is not None and failure is None:
            try:
                landing.land(participant)
            except Error as e:
                failure = e.message
    for t, src, box, idx, val, works in patches:
        try:
            for w in works:
                w.wait()
        except RuntimeError as e:
            failure = failure or (f"trainer rank {t}: the patch of source '{src}' piece "
                                  f"{_box_str(box)} never arrived ({e})")
            continue
        if failure is None:
            try:
                participant.patch(src, idx, val, source_box=box)
                stats["pieces"] += 1
                stats["bytes"] += idx.numel() * 8 + val.numel() * val.element_size()
                stats["patched"] = stats.get("patched", 0) + idx.numel()
            except Error as e:
                failure = e.message
    return failure


def receive(plan: TransferPlan, group: Group, tx: str, *, kind: str = "full",
            base: Optional[str] = None, trainer_ranks: Optional[Sequence[int]] = None,
            engine_ranks: Optional[Sequence[int]] = None, rollback: bool = False,
            expect_version: Optional[str] = None) -> Dict[str, Any]:
    """Runs `plan` into this engine rank as one transaction `tx` (collective over the engine
    ranks' `group`, a wtx.torch_dist.Group whose rank is the engine rank).

    kind "full": every piece whole. kind "delta" (the trainers call send(base=...)): a delta
    transaction on `base` (default: this rank's committed version) over every source of the
    plan, each piece a patch by piece (Participant.patch(source_box=...)) of the elements that
    changed, and its digest that of the whole new piece, checked over the patched bytes.

    Returns the commit outcome (its "version" is the committed version hash), with "m2n":
    {"pieces", "bytes", "in_place" (received straight into live memory), "buffered"}. Raises
    wtx.Aborted on every engine rank when any of them failed: the plan was made for another
    manifest or rank, a sender died or could not produce its pieces, a piece never arrived, or
    a landed piece differs from its sender's digest (E_VERSION_MISMATCH naming source, box and
    sender). expect_version: the version a party holding every piece computed
    (wtx.expected_version), checked at commit.
    """
    participant = group.participant
    trainers, _ = _global_ranks(plan, trainer_ranks, engine_ranks)
    failure: Optional[str] = None
    try:
        plan.check_engine(participant.rank, participant.manifest)
    except Error as e:
        failure = e.message
    if kind not in ("full", "delta"):
        raise Error("INVALID_ARGUMENT", f"kind: '{kind}' (full|delta)")
    if kind == "delta":
        base = base if base is not None else participant.status()["version"]
        group.begin(tx, kind="delta", base=base, sources=sorted(plan.sources), rollback=rollback)
    else:
        group.begin(tx, kind="full", rollback=rollback)
    stats: Dict[str, Any] = {"pieces": 0, "bytes": 0, "in_place": 0, "buffered": 0,
                             "refused": []}
    failure = _receive_pieces(plan, participant, trainers, failure, stats,
                              _DELTA if kind == "delta" else _FULL, tx)
    try:
        return dict(decide_update(group, tx, failure, expect_version), m2n=stats)
    except RuntimeError as e:  # the engine group itself broke: a rank is gone
        reason = (f"engine rank {participant.rank}: another engine rank of the group is gone "
                  f"({e})")
        raise Aborted(tx, {"outcome": "aborted", "reason": reason, "m2n": stats,
                           "error": {"code": "E_CRASHED", "message": reason}}) from None
