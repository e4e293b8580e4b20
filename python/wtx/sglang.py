"""wtx for SGLang: its weight-update calls as wtx transactions over the TP group (docs/sglang.md).

SGLang's model runner updates weights with `update_weights_from_distributed(names, dtypes,
shapes, group_name, ...)` (each tensor broadcast from the trainer, rank 0 of the update group)
and `update_weights_from_tensor(named_tensors, ...)`, answering `(success, message)`; the
`weight_version` the caller passes is a label published after the fact. `WtxSglangAdapter`
gives a model runner (or any object with a `model`) the same calls with transaction semantics:

* one call is one transaction (begun, received, committed on every TP rank), unless
  `start_update` opened one, in which case calls add to it until `finish_update` (a trainer
  that sends its weights in buckets);
* every tensor goes through wtx (`write_source`, or the model's own `load_weights` between
  reserve and landed with `load="load_weights"`); a tensor named `EXPECTED_VERSION_NAME`
  carries the version the trainer computed (or pass `expected_version=`);
* a failure on any rank (an unknown name, the loader raising, the trainer gone mid-send) makes
  every rank abort: `(False, message)` naming the rank and the cause, and no rank serves;
* the `weight_version` reported (`adapter.weight_version`, and in the message) is the
  committed version hash; the caller's label becomes the transaction id;
* requests that cannot be honoured transactionally are refused, named: `load_format` other
  than None/"auto" (a packed or direct format would bypass the per-name write),
  `update_weights_from_disk` (use `wtx load`, or send the tensors).

Every call is collective over the TP group (all ranks call it with the same arguments, as
SGLang's scheduler does).
"""

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from . import Aborted, Error, Manifest, Participant
from .torch_dist import Group
from .vllm._engine import (EXPECTED_VERSION_NAME, InPlaceReceiver, _UpdateState, _version_of,
                           abort_quietly, decide_update, default_tx, expected_version_tensor,
                           load_one)
from .vllm._extension import LLAMA_STACKED_PARAMS_MAPPING, manifest_from_module

__all__ = ["WtxSglangAdapter", "EXPECTED_VERSION_NAME", "expected_version_tensor"]

_DEFAULT_GROUP = object()


