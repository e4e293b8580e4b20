"""wtx for SGLang: its weight-update path as wtx transactions over the TP group (every pipeline
stage's ranks with several: commit_group), installed into SGLang's own objects so that SGLang's
code calls it with its own arguments (docs/sglang.md).

    adapter = wtx.sglang.install(scheduler, journal_dir=..., coordinator_journal=...,
                                 group=scheduler.tp_cpu_group)

`install` (every TP rank, in the scheduler process) opens the rank's participant over the
served model and routes SGLang's update path to it where SGLang binds it. SGLang dispatches
every request through the TypeBasedDispatcher of bound methods that Scheduler.__init__ builds,
so wtx rewrites the entries of that table (wrapping the handler SGLang put there: the
Scheduler's own in v0.5.12.post1, its weight_updater's on main), then checks that the
dispatcher resolves each request type a step needs to wtx, raising E_UNSUPPORTED (naming the
type and SGLang's version) where it would not. `ModelRunner`'s methods are replaced on the
instance (TpModelWorker looks them up at call time):

* ModelRunner.update_weights_from_distributed(names, dtypes, shapes, group_name,
  load_format=None): the positional call TpModelWorker makes; every tensor is received into a
  buffer on the model's device in its own dtype (or straight into live memory), one broadcast
  per tensor from rank 0 of the update group (one uint8 buffer for "flattened_bucket"), and
  written through wtx. A refused or failed bucket still receives everything the trainer sends,
  so no trainer blocks. An unknown group raises AssertionError, as SGLang's does;
* ModelRunner.update_weights_from_tensor(named_tensors, load_format=None): this rank's tensors
  (LocalSerializedTensor unwrapped with this rank's value) through wtx; "flattened_bucket"
  too; an unknown format raises NotImplementedError as SGLang's does. The same path is also
  SGLang's own hook: `--custom-weight-loader wtx.sglang.weight_loader` with
  load_format="wtx.sglang.weight_loader";
* ModelRunner.update_weights_from_disk / update_weights_from_ipc: refused (SGLang's loaders
  write outside wtx);
* the dispatcher's UpdateWeightsFromDistributedReqInput / UpdateWeightsFromTensorReqInput
  handlers: the request's `weight_version` labels the step the bucket joins; generation is
  paused while a step is open;
* its ContinueGenerationReqInput handler: the commit point of the step;
* its CheckWeightsReqInput handler: the action "wtx_status" answers every rank's state in the
  payload types SGLang's wire accepts (what the tokenizer process asks before it publishes a
  step's weight_version).

A step is one transaction over every TP rank: its buckets (one SGLang request each, as slime,
miles and verl send them) join it; nothing commits before continue_generation (or
adapter.finish_update()); a bucket that fails on any rank aborts the step on every rank at
once (the failures are exchanged before the bucket answers), answering (False, message naming
each rank and cause). The serving gate (DESIGN.md): "hold" (default) keeps generation paused
after an abort (continue_generation leaves it paused, the cache is flushed) until a full step
commits; "restore" keeps before-images (within rollback_budget_bytes) and an abort puts the
previous version back, so generation continues on it. adapter.weight_version is the committed
version hash.
"""

from typing import (Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence,
                    Tuple)

import torch
import torch.distributed as dist

from . import Aborted, Error, Manifest, Participant
from . import fleet as wtx_fleet
from ._module_manifest import LLAMA_STACKED_PARAMS_MAPPING, manifest_from_module
from ._receive import (EXPECTED_VERSION_NAME, InPlaceReceiver, UpdateState, default_tx,
                       describe_source_failure, expected_version_tensor, holds, load_one,
                       processed_sources, released_reason, report_to_fleet, resumed_check,
                       version_of)
from .torch_dist import (Group, abort_quietly, decide_update, failure_reason, gather_from_ranks,
                         gather_stages, sources_held_elsewhere)

__all__ = ["WtxSglangAdapter", "EXPECTED_VERSION_NAME", "commit_group", "expected_version_tensor",
           "install", "plugin", "weight_loader"]

_GATES = ("hold", "restore")
STATUS_ACTION = "wtx_status"  # the check_weights action answering each rank's wtx state
_ADAPTERS: Dict[int, "WtxSglangAdapter"] = {}  # id(model) -> its adapter (weight_loader)


def _wire(t: torch.Tensor, group: Any) -> torch.Tensor:
    """What a broadcast moves: the tensor itself (NCCL: same count and dtype on both sides),
    or its bytes where the backend lacks the dtype (gloo: bf16, fp8)."""
    backend = dist.get_backend(group) if group is not None else dist.get_backend()
    if backend == "gloo" and t.dtype in (torch.bfloat16,) + tuple(
            getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)):
        return t.view(torch.uint8)
    return t


def _dtype(d: Any) -> torch.dtype:
    if isinstance(d, torch.dtype):
        return d
    dt = getattr(torch, str(d), None)
    if not isinstance(dt, torch.dtype):
        raise Error("INVALID_ARGUMENT", f"dtypes: '{d}' is not a torch dtype name")
    return dt


def _nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    return int(torch.Size(list(shape)).numel()) * torch.empty(0, dtype=dtype).element_size()


