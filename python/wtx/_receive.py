"""The receive path both engine integrations share (wtx.vllm and wtx.sglang import it; it imports
neither): what a received tensor becomes in wtx (written by source name, loaded by the model's
own loader between reserve and landed, a sparse patch, or received straight into live memory),
the expected version carried after the weights, how a failure is worded for the other ranks,
the transaction id every rank derives alike, and when a rank must not serve (holds).
Thread-safety: none of its own; each adapter calls it from one thread per rank."""

import logging
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import torch

from . import Error, Participant, _fill_reserved, _whole_view
from .torch_dist import Group


EXPECTED_VERSION_NAME = "__wtx__.expected_version"


VERSION_BYTES = 128


def expected_version_tensor(version: str) -> torch.Tensor:
    """The tensor that carries `version` after the weights (EXPECTED_VERSION_NAME): its bytes,
    zero-padded to a fixed length (uint8)."""
    raw = version.encode()
    if len(raw) > VERSION_BYTES:
        raise Error("INVALID_ARGUMENT", f"expected version longer than {VERSION_BYTES} bytes")
    out = torch.zeros(VERSION_BYTES, dtype=torch.uint8)
    out[:len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    return out


def version_of(tensor: torch.Tensor) -> str:
    raw = bytes(tensor.to("cpu", torch.uint8).flatten().tolist())
    return raw.rstrip(b"\0").decode(errors="replace")


def describe_failure(e: BaseException) -> str:
    """A failure as the other ranks and vLLM's caller read it: wtx's code and message, or the
    exception's type and text."""
    return f"{e.code}: {e.message}" if isinstance(e, Error) else f"{type(e).__name__}: {e}"


def describe_source_failure(name: str, e: BaseException) -> str:
    """A failure of source `name`, named (a model's loader rarely says which tensor)."""
    what = describe_failure(e)
    return what if name in what else f"{name}: {what}"


def default_tx(prefix: str, participant: Participant, n: int) -> str:
    """A transaction id every TP rank derives alike: the committed version and a count."""
    return "%s-%s-%d" % (prefix, (participant.status().get("version") or "none")[:16], n)


class UpdateState:
    """The participant and the 2PC group an adapter drives; the accessors raise wtx.Error
    INVALID_ARGUMENT naming how to initialize while they are not open."""

    participant: Optional[Participant]
    group: Optional[Group]
    _how_to_init = "init"

    @property
    def _p(self) -> Participant:
        if self.participant is None:
            raise Error("INVALID_ARGUMENT", f"wtx is not initialized ({self._how_to_init})")
        return self.participant

    @property
    def _g(self) -> Group:
        if self.group is None:
            raise Error("INVALID_ARGUMENT", f"wtx is not initialized ({self._how_to_init})")
        return self.group


def report_to_fleet(member: Any) -> None:
    """A commit's report to the engine's fleet member (wtx.fleet.Member), if it has one: the
    fleet sees the new step now rather than at the next period. A registry that does not answer
    is logged, not raised: the commit stands, and the member holds the rank if the registry
    stays unreachable for its TTL."""
    if member is None:
        return
    try:
        member.report_now()
    except Exception as e:  # the registry's failure is not the update's
        logging.getLogger("wtx.fleet").warning("fleet %r: report after a commit failed: %s",
                                               getattr(member, "fleet", "?"), e)


def holds(status: Dict[str, Any]) -> Optional[str]:
    """Why a rank whose wtx status is `status` must not produce tokens, or None: its bytes may
    differ from every committed version (dirty: an aborted or half-applied update), an update is
    open, or its outcome is in doubt. A rank wtx never touched (no transaction yet: vLLM's own
    load) does not hold."""
    if status.get("in_doubt"):
        return f"transaction '{status['in_doubt']}' is in doubt"
    if status.get("active_tx"):
        return f"update '{status['active_tx']}' is in progress"
    if status.get("dirty"):
        return ("its weights are mixed (an update aborted); only a full update that commits "
                "serves again")
    if status.get("held"):
        return str(status["held"])
    return None


class InPlaceReceiver:
    """Full source tensors received straight into live memory (the vLLM backend's inner
    transports with a destination hook, the SGLang adapter's broadcasts).

    destination() reserves a full source (Participant.reserve_source by its whole source box)
    and returns where to receive it: the live view, when the rank holds all of it as one
    contiguous run of one shard in the dtype sent; None (a buffer) otherwise, the reservation
    kept so that land() copies each reserved part out of the buffer. land() then reports the
    source landed. A name or shape that differs from the manifest, or a reservation wtx refuses,
    is not reserved (None): the caller writes it by name, which names the error. Counts:
    in_place, buffered (reserved, received into a buffer)."""

    def __init__(self) -> None:
        self.enabled = True
        self.reserved: Dict[str, List[Dict[str, Any]]] = {}
        self.in_place = 0
        self.buffered = 0

    def reset(self) -> None:
        """A new update: nothing reserved, counts zero."""
        self.reserved = {}
        self.in_place = self.buffered = 0

    def destination(self, p: Participant, name: str, dtype: torch.dtype,
                    shape: List[int]) -> Optional[torch.Tensor]:
        """Where to receive full source `name` (see the class). Raises only what is not a
        wtx.Error (a wtx refusal means: write it by name)."""
        if not self.enabled or name == EXPECTED_VERSION_NAME or name in self.reserved:
            return None
        try:
            shards = p.manifest.source_shards(name)
            if not shards or list(shards[0]["source_shape"]) != list(shape):
                return None
            reserved = p.reserve_source(name, source_box=[[0, d] for d in shape])
        except Error:
            return None
        if not reserved:
            return None
        self.reserved[name] = reserved
        into = _whole_view(reserved, [[0, d] for d in shape], dtype)
        if into is not None:
            self.in_place += 1
        else:
            self.buffered += 1
        return into

    def owns(self, name: str) -> bool:
        """Whether `name` was reserved by destination() and awaits land()."""
        return name in self.reserved

    def land(self, p: Participant, name: str, value: torch.Tensor) -> None:
        """Copies the parts a buffer received into their reserved views (nothing when `value`
        is the live view itself), then reports the source landed."""
        reserved = self.reserved.pop(name)
        whole = [[0, d] for d in value.shape]
        if not (len(reserved) == 1 and reserved[0]["view"].data_ptr() == value.data_ptr()):
            _fill_reserved(reserved, value, whole)  # received into a buffer
        p.landed_source(name, source_box=whole)


def reserve_and_load(p: Participant, model: Any, name: str, value: Any) -> bool:
    """Reserves every shard of source `name` this rank holds, then hands it to the model's own
    `load_weights`; whether anything was reserved (landed_source is the caller's, once the
    bytes are in the live storage)."""
    if not p.reserve_source(name):
        return False
    loader = model.load_weights if hasattr(model, "load_weights") else model
    loader([(name, value)])
    return True


def processed_sources(p: Participant) -> FrozenSet[str]:
    """The sources that feed this rank's processed parameters (manifest `served`: the engine's
    post-load processing turns their checkpoint bytes into another served form)."""
    return frozenset(s["source"] for q in p.manifest.params if q.get("served")
                     for s in q["shards"] if s.get("source"))


def declare_and_load(p: Participant, model: Any, name: str, value: Any) -> None:
    """A source of processed parameters: its checkpoint bytes are declared (hashed into the
    checkpoint version, counted as coverage), then handed to the model's own `load_weights`,
    whose post-load processing writes the served form; prepare hashes that (the served
    digest)."""
    p.declare_source(name, value)
    loader = model.load_weights if hasattr(model, "load_weights") else model
    loader([(name, value)])


def load_one(p: Participant, model: Any, mode: str, name: str, value: Any,
             processed: FrozenSet[str] = frozenset()) -> None:
    """One received item through wtx: a sparse patch `(indices, values)` (flat indices into the
    source), else the full source tensor written by name ("write_source") or loaded by the
    model's own `load_weights` between reserve_source and landed_source ("load_weights"); a
    source of `processed` (processed_sources) declared and loaded by the model's loader."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        indices, values = value
        p.patch(name, indices, values)
    elif name in processed:
        declare_and_load(p, model, name, value)
    elif mode == "write_source":
        p.write_source(name, value)
    elif reserve_and_load(p, model, name, value):
        p.landed_source(name)


def released_reason(call: str) -> str:
    """Why a rank whose engine released the weights' memory (`call`) holds."""
    return (f"the weights' memory is released ({call}); once it is back, a check of its bytes "
            "or a full update serves again")


def resumed_check(p: Participant, call: str) -> Tuple[Optional[str], Dict[str, Any]]:
    """The engine mapped the weights' memory back (`call`): its live bytes are checked against
    the committed version (Participant.verify: every chunk hashed). Returns (why the rank
    still holds, or None; the verify report or why none was made). A difference makes the
    rank durably dirty (held until a full update commits); with nothing committed (or a rank
    already dirty) there is nothing to check the bytes against, so it holds until a full
    update commits."""
    st = p.status()
    if not st.get("version") or st.get("dirty"):
        why = (f"the weights were resumed ({call}) with no committed version to check them "
               "against; a full update serves again")
        return why, {"ok": False, "comparable": False, "message": why}
    try:
        report: Dict[str, Any] = p.verify()
    except Error as e:
        why = f"the resumed weights could not be checked ({call}): {e.code}: {e.message}"
        return why, {"ok": False, "comparable": False, "message": why}
    if report.get("ok") or p.status().get("dirty"):
        return None, report  # proven, or durably dirty (holds() says so)
    return f"the resumed weights differ from committed version {st.get('version')}", report