class WtxSglangAdapter(_UpdateState):
    """SGLang's weight-update calls with wtx transactions (module docstring)."""

    _how_to_init = "init_wtx"

    def __init__(self, model_runner: Any) -> None:
        """model_runner: SGLang's ModelRunner, or any object with `model` (and optionally
        `_model_update_group`: {group_name: process group}, SGLang's own). `update_groups`
        ({group_name: group or (group, sender's global rank)}) is consulted first."""
        self.runner = model_runner
        self.model = getattr(model_runner, "model", model_runner)
        self.participant: Optional[Participant] = None
        self.group: Optional[Group] = None
        self.weight_version: Optional[str] = None
        self.last_outcome: Optional[Dict[str, Any]] = None
        self.update_groups: Dict[str, Any] = {}
        self._load = "write_source"
        self._tx: Optional[str] = None
        self._failure: Optional[str] = None
        self._expected: Optional[str] = None
        self._bracketed = False
        self._updates = 0
        self._kind = "full"
        self._receiver = InPlaceReceiver()  # broadcast full tensors received into live memory

    def init_wtx(self, journal_dir: str, coordinator_journal: Optional[str] = None,
                 group: Any = None, load: str = "write_source",
                 manifest: Optional[Manifest] = None,
                 stacked_params_mapping: Optional[Sequence[Any]] = None,
                 kernel_identity: str = "", prepare_timeout: float = 30.0) -> Dict[str, Any]:
        """Opens this rank's participant over the model and joins 2PC over the TP `group`
        (collective). Returns the participant's status."""
        if self.participant is not None:
            raise Error("INVALID_ARGUMENT", "init_wtx: already initialized (close() first)")
        if load not in ("write_source", "load_weights"):
            raise Error("INVALID_ARGUMENT", f"init_wtx: load must be write_source or "
                        f"load_weights, not {load!r}")
        size, rank = dist.get_world_size(group), dist.get_rank(group)
        if manifest is None:
            mapping = (stacked_params_mapping if stacked_params_mapping is not None
                       else getattr(self.model, "stacked_params_mapping",
                                    LLAMA_STACKED_PARAMS_MAPPING))
            manifest = manifest_from_module(self.model, mapping, size, rank)
        p = Participant.open(journal_dir, manifest, rank=rank, tensors=self.model,
                             kernel_identity=kernel_identity)
        try:
            self.group = Group(p, coordinator_journal, group=group,
                               prepare_timeout=prepare_timeout)
        except BaseException:
            p.close()
            raise
        self.participant, self._load = p, load
        return p.status()

    def close(self) -> None:
        """Closes the coordinator (TP rank 0) and the participant. Idempotent."""
        group, p = self.group, self.participant
        self.group = self.participant = None
        if group is not None:
            group.close()
        if p is not None:
            p.close()

    # -- explicit brackets (a trainer sending in buckets) ------------------------------------

    def start_update(self, tx: str, kind: str = "full", base: Optional[str] = None,
                     modules: Optional[List[str]] = None, sources: Optional[List[str]] = None,
                     expected_version: Optional[str] = None) -> None:
        """Begins `tx` on every rank (collective); later update calls add to it."""
        self._require("start_update")
        self._abort_open()
        self._begin(tx, kind, base, modules, sources)
        self._expected = expected_version
        self._bracketed = True

    def finish_update(self) -> Tuple[bool, str]:
        """Commits the open update (collective): (True, "... version V") or (False, why)."""
        self._require("finish_update")
        if self._tx is None:
            return False, "finish_update: no update open (start_update)"
        self._bracketed = False
        return self._decide()

    # -- SGLang's calls ----------------------------------------------------------------------

    def update_weights_from_distributed(self, names: List[str], dtypes: List[Any],
                                        shapes: List[Sequence[int]], group_name: str,
                                        flush_cache: bool = True,
                                        weight_version: Optional[str] = None,
                                        load_format: Optional[str] = None,
                                        expected_version: Optional[str] = None
                                        ) -> Tuple[bool, str]:
        """Receives each tensor by broadcast from rank 0 of the update group `group_name` and
        loads it through wtx; see the module docstring. Returns (success, message)."""
        self._require("update_weights_from_distributed")
        refused = self._refuse(load_format)
        if refused:
            return False, refused
        if not (len(names) == len(dtypes) == len(shapes)):
            return False, (f"refused: names, dtypes and shapes differ in length ({len(names)}, "
                           f"{len(dtypes)}, {len(shapes)})")
        group = self.update_groups.get(group_name, _DEFAULT_GROUP)
        if group is _DEFAULT_GROUP:
            group = getattr(self.runner, "_model_update_group", {}).get(group_name,
                                                                        _DEFAULT_GROUP)
        if group is _DEFAULT_GROUP:
            return False, (f"refused: no update group '{group_name}' "
                           f"(init_weights_update_group, or adapter.update_groups)")
        # SGLang's update groups have the trainer at rank 0; adapter.update_groups may name
        # the sender: {name: (group, global src rank)}.
        group, src = group if isinstance(group, tuple) else (group, _group_src(group))
        try:
            dts = [d if isinstance(d, torch.dtype) else getattr(torch, str(d).replace(
                "torch.", "")) for d in dtypes]
        except AttributeError as e:
            return False, f"refused: dtypes: {e}"

        def received() -> Iterable[Tuple[str, Any]]:
            for name, dtype, shape in zip(names, dts, shapes):
                into = self._receive_into(name, dtype, list(shape))
                t = into if into is not None else torch.empty(list(shape), dtype=dtype)
                dist.broadcast(t.view(torch.uint8) if t.dtype == torch.bfloat16 else t,
                               src=src, group=group)
                yield name, t

        return self._update(received(), weight_version, expected_version)

    def update_weights_from_tensor(self, named_tensors: Sequence[Tuple[str, torch.Tensor]],
                                   load_format: Optional[str] = None,
                                   flush_cache: bool = True,
                                   weight_version: Optional[str] = None,
                                   expected_version: Optional[str] = None) -> Tuple[bool, str]:
        """Loads `named_tensors` through wtx; see the module docstring."""
        self._require("update_weights_from_tensor")
        refused = self._refuse(load_format)
        if refused:
            return False, refused
        return self._update(iter(named_tensors), weight_version, expected_version)

    def update_weights_from_disk(self, model_path: str, load_format: Optional[str] = None,
                                 weight_version: Optional[str] = None) -> Tuple[bool, str]:
        """Refused: the engine's disk loader writes the live tensors outside wtx."""
        return False, ("refused: update_weights_from_disk cannot be honoured transactionally "
                       f"({model_path}: SGLang's loader writes the live tensors outside wtx); "
                       "load the checkpoint with `wtx load`, or send its tensors with "
                       "update_weights_from_tensor")

    # -- internals ---------------------------------------------------------------------------

    def _require(self, call: str) -> None:
        if self.participant is None:
            raise Error("INVALID_ARGUMENT", f"{call}: wtx is not initialized (init_wtx)")

    @staticmethod
    def _refuse(load_format: Optional[str]) -> Optional[str]:
        if load_format in (None, "auto"):
            return None
        return (f"refused: load_format {load_format!r} cannot be honoured transactionally "
                "(wtx writes each named tensor and accounts for its shards; send plain "
                "(name, tensor) pairs)")

    def _abort_open(self) -> None:
        if self._tx is not None:
            tx, self._tx = self._tx, None
            abort_quietly(self._g, tx)
        self._failure, self._expected, self._bracketed = None, None, False

    def _begin(self, tx: Optional[str], kind: str, base: Optional[str],
               modules: Optional[List[str]], sources: Optional[List[str]]) -> None:
        self._updates += 1
        tx = tx or default_tx("sglang", self._p, self._updates)
        self._g.begin(tx, kind=kind, base=base, modules=modules, sources=sources)
        self._tx = tx
        self._kind = kind
        self._receiver.reset()

    def _receive_into(self, name: str, dtype: torch.dtype,
                      shape: List[int]) -> Optional[torch.Tensor]:
        """Where a broadcast full tensor is received: straight into live memory where the
        rank holds it as one contiguous run (wtx.vllm._engine.InPlaceReceiver; writes by name
        only), else None (a fresh buffer)."""
        if (self._failure is not None or self._tx is None or self._kind == "delta" or
                self._load != "write_source"):
            return None
        try:
            return self._receiver.destination(self._p, name, dtype, shape)
        except Exception as e:
            self._failure = f"{name}: {type(e).__name__}: {e}"
            return None

    def _update(self, items: Iterable[Tuple[str, Any]], label: Optional[str],
                expected: Optional[str]) -> Tuple[bool, str]:
        if not self._bracketed:
            self._abort_open()
            try:
                self._begin(label, "full", None, None, None)
            except Error as e:
                return False, f"begin refused: {e.code}: {e.message}"
        if expected is not None:
            self._expected = expected
        try:
            for name, value in items:
                if name == EXPECTED_VERSION_NAME:
                    self._expected = _version_of(value)
                elif self._failure is None:  # after a failure: drained, not written
                    try:
                        if self._receiver.owns(name):
                            self._receiver.land(self._p, name, value)
                        else:
                            load_one(self._p, self.model, self._load, name, value)
                    except Exception as e:
                        self._failure = f"{name}: {type(e).__name__}: {e}"
        except Exception as e:  # the transport itself (the trainer gone)
            if self._failure is None:
                self._failure = f"receive: {type(e).__name__}: {e}"
        if self._bracketed:
            if self._failure is not None:
                return False, f"update failed on this rank: {self._failure}"
            return True, "received"
        return self._decide()

    def _decide(self) -> Tuple[bool, str]:
        tx, failure = self._tx, self._failure
        assert tx is not None, "callers decide only an update they began"
        self._tx, self._failure = None, None
        expected, self._expected = self._expected, None
        try:
            out = decide_update(self._g, tx, failure, expected)
        except Aborted as e:
            self.last_outcome = e.decision
            if "reason" in e.decision:  # a rank failed: named with its cause
                return False, f"transaction '{tx}' aborted: {e.decision['reason']}"
            missing = sorted({m.get("param", "?") for v in e.decision.get("votes", [])
                              for m in v.get("missing", [])})
            return False, (f"transaction '{tx}' aborted: {e}" +
                           (f"; missing: {', '.join(missing)}" if missing else ""))
        except Error as e:
            return False, f"transaction '{tx}': {e.code}: {e.message}"
        self.last_outcome = out
        self.weight_version = out.get("version")
        return True, f"transaction '{tx}' committed version {self.weight_version}"


def _group_src(group: Any) -> int:
    """The global rank of rank 0 of `group` (the trainer, in SGLang's update groups)."""
    if group is None:
        return 0
    if hasattr(dist, "get_global_rank"):
        return dist.get_global_rank(group, 0)
    return dist.distributed_c10d._get_global_rank(group, 0)