class WtxSglangAdapter(UpdateState):
    """SGLang's weight-update calls as wtx transactions (module docstring)."""

    _how_to_init = "init_wtx"

    def __init__(self, model_runner: Any) -> None:
        """model_runner: SGLang's ModelRunner (its `model`, `device`, `tp_rank` and
        `_model_update_group`), or any object with a `model`."""
        self.runner = model_runner
        self.model = getattr(model_runner, "model", model_runner)
        self.device = getattr(model_runner, "device", None)
        self.participant: Optional[Participant] = None
        self.group: Optional[Group] = None
        self.weight_version: Optional[str] = None
        self.last_outcome: Optional[Dict[str, Any]] = None
        self.update_groups: Dict[str, Any] = {}
        self.label: Optional[str] = None  # the step's weight_version (the scheduler sets it)
        self.autocommit = True  # each call its own transaction unless steps are on
        self._load = "write_source"
        self._gate = "hold"
        self._tx: Optional[str] = None
        self._tx_label: Optional[str] = None
        # The weight_version of the last step that committed (a noop or an abort keeps it):
        # what the tokenizer process may publish.
        self.committed_label: Optional[str] = None
        self._failure: Optional[str] = None
        self._expected: Optional[str] = None
        self._explicit = False
        self._buckets = 0
        self._updates = 0
        self._kind = "full"
        self._receiver = InPlaceReceiver()
        self._processed: FrozenSet[str] = frozenset()  # sources of processed parameters
        self.last_message: Optional[str] = None  # the answer of the last commit point
        # Why the live weights are not vouched for outside any step: their memory released
        # (release_memory_occupation), or resumed with nothing committed to check them
        # against. Cleared by a check that proves them, or by a full step that commits.
        self._unvouched: Optional[str] = None
        # Sources only other ranks of the group hold (other pipeline stages): dropped here.
        self._elsewhere: FrozenSet[str] = frozenset()
        self._member: Optional[wtx_fleet.Member] = None  # init_wtx(fleet=)
        # What pauses generation when the fleet holds this rank (install: the Scheduler's
        # _engine_paused); called from the member's thread.
        self.on_fleet_hold: Optional[Callable[[str], None]] = None

    def init_wtx(self, journal_dir: str, coordinator_journal: Optional[str] = None,
                 group: Any = None, load: str = "write_source",
                 manifest: Optional[Manifest] = None,
                 stacked_params_mapping: Optional[Sequence[Any]] = None,
                 kernel_identity: str = "", prepare_timeout: float = 30.0,
                 serving_gate: str = "hold",
                 rollback_budget_bytes: Optional[int] = None,
                 metric_labels: Optional[Dict[str, str]] = None,
                 lineage: Optional[str] = None, new_lineage: bool = False,
                 fleet: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Opens this rank's participant over the model (its manifest sharded by the runner's
        TP size and rank) and joins 2PC over `group` (collective; the TP group, or every
        pipeline stage's ranks). metric_labels: {"replica", "fleet"} on the rank's and its
        coordinator's Prometheus series (docs/observability.md); "replica" defaults to "dp{dp_rank}"
        on a data-parallel replica. lineage / new_lineage: the lineage the journal belongs to
        (docs/fleet.md; Participant.open). A step's weight_version that is a whole number
        ("57") is its step of the lineage: one at or below the committed step is refused
        (E_STEP_REGRESSION); any other weight_version takes the next step. fleet: {"registry":
        "etcd://HOST:PORT/PREFIX", "name", "replica", "ttl", "period"}: this rank joins the
        fleet (wtx.fleet.join, docs/fleet.md); while the fleet's policy holds it (too far
        behind the newest step) generation stays paused, and only a step that commits an
        admissible version resumes it (continue_generation). Returns the participant's
        status."""
        if self.participant is not None:
            raise Error("INVALID_ARGUMENT", "init_wtx: already initialized (close() first)")
        if load not in ("write_source", "load_weights"):
            raise Error("INVALID_ARGUMENT", f"init_wtx: load must be write_source or "
                        f"load_weights, not {load!r}")
        if serving_gate not in _GATES:
            raise Error("INVALID_ARGUMENT", f"init_wtx: serving_gate must be one of {_GATES}, "
                        f"not {serving_gate!r}")
        rank = dist.get_rank(group)
        if manifest is None:
            mapping = (stacked_params_mapping if stacked_params_mapping is not None
                       else getattr(self.model, "stacked_params_mapping",
                                    LLAMA_STACKED_PARAMS_MAPPING))
            # Sharded by tensor parallelism only: the runner's TP size and rank (the group may
            # span pipeline stages too); without them, the group's.
            tp_size = getattr(self.runner, "tp_size", None) or dist.get_world_size(group)
            tp_rank = getattr(self.runner, "tp_rank", None)
            manifest = manifest_from_module(self.model, mapping, tp_size,
                                            rank if tp_rank is None else tp_rank)
        extra: Dict[str, Any] = {}
        if rollback_budget_bytes is not None:
            extra["rollback_budget_bytes"] = rollback_budget_bytes
        labels = dict(metric_labels or {})
        dp = getattr(self.runner, "dp_rank", None)
        if dp is not None:
            labels.setdefault("replica", f"dp{dp}")
        p = Participant.open(journal_dir, manifest, rank=rank, tensors=self.model,
                             kernel_identity=kernel_identity, metric_labels=labels,
                             lineage=lineage, new_lineage=new_lineage, **extra)
        try:
            extra_coordinator: Dict[str, Any] = {}
            if int(getattr(self.runner, "pp_size", 1) or 1) > 1:
                # Pipeline stages hold different layers: one manifest per stage.
                extra_coordinator["manifest_groups"] = gather_stages(self.runner.pp_rank, group)
            self.group = Group(p, coordinator_journal, group=group,
                               prepare_timeout=prepare_timeout, metric_labels=labels,
                               **extra_coordinator)
            if fleet is not None:
                self._member = wtx_fleet.join(p, fleet, world=dist.get_world_size(group),
                                              what="init_wtx(fleet=)",
                                              on_hold=self._fleet_held)
        except BaseException:
            if self.group is not None:
                self.group.close()
                self.group = None
            p.close()
            raise
        self.participant, self._load, self._gate = p, load, serving_gate
        self._elsewhere = sources_held_elsewhere(p, self.group)
        self._processed = processed_sources(p)
        _ADAPTERS[id(self.model)] = self
        return p.status()

    def _fleet_held(self, reason: str) -> None:
        hook = self.on_fleet_hold
        if hook is not None:
            hook(reason)

    def close(self) -> None:
        """Leaves the fleet, closes the coordinator (TP rank 0) and the participant.
        Idempotent."""
        group, p = self.group, self.participant
        self.group = self.participant = None
        member, self._member = self._member, None
        if member is not None:
            member.close()
        _ADAPTERS.pop(id(self.model), None)
        if group is not None:
            group.close()
        if p is not None:
            p.close()

    # -- the step ----------------------------------------------------------------------------

    def start_update(self, tx: str, kind: str = "full", base: Optional[str] = None,
                     modules: Optional[List[str]] = None, sources: Optional[List[str]] = None,
                     expected_version: Optional[str] = None) -> None:
        """Begins step `tx` on every rank (collective); the buckets that follow join it until
        finish_update (a trainer that can bracket its step)."""
        self._require("start_update")
        self._abort_open()
        self._begin(tx, kind, base, modules, sources, label=None)
        self._expected = expected_version
        self._explicit = True

    def finish_update(self) -> Tuple[bool, str]:
        """Commits the open step (collective): (True, "... committed version V") or (False,
        why); (True, "no update open") when none is."""
        self._require("finish_update")
        self._explicit = False
        if self._tx is None:
            return True, "wtx: no update open"
        return self._decide()

    def serving_state(self) -> Dict[str, Any]:
        """{"serving", "reason", "version"}: whether this rank may produce tokens (the
        scheduler hook keeps generation paused while it may not)."""
        if self.participant is None:
            return {"serving": True, "reason": None, "version": None}
        st = self.participant.status()
        why = holds(st) if self._tx is None else None  # an open step: paused by the trainer
        why = why or self._unvouched
        return {"serving": why is None, "reason": why, "version": st.get("version")}

    def weights_released(self) -> None:
        """SGLang released the weights' memory (release_memory_occupation): their content is
        undefined until resumed, so this rank holds."""
        self._unvouched = released_reason("release_memory_occupation")

    def weights_resumed(self) -> Dict[str, Any]:
        """SGLang mapped the weights' memory back (resume_memory_occupation): resumed_check
        (every chunk hashed against the committed version; the rank holds unless they
        match). Returns the verify report (or why none was made)."""
        self._unvouched, report = resumed_check(self._p, "resume_memory_occupation")
        return report

    # -- SGLang's ModelRunner calls ---------------------------------------------------------

    def update_weights_from_distributed(self, names: List[str], dtypes: List[Any],
                                        shapes: List[Sequence[int]], group_name: str,
                                        load_format: Optional[str] = None
                                        ) -> Tuple[bool, str]:
        """ModelRunner's call (TpModelWorker passes load_format fifth, positionally); see the
        module docstring. Returns (success, message)."""
        self._require("update_weights_from_distributed")
        group = self.update_groups.get(group_name)
        if group is None:
            groups = getattr(self.runner, "_model_update_group", {}) or {}
            assert group_name in groups, (
                f"Group {group_name} not in {list(groups.keys())}. "
                "Please call `init_weights_update_group` first.")
            group = groups[group_name]
        group, src = group if isinstance(group, tuple) else (group, _group_src(group))
        failure = None
        try:
            dts = [_dtype(d) for d in dtypes]
        except Error as e:
            failure, dts = e.message, [torch.uint8] * len(names)
        if not (len(names) == len(dtypes) == len(shapes)):
            failure = failure or (f"names, dtypes and shapes differ in length ({len(names)}, "
                                  f"{len(dtypes)}, {len(shapes)})")

        def received() -> Iterator[Tuple[str, Any]]:
            if load_format == "flattened_bucket":
                flat = torch.empty(sum(_nbytes(d, s) for d, s in zip(dts, shapes)),
                                   dtype=torch.uint8, device=self.device)
                dist.broadcast(flat, src=src, group=group)
                at = 0
                for name, dtype, shape in zip(names, dts, shapes):
                    n = _nbytes(dtype, shape)
                    yield name, flat[at:at + n].view(dtype).reshape(list(shape))
                    at += n
                return
            for name, dtype, shape in zip(names, dts, shapes):
                into = self._receive_into(name, dtype, list(shape))
                t = into if into is not None else torch.empty(list(shape), dtype=dtype,
                                                              device=self.device)
                dist.broadcast(_wire(t, group), src=src, group=group)
                yield name, t

        return self._bucket(received(), failure)

    def update_weights_from_tensor(self, named_tensors: Any,
                                   load_format: Optional[str] = None) -> Tuple[bool, str]:
        """ModelRunner's call (named_tensors: this rank's (name, tensor or
        LocalSerializedTensor) pairs, or a flattened bucket dict)."""
        self._require("update_weights_from_tensor")
        if load_format not in (None, "flattened_bucket", "wtx.sglang.weight_loader"):
            raise NotImplementedError(f"Unknown load_format={load_format}")
        return self._bucket(self._tensors(named_tensors, load_format), None)

    def update_weights_from_disk(self, model_path: str, load_format: Optional[str] = None,
                                 weight_name_filter: Optional[Callable[[str], bool]] = None,
                                 recapture_cuda_graph: bool = False) -> Tuple[bool, str]:
        """Refused: the engine's disk loader writes the live tensors outside wtx."""
        return False, ("wtx: update_weights_from_disk cannot be honoured transactionally "
                       f"({model_path}: SGLang's loader writes the live tensors outside wtx); "
                       "load the checkpoint with `wtx load`, or send its tensors")

    def update_weights_from_ipc(self, recv_req: Any) -> Tuple[bool, str]:
        """Refused: CUDA IPC handles are loaded into the live tensors outside wtx."""
        return False, ("wtx: update_weights_from_ipc cannot be honoured transactionally (the "
                       "engine loads the IPC handles into the live tensors outside wtx); send "
                       "the tensors with update_weights_from_distributed or _from_tensor")

    # -- internals ---------------------------------------------------------------------------

    def _require(self, call: str) -> None:
        if self.participant is None:
            raise Error("INVALID_ARGUMENT", f"{call}: wtx is not initialized (init_wtx)")

    def _tensors(self, named_tensors: Any, load_format: Optional[str]
                 ) -> Iterator[Tuple[str, Any]]:
        rank = getattr(self.runner, "tp_rank", self._p.rank)
        if load_format == "flattened_bucket":
            flat, meta = named_tensors["flattened_tensor"], named_tensors["metadata"]
            at = 0
            for m in meta:
                name, shape, dtype = (m[0], m[1], m[2]) if isinstance(m, (tuple, list)) else (
                    m.name, m.shape, m.dtype)
                n = _nbytes(dtype, shape)
                yield name, flat[at:at + n].view(dtype).reshape(list(shape))
                at += n
            return
        for name, t in named_tensors:
            if hasattr(t, "get") and hasattr(t, "values") and not torch.is_tensor(t):
                t = t.get(rank)  # SGLang's LocalSerializedTensor: this rank's value
            yield name, (t.to(self.device) if self.device is not None else t)

    def _abort_open(self) -> None:
        if self._tx is not None:
            tx, self._tx = self._tx, None
            abort_quietly(self._g, tx)
        self._failure, self._expected, self._explicit = None, None, False

    def _begin(self, tx: Optional[str], kind: str, base: Optional[str],
               modules: Optional[List[str]], sources: Optional[List[str]],
               label: Optional[str]) -> None:
        self._updates += 1
        tx = tx or (f"sglang-{label}-{self._updates}" if label else
                    default_tx("sglang", self._p, self._updates))
        self._g.begin(tx, kind=kind, base=base, modules=modules, sources=sources,
                      rollback=self._gate == "restore", step=step_of_label(label))
        self._tx, self._tx_label, self._kind, self._buckets = tx, label, kind, 0
        self._receiver.reset()

    def _receive_into(self, name: str, dtype: torch.dtype,
                      shape: List[int]) -> Optional[torch.Tensor]:
        """Where a broadcast full tensor is received: straight into live memory where the
        rank holds it as one contiguous run (writes by name only), else None (a buffer)."""
        if (self._failure is not None or self._tx is None or self._kind == "delta" or
                self._load != "write_source"):
            return None
        try:
            return self._receiver.destination(self._p, name, dtype, shape)
        except Exception as e:
            self._failure = describe_source_failure(name, e)
            return None

    def _open_for(self, label: Optional[str]) -> None:
        """The step this bucket joins: the open one, unless the label names another step
        (the open one is then committed first); a new one when none is open."""
        if self._tx is not None and not self._explicit and label != self._tx_label:
            ok, msg = self._decide()  # the previous step never reached its commit point
            if not ok:
                raise Error("E_UPDATE_FAILED", f"the previous step failed to commit: {msg}")
        if self._tx is None:
            self._begin(None, "full", None, None, None, label)

    def _bucket(self, items: Iterator[Tuple[str, Any]],
                failure: Optional[str]) -> Tuple[bool, str]:
        self._failure = failure
        if self._failure is None:
            try:
                self._open_for(self.label)
            except Error as e:
                self._failure = f"{e.code}: {e.message}"
        try:
            for name, value in items:  # every item is received, written or not (drained)
                if name == EXPECTED_VERSION_NAME:
                    self._expected = version_of(value)
                elif self._failure is None and name not in self._elsewhere:
                    try:
                        if self._receiver.owns(name):
                            self._receiver.land(self._p, name, value)
                        else:
                            load_one(self._p, self.model, self._load, name, value,
                                     self._processed)
                    except Exception as e:
                        self._failure = describe_source_failure(name, e)
        except Exception as e:  # the transport itself (the trainer gone)
            self._failure = self._failure or f"receive: {type(e).__name__}: {e}"
        try:
            failures = gather_from_ranks(self._failure, self._g)
        except RuntimeError as e:  # a rank of the TP group is gone: nothing can commit
            self._failure, self._tx = None, None
            return False, f"wtx: step '{self.label}' cannot commit: a TP rank is gone ({e})"
        self._failure = None
        if any(failures):
            return False, self._abort_step(failure_reason(failures))
        self._buckets += 1
        if self.autocommit and not self._explicit:
            return self._decide()
        return True, (f"wtx: bucket {self._buckets} of step '{self._tx}' received; it commits "
                      "at continue_generation (or finish_update)")

    def _abort_step(self, reason: str) -> str:
        tx, self._tx = self._tx, None
        self._expected, self._explicit = None, False
        if tx is not None:
            try:
                self.last_outcome = dict(self._g.abort(tx), reason=reason)
            except Error as e:
                self.last_outcome = {"outcome": "aborted", "reason": reason,
                                     "abort_error": e.message}
        restored = self.participant is not None and holds(self.participant.status()) is None
        return (f"wtx: step '{tx or self.label}' aborted on every rank: {reason}"
                + ("; the previous version serves on" if restored else
                   "; generation stays paused until a full update commits"))

    def _decide(self) -> Tuple[bool, str]:
        tx = self._tx
        assert tx is not None, "callers decide only an update they began"
        self._tx = None
        expected, self._expected = self._expected, None
        try:
            out = decide_update(self._g, tx, None, expected)
        except Aborted as e:
            self.last_outcome = e.decision
            return False, f"wtx: step '{tx}' aborted: {e.message}"
        except Error as e:
            return False, f"wtx: step '{tx}': {e.code}: {e.message}"
        self.last_outcome = out
        if out.get("version"):
            self.weight_version = out.get("version")
        if out.get("outcome") == "committed":
            self.committed_label = self._tx_label
            if self._kind == "full":
                self._unvouched = None  # every byte of the model was written and proven
        report_to_fleet(self._member)
        return True, f"wtx: step '{tx}' committed version {self.weight_version}"


def _group_src(group: Any) -> int:
    """The global rank of rank 0 of `group` (the trainer, in SGLang's update groups)."""
    if group is None:
        return 0
    if hasattr(dist, "get_global_rank"):
        return dist.get_global_rank(group, 0)
    return dist.distributed_c10d._get_global_rank(group, 0)


def weight_loader(model: Any, named_tensors: List[Tuple[str, torch.Tensor]]) -> None:
    """SGLang's custom weight loader hook (`--custom-weight-loader wtx.sglang.weight_loader`,
    load_format="wtx.sglang.weight_loader"): SGLang calls it as loader(model, named_tensors)
    with this rank's tensors; they go through the model's wtx adapter as one bucket. Raises
    wtx.Error naming the failure (SGLang's tensor path has no (False, message) answer)."""
    adapter = _ADAPTERS.get(id(model))
    if adapter is None:
        raise Error("INVALID_ARGUMENT", "wtx.sglang.weight_loader: this model has no wtx "
                    "adapter (wtx.sglang.install)")
    ok, message = adapter._bucket(iter(named_tensors), None)
    if not ok:
        raise Error("E_UPDATE_FAILED", message)


def commit_group(scheduler: Any) -> Any:
    """The CPU group a step of this scheduler's rank spans: every rank serving one copy of the
    model. Its TP group (scheduler.tp_cpu_group) with one pipeline stage; with several, SGLang's
    world group of TP x PP ranks (one stage committing while another aborts would serve two
    versions). Each data-parallel replica is its own server world, so its own group."""
    runner = scheduler.tp_worker.model_runner
    if int(getattr(runner, "pp_size", 1) or 1) == 1:
        return scheduler.tp_cpu_group
    from sglang.srt.distributed.parallel_state import get_world_group
    return get_world_group().cpu_group


# ------------------------------------------------------------------ SGLang's request dispatcher

# The request types a step needs routed to wtx, by their io_struct names.
_ROUTED = ("UpdateWeightsFromDistributedReqInput", "UpdateWeightsFromTensorReqInput",
           "ContinueGenerationReqInput", "CheckWeightsReqInput")
_WTX_HANDLER = "__wtx_handler__"


def sglang_version() -> str:
    """SGLang's version string (sglang.version.__version__), or "unknown"."""
    try:
        from sglang.version import __version__ as version
        return str(version)
    except Exception:
        return "unknown"


def _unsupported(what: str) -> Error:
    return Error("E_UNSUPPORTED", f"wtx.sglang: {what} (SGLang {sglang_version()}); wtx would "
                 "be inert there, so it refuses to start")


def _request_types() -> Dict[str, type]:
    try:
        from sglang.srt.managers import io_struct
    except Exception as e:
        raise _unsupported(f"sglang.srt.managers.io_struct does not import ({e})")
    types: Dict[str, type] = {}
    for name in _ROUTED:
        ty = getattr(io_struct, name, None)
        if not isinstance(ty, type):
            raise _unsupported(f"io_struct has no request type {name}")
        types[name] = ty
    return types


def _table(scheduler: Any) -> Any:
    """The (request type -> handler) table of SGLang's TypeBasedDispatcher, which
    Scheduler.__init__ fills with bound methods (an OrderedDict, or a list of pairs in older
    releases)."""
    dispatcher = getattr(scheduler, "_request_dispatcher", None)
    table = getattr(dispatcher, "_mapping", None)
    if not isinstance(table, (dict, list)):
        raise _unsupported("the Scheduler has no request dispatcher table "
                           "(_request_dispatcher._mapping) to route wtx's requests through")
    return table


def _pairs(table: Any) -> List[Tuple[type, Any]]:
    return list(table.items()) if isinstance(table, dict) else [(p[0], p[1]) for p in table]


def resolve_handler(scheduler: Any, request_type: type) -> Any:
    """The handler SGLang's dispatcher calls for a request of `request_type`, found as
    TypeBasedDispatcher finds it (the exact type, then the first type it is an instance of, in
    registration order), or None."""
    pairs = _pairs(_table(scheduler))
    for ty, fn in pairs:
        if ty is request_type:
            return fn
    return next((fn for ty, fn in pairs if issubclass(request_type, ty)), None)


def _rebind(scheduler: Any, request_type: type, make: Callable[[Any], Any]) -> None:
    """Replaces the dispatcher's handler for `request_type` by make(the current handler)."""
    table = _table(scheduler)
    pairs = _pairs(table)
    at = next((i for i, (ty, _) in enumerate(pairs) if ty is request_type), None)
    if at is None:
        at = next((i for i, (ty, _) in enumerate(pairs) if issubclass(request_type, ty)), None)
    if at is None:
        raise _unsupported(f"the Scheduler's request dispatcher has no handler for "
                           f"{request_type.__name__}")
    ty, original = pairs[at]
    handler = make(original)
    setattr(handler, _WTX_HANDLER, True)
    if isinstance(table, dict):
        table[ty] = handler
    else:
        table[at] = (ty, handler)
    cache = getattr(scheduler._request_dispatcher, "_mro_cache", None)
    if isinstance(cache, dict):
        cache.clear()  # the dispatcher caches isinstance matches by type


def check_dispatch(scheduler: Any) -> None:
    """Raises wtx.Error E_UNSUPPORTED, naming the request type and SGLang's version, unless the
    scheduler's request dispatcher resolves every request type a step needs to wtx's
    handler."""
    for name, ty in _request_types().items():
        fn = resolve_handler(scheduler, ty)
        if not getattr(fn, _WTX_HANDLER, False):
            raise _unsupported(f"the Scheduler's request dispatcher routes {name} to "
                               f"{getattr(fn, '__qualname__', fn)!r}, not to wtx")


def _status_payload(scheduler: Any, adapter: "WtxSglangAdapter") -> Any:
    """Every rank's wtx state, gathered over the step's group, as the check_weights payload:
    one checksum record per rank (ChecksumInfo where SGLang's wire types the payload so, a
    dict of the same fields otherwise), its `checksums` carrying wtx's fields as strings."""
    states = gather_from_ranks(dict(adapter.serving_state(), open_step=adapter._tx,
                                    label=adapter.committed_label), adapter._g)
    runner = adapter.runner
    from sglang.srt.managers import io_struct
    checksum_info = getattr(io_struct, "ChecksumInfo", None)
    parallelism_info = getattr(io_struct, "ParallelismInfo", None)
    records = []
    for rank, st in enumerate(states):
        assert st is not None, "all_gather_object fills every rank's entry"
        checksums = {"wtx.rank": str(rank), "wtx.serving": "1" if st["serving"] else "0",
                     "wtx.reason": str(st["reason"] or ""),
                     "wtx.version": str(st["version"] or ""),
                     "wtx.open_step": str(st["open_step"] or ""),
                     "wtx.label": "" if st["label"] is None else str(st["label"])}
        info = {"tp_rank": rank, "tp_size": len(states),
                "dp_rank": int(getattr(runner, "dp_rank", 0) or 0), "dp_size": 1,
                "pp_rank": int(getattr(runner, "pp_rank", 0) or 0),
                "pp_size": int(getattr(runner, "pp_size", 1) or 1), "rank": rank,
                "size": len(states)}
        if checksum_info is not None and parallelism_info is not None:
            records.append(checksum_info(checksums=checksums,
                                         per_gpu_checksum=checksums["wtx.version"],
                                         parallelism_info=parallelism_info(**info)))
        else:
            records.append({"checksums": checksums, "per_gpu_checksum": checksums["wtx.version"],
                            "parallelism_info": info})
    return records


def _status_ok(ranks: Any, label: str) -> bool:
    """Whether a check_weights answer of STATUS_ACTION says every rank serves, with no step
    open, the version the step labelled `label` committed (not the previous one a restore put
    back after that step aborted, nor a noop's). Accepts both of SGLang's shapes: one payload
    per DP reply (a list of records), or the records flattened (dicts)."""
    records: List[Any] = []
    for r in ranks or []:
        records.extend(r if isinstance(r, list) else [r])
    if not records:
        return False
    for rec in records:
        checksums = rec.get("checksums") if isinstance(rec, dict) else getattr(
            rec, "checksums", None)
        if not isinstance(checksums, dict) or checksums.get("wtx.serving") != "1" or \
                checksums.get("wtx.open_step") or checksums.get("wtx.label") != label:
            return False
    return True


def step_of_label(label: Optional[str]) -> Optional[int]:
    """The step a request's weight_version names: a whole number ("57", as slime sends its
    rollout id) is the step; anything else (None, "v1.2") leaves the step to wtx (the next)."""
    if isinstance(label, str) and label.isascii() and label.isdigit():
        return int(label)
    return None


def install(scheduler: Any, journal_dir: str, coordinator_journal: Optional[str] = None,
            group: Any = None, **init_options: Any) -> WtxSglangAdapter:
    """Installs wtx into one rank of SGLang (module docstring): the adapter over
    scheduler.tp_worker.model_runner and its ModelRunner methods; in SGLang's request
    dispatcher (the table of bound methods Scheduler.__init__ builds; their owner is the
    Scheduler in v0.5.12.post1, its weight_updater on main), the handlers of the update
    requests, continue_generation and check_weights become wtx's, each wrapping SGLang's own.
    Collective over `group` (default: commit_group(): the TP group, or every pipeline stage's
    ranks). Raises wtx.Error E_UNSUPPORTED, naming the request type and SGLang's version, where
    the dispatcher would not route a request to wtx (before anything opens). Returns the
    adapter."""
    if getattr(scheduler, "wtx", None) is not None:
        raise Error("INVALID_ARGUMENT", "wtx.sglang.install: wtx is already installed in this "
                    "Scheduler (scheduler.wtx): one adapter per Scheduler")
    runner = scheduler.tp_worker.model_runner
    types = _request_types()
    for name, ty in types.items():  # refuse before anything opens
        if resolve_handler(scheduler, ty) is None:
            raise _unsupported(f"the Scheduler's request dispatcher has no handler for {name}")
    if not hasattr(scheduler, "_engine_paused"):
        raise _unsupported("the Scheduler has no _engine_paused flag for the serving gate")
    adapter = WtxSglangAdapter(runner)
    adapter.init_wtx(journal_dir, coordinator_journal,
                     group=group if group is not None else commit_group(scheduler),
                     **init_options)
    try:
        _route(scheduler, runner, adapter, types)
        check_dispatch(scheduler)
    except BaseException:
        adapter.close()
        raise
    scheduler.wtx = adapter
    # The fleet's hold comes from the member's thread: the event loop reads _engine_paused
    # before every batch, and only a step that commits an admissible version (continue_generation
    # through wtx's commit point) clears it.
    adapter.on_fleet_hold = lambda reason: setattr(scheduler, "_engine_paused", True)
    return adapter


def _route(scheduler: Any, runner: Any, adapter: WtxSglangAdapter,
           types: Dict[str, type]) -> None:
    adapter.autocommit = False  # steps: committed at continue_generation
    runner.update_weights_from_distributed = adapter.update_weights_from_distributed
    runner.update_weights_from_tensor = adapter.update_weights_from_tensor
    runner.update_weights_from_disk = adapter.update_weights_from_disk
    if hasattr(runner, "update_weights_from_ipc"):
        runner.update_weights_from_ipc = adapter.update_weights_from_ipc

    def labelled(handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def update(recv_req: Any) -> Any:
            adapter.label = getattr(recv_req, "weight_version", None)
            out = handler(recv_req)
            if adapter._tx is not None and not scheduler._engine_paused:
                # A step is open: its bytes are mixed until it commits (continue_generation).
                scheduler._engine_paused = True
            if not adapter.serving_state()["serving"]:
                _hold(scheduler)
            return out
        return update

    def commit_point(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def continue_generation(recv_req: Any) -> Any:
            if adapter._tx is not None:
                adapter._explicit = False
                _, adapter.last_message = adapter._decide()
            if not adapter.serving_state()["serving"]:
                _hold(scheduler)  # stays paused: the continue is refused
                return None
            return original(recv_req)
        return continue_generation

    def checked(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def check_weights(recv_req: Any) -> Any:
            if getattr(recv_req, "action", None) != STATUS_ACTION:
                return original(recv_req)
            from sglang.srt.managers.io_struct import CheckWeightsReqOutput
            try:
                payload = _status_payload(scheduler, adapter)
            except Exception as e:
                return CheckWeightsReqOutput(success=False, message=f"wtx_status: {e}")
            return CheckWeightsReqOutput(success=True, message="Success.", payload=payload)
        return check_weights

    def memory(on_weights: Callable[[], Any]) -> Callable[[Callable[[Any], Any]], Any]:
        def make(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
            def occupation(recv_req: Any) -> Any:
                out = original(recv_req)
                tags = getattr(recv_req, "tags", None)
                if tags is None or "weights" in tags:
                    on_weights()
                    if not adapter.serving_state()["serving"]:
                        _hold(scheduler)
                return out
            return occupation
        return make

    from sglang.srt.managers import io_struct
    for name, on_weights in (("ReleaseMemoryOccupationReqInput", adapter.weights_released),
                             ("ResumeMemoryOccupationReqInput", adapter.weights_resumed)):
        ty = getattr(io_struct, name, None)
        if isinstance(ty, type) and resolve_handler(scheduler, ty) is not None:
            _rebind(scheduler, ty, memory(on_weights))
    _rebind(scheduler, types["UpdateWeightsFromDistributedReqInput"], labelled)
    _rebind(scheduler, types["UpdateWeightsFromTensorReqInput"], labelled)
    _rebind(scheduler, types["ContinueGenerationReqInput"], commit_point)
    _rebind(scheduler, types["CheckWeightsReqInput"], checked)


def _hold(scheduler: Any) -> None:
    """The rank's bytes may be mixed: generation stays paused and the cache built on other
    weights is dropped."""
    scheduler._engine_paused = True
    flush = getattr(scheduler, "flush_cache", None)
    if flush is not None:
        flush()


def plugin() -> None:
    """SGLang's general plugin (the `sglang.srt.plugins` entry point `wtx`, run in every SGLang
    process before it builds a Scheduler): when $WTX_SGLANG_JOURNAL_DIR is set, every Scheduler
    built in this process installs wtx into itself once constructed (install() over
    commit_group(), its rank's journal "$WTX_SGLANG_JOURNAL_DIR/rank{rank}" (the rank in that
    group; under "dp{dp_rank}/" for a data-parallel replica), the coordinator's
    $WTX_SGLANG_COORDINATOR_JOURNAL ("{dp_rank}" replaced; default "coordinator" beside the
    ranks' journals), how tensors land $WTX_SGLANG_LOAD (write_source|load_weights: the
    model's own loader), the gate
    $WTX_SGLANG_SERVING_GATE (hold|restore), $WTX_SGLANG_ROLLBACK_BUDGET_BYTES, the fleet label
    of its metrics $WTX_SGLANG_FLEET, and with $WTX_SGLANG_FLEET_REGISTRY (etcd://HOST:PORT/PREFIX)
    every rank joins that fleet as a rank of replica $WTX_SGLANG_REPLICA, "-dp{i}" appended on a
    data-parallel replica: docs/fleet.md); in the tokenizer
    process, a request's weight_version is published only at the step's commit point
    (continue_generation), once every rank serves the version wtx committed. Without the
    variable it does nothing. Idempotent."""
    import os
    journal = os.environ.get("WTX_SGLANG_JOURNAL_DIR") or ""
    if not journal:
        return
    _hook_tokenizer_manager()
    try:
        from sglang.srt.managers import scheduler as scheduler_module
    except Exception:  # a process that builds no Scheduler (the tokenizer's)
        return
    cls = scheduler_module.Scheduler
    original = cls.__init__
    if getattr(original, "__wtx_hook__", False):
        return
    options: Dict[str, Any] = {"serving_gate": os.environ.get("WTX_SGLANG_SERVING_GATE", "hold"),
                               "load": os.environ.get("WTX_SGLANG_LOAD", "write_source")}
    if os.environ.get("WTX_SGLANG_ROLLBACK_BUDGET_BYTES"):
        options["rollback_budget_bytes"] = int(os.environ["WTX_SGLANG_ROLLBACK_BUDGET_BYTES"])
    if os.environ.get("WTX_SGLANG_FLEET"):
        options["metric_labels"] = {"fleet": os.environ["WTX_SGLANG_FLEET"]}
    if os.environ.get("WTX_SGLANG_LINEAGE"):
        options["lineage"] = os.environ["WTX_SGLANG_LINEAGE"]
    registry = os.environ.get("WTX_SGLANG_FLEET_REGISTRY", "")
    coordinator = os.environ.get("WTX_SGLANG_COORDINATOR_JOURNAL", "")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        group = commit_group(self)
        dp = getattr(self.tp_worker.model_runner, "dp_rank", None)
        # A data-parallel replica's journals under dp{i}/ (each replica commits on its own).
        base = journal if dp is None else os.path.join(journal, f"dp{dp}")
        where = (coordinator.replace("{dp_rank}", str(dp or 0)) if coordinator
                 else os.path.join(base, "coordinator"))
        if registry:
            # Every rank of this replica joins the fleet (docs/fleet.md); a data-parallel
            # replica's id gets its index.
            replica = os.environ.get("WTX_SGLANG_REPLICA", "")
            if not replica:
                raise Error("INVALID_ARGUMENT", "WTX_SGLANG_FLEET_REGISTRY is set but "
                            "WTX_SGLANG_REPLICA (this server's replica id) is not")
            options["fleet"] = {"registry": registry,
                                "name": os.environ.get("WTX_SGLANG_FLEET", ""),
                                "replica": replica if dp is None else f"{replica}-dp{dp}"}
        install(self, os.path.join(base, f"rank{dist.get_rank(group)}"), where, group=group,
                **options)

    __init__.__wtx_hook__ = True  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__  # type: ignore[assignment]


def _hook_tokenizer_manager() -> None:
    """In the tokenizer process: a request's weight_version is published only at the step's
    commit point, and only when every rank serves the version wtx committed (SGLang publishes it
    after every successful request, each bucket of a step included)."""
    try:
        from sglang.srt.managers import tokenizer_manager as tm_module
        from sglang.srt.managers.io_struct import CheckWeightsReqInput
    except Exception:  # a process without SGLang's tokenizer manager
        return
    cls = tm_module.TokenizerManager
    publish = cls._update_weight_version_if_provided
    if getattr(publish, "__wtx_hook__", False):
        return
    resume = cls.continue_generation

    def _update_weight_version_if_provided(self: Any, weight_version: Optional[str]) -> None:
        if weight_version is not None:
            self._wtx_pending_version = weight_version  # published at the commit point

    async def continue_generation(self: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
        out: Any = await resume(self, obj, *args, **kwargs)  # type: ignore[func-returns-value]
        label = getattr(self, "_wtx_pending_version", None)
        self._wtx_pending_version = None
        if label is not None:
            # Three values (v0.5.12.post1) or four (main: per-engine checksum last).
            answer = await self.check_weights(CheckWeightsReqInput(action=STATUS_ACTION))
            if answer[0] and _status_ok(answer[2], label):
                publish(self, label)
        return out

    _update_weight_version_if_provided.__wtx_hook__ = True  # type: ignore[attr-defined]
    setattr(cls, "_update_weight_version_if_provided", _update_weight_version_if_provided)
    setattr(cls, "continue_generation", continue_generation)
