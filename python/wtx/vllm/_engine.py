"""wtx as a vLLM weight-transfer backend: every update a transaction over the TP group.

vLLM (0.25 on) builds weight-transfer engines by name from `WeightTransferEngineFactory`
(`--weight-transfer-config '{"backend": "wtx"}'`; wtx registers itself through its
`vllm.general_plugins` entry point, _plugin.py) as `(config, vllm_config, device, model)`, and
its Worker drives them: `init_transfer_engine(init_info)`, `start_weight_update()`,
`update_weights(update_info)` (once per chunk), `finish_weight_update()`, `shutdown()`.
`WtxWeightTransferEngine` implements that contract around an *inner* engine (vLLM's "nccl",
"ipc", "sparse_nccl", wtx's "torch_broadcast", or any registered name) that moves the bytes:

* init: the inner engine is built over the served model (so vLLM's layerwise reload and
  post-load processing run there) and initialized; this rank's participant opens over the
  model's Parameter objects; 2PC joins the TP process group (its rank 0 runs the coordinator);
* start: the inner's start (vLLM's initialize_layerwise_reload); an update still open is
  refused; the transaction begins at the first chunk (`update_info["wtx"]` may set tx, kind,
  base, modules, sources, rollback, verify, expect_version);
* update_weights: while the inner receives, the served model's load_weights goes through wtx
  (reserve, the model's own loader, landed; or wtx's direct writes for torch_broadcast, in
  place where it can; vLLM's nccl engine with reload_mode "direct" receives in place through
  its own communicator, _direct.py); sparse_nccl's runtime-name patches become wtx patches.
  Every rank's failure of the chunk reaches every rank: any aborts the update everywhere
  (wtx.Aborted);
* finish: the inner's finish (finalize_layerwise_reload), the landings of what the reload
  wrote (hashed only now that the bytes are there), the refresh of derived state the
  processing recomputed, then prepare and the all-ranks commit; an empty round is a no-op.

The serving gate (hold or restore, init_info.serving_gate) and vLLM-side hooks: _plugin.py. The
trainer side on vLLM main: _trainer.py; the older static `trainer_send_weights` remains for
inners that have one. Importing this module does not import vLLM; without it the engine
subclasses `object` and works against any object of the same shape.
"""

import contextlib
import dataclasses
import functools
import inspect
import logging
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist

from .. import Aborted, Error, Manifest, Participant, fleet
from .._expect import SendHasher, hashed_as_sent
from .._module_manifest import LLAMA_STACKED_PARAMS_MAPPING, manifest_from_module
from .._receive import (EXPECTED_VERSION_NAME, VERSION_BYTES, InPlaceReceiver, UpdateState,
                        default_tx, report_to_fleet, describe_failure, describe_source_failure,
                        declare_and_load, expected_version_tensor, holds, load_one,
                        processed_sources, released_reason, reserve_and_load, resumed_check,
                        version_of)
from ..torch_dist import (Group, abort_quietly, decide_update, failure_reason, gather_from_ranks,
                          sources_held_elsewhere)
from ._broadcast import TorchBroadcastEngine
from ._direct import receive_direct, speaks_vllm_nccl
from ._plugin import _vllm_version, gate_missing
from ._placement import commit_group, journal_path, manifest_groups, placement_of, tp_group

logger = logging.getLogger("wtx.vllm")
_LOAD_MODES = ("auto", "write_source", "load_weights")
_KINDS = ("full", "partial", "delta")
_WTX_UPDATE_KEYS = ("tx", "kind", "base", "modules", "sources", "rollback", "verify",
                    "expect_version", "step", "lineage")


def _vllm_engine_base():
    try:
        from vllm.distributed.weight_transfer.base import WeightTransferEngine
        return WeightTransferEngine
    except Exception:  # vLLM absent (or broken): the classes still work on their own
        return object


def _vllm_factory():
    try:
        from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
        return WeightTransferEngineFactory
    except Exception:
        return None


# ------------------------------------------------------------------------ inner transports

_INNER: Dict[str, type] = {}
_INNER_LOCK = threading.Lock()


def register_inner(name: str, engine_cls: type) -> None:
    """Registers `engine_cls` as the inner transport `name` for wtx's own lookup (used before
    vLLM's factory, and without vLLM). Registering the same class again is a no-op; another
    class under a registered name raises wtx.Error INVALID_ARGUMENT naming both."""
    if name == "wtx":
        raise Error("INVALID_ARGUMENT", "register_inner: 'wtx' cannot be its own inner transport")
    with _INNER_LOCK:
        old = _INNER.get(name)
        if old is not None and old is not engine_cls:
            raise Error("INVALID_ARGUMENT", f"register_inner: '{name}' is already "
                        f"{old.__module__}.{old.__qualname__}, not {engine_cls.__qualname__}")
        _INNER[name] = engine_cls


def _inner_class(name: str) -> type:
    with _INNER_LOCK:
        if name in _INNER:
            return _INNER[name]
        known = sorted(_INNER)
    factory = _vllm_factory()
    registry = getattr(factory, "_registry", None) or {}
    if name in registry:
        return registry[name]()
    known += sorted(k for k in registry if k != "wtx")
    raise Error("INVALID_ARGUMENT", f"init_info.inner: transport '{name}' is not registered "
                f"(registered: {', '.join(known) or 'none'}; wtx.vllm.register_inner)")


def _construct_inner(cls: type, config: Any, vllm_config: Any, parallel_config: Any,
                     device: Any, model: Any) -> Any:
    """Builds an inner engine with whichever constructor its vLLM release has."""
    params = [p for p in inspect.signature(cls).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) >= 4:  # (config, vllm_config, device, model)
        return cls(config, vllm_config, device, model)
    return cls(config, parallel_config if parallel_config is not None else vllm_config)


def _takes_load_weights(method: Callable) -> bool:
    params = [p for p in inspect.signature(method).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(params) >= 2


# ------------------------------------------------------------------------ init / update info

class InvalidInfo(Error, ValueError):
    """A malformed init_info or update_info: a wtx.Error (code INVALID_ARGUMENT, the message
    naming the field) that is also the ValueError vLLM's own engines raise for one
    ("Invalid init_info for <Engine>: ...")."""

    def __init__(self, what: str, engine: str, message: str) -> None:
        super().__init__("INVALID_ARGUMENT", f"Invalid {what} for {engine}: {message}")


_GATES = ("hold", "restore")


@dataclass
class WtxInitInfo:
    """init_info of the "wtx" backend (a dict through vLLM's API; unknown keys raise).

    journal_dir: this rank's journal ("{rank}" is replaced by the rank in the group a
      transaction spans: the TP rank, or the rank across TP x PP with pipeline stages;
      "{dp_rank}", required with several data-parallel replicas, by the replica's index).
    coordinator_journal: the coordinator's journal, used on rank 0 of that group ("{dp_rank}"
      as above).
    inner / inner_init_info: the transport that moves the bytes ("nccl", "ipc", "sparse_nccl",
      "torch_broadcast" or any registered name) and its own init_info. (vLLM's
      --weight-transfer-config forbids extra fields: the inner is named here.)
    load: "auto" (default: the model's own loader for vLLM's engines, so that vLLM's layerwise
      reload and post-load processing run on the served model; wtx's direct writes for
      torch_broadcast), "load_weights" or "write_source".
    serving_gate: what an aborted update leaves (docs/vllm.md, "The serving gate"): "hold" (the
      rank keeps the aborted bytes, holds: vLLM's resume is refused, the weight version
      unreadable, forward passes refused, until a full update commits) or "restore" (every
      update keeps before-images, within rollback_budget_bytes, and an abort puts the old
      version back: the engine serves it on).
    manifest: this rank's manifest as JSON text; default: built from the model
      (manifest_from_module with `stacked_params_mapping`).
    threads: the participant's data-path threads (copy and hash; 0: one per core).
    metric_labels: {"replica": ..., "fleet": ...} on this rank's and its coordinator's
      Prometheus series (docs/observability.md); with several data-parallel replicas "replica"
      defaults to "dp{dp_rank}".
    lineage: the lineage (the policy being trained, docs/fleet.md) this rank's journal belongs
      to; a journal of another lineage or model is refused naming both, unless new_lineage
      (which starts `lineage` on it: nothing serves until a full update commits).
    fleet: {"registry": "etcd://HOST:PORT/PREFIX", "name", "replica", "ttl", "period"}: every
      rank joins the fleet as a rank of `replica` (wtx.fleet.join, docs/fleet.md); a rank too
      far behind the fleet's newest step (its max_lag) holds like after an abort: vLLM's
      forward passes and resume are refused until it serves an admissible step.
    """

    journal_dir: str
    coordinator_journal: Optional[str] = None
    inner: Optional[str] = None
    inner_init_info: Dict[str, Any] = field(default_factory=dict)
    load: str = "auto"
    serving_gate: str = "hold"
    rollback_budget_bytes: Optional[int] = None
    manifest: Optional[str] = None
    stacked_params_mapping: Optional[List[Any]] = None
    kernel_identity: str = ""
    prepare_timeout: float = 30.0
    threads: int = 0
    metric_labels: Optional[Dict[str, str]] = None
    lineage: Optional[str] = None
    new_lineage: bool = False
    fleet: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        if not isinstance(self.journal_dir, str) or not self.journal_dir:
            raise Error("INVALID_ARGUMENT", "init_info.journal_dir: expected a directory path, "
                        f"got {self.journal_dir!r}")
        if self.load not in _LOAD_MODES:
            raise Error("INVALID_ARGUMENT", f"init_info.load: expected one of {_LOAD_MODES}, "
                        f"got {self.load!r}")
        if self.serving_gate not in _GATES:
            raise Error("INVALID_ARGUMENT", f"init_info.serving_gate: expected one of {_GATES}, "
                        f"got {self.serving_gate!r}")
        if self.rollback_budget_bytes is not None and (
                not isinstance(self.rollback_budget_bytes, int) or self.rollback_budget_bytes < 0):
            raise Error("INVALID_ARGUMENT", "init_info.rollback_budget_bytes: expected a "
                        f"non-negative integer, got {self.rollback_budget_bytes!r}")
        if self.metric_labels is not None and not (
                isinstance(self.metric_labels, dict) and
                all(isinstance(k, str) and isinstance(v, str)
                    for k, v in self.metric_labels.items())):
            raise Error("INVALID_ARGUMENT", "init_info.metric_labels: expected a dict of "
                        f"strings, got {self.metric_labels!r}")
        if self.lineage is not None and (not isinstance(self.lineage, str) or not self.lineage):
            raise Error("INVALID_ARGUMENT", "init_info.lineage: expected a non-empty string, got "
                        f"{self.lineage!r}")
        if not isinstance(self.new_lineage, bool):
            raise Error("INVALID_ARGUMENT", "init_info.new_lineage: expected a boolean, got "
                        f"{self.new_lineage!r}")
        if self.new_lineage and self.lineage is None:
            raise Error("INVALID_ARGUMENT", "init_info.new_lineage: names no lineage (set "
                        "init_info.lineage)")
        if not isinstance(self.inner_init_info, dict):
            raise Error("INVALID_ARGUMENT", "init_info.inner_init_info: expected a dict, got "
                        f"{type(self.inner_init_info).__name__}")
        if self.fleet is not None and not isinstance(self.fleet, dict):
            raise Error("INVALID_ARGUMENT", "init_info.fleet: expected a dict (registry, name, "
                        f"replica), got {type(self.fleet).__name__}")


@dataclass
class WtxUpdateInfo:
    """update_info of the "wtx" backend: the inner transport's own fields (names, dtype_names,
    shapes, ...) plus, optionally, `wtx`: {tx, kind, base, modules, sources, rollback, verify,
    expect_version, step, lineage} (step: the step of the lineage the update commits,
    docs/fleet.md; default the next). vLLM's own trainer engines send no `wtx` field: the update is then a full
    one (a delta for sparse_nccl) with an id every rank derives alike."""

    inner: Any
    wtx: Dict[str, Any] = field(default_factory=dict)


def trainer_update_info(named_tensors: Iterable[Tuple[str, torch.Tensor]], tx: str,
                        kind: str = "full", expect_version: bool = False,
                        **wtx_fields: Any) -> Dict[str, Any]:
    """The update_info the trainer sends for `named_tensors` (names, dtype_names, shapes, as
    vLLM's NCCL and IPC engines read them, and the wtx fields). With `expect_version` the
    expected-version tensor that trainer_send_weights appends is listed last."""
    names, dtypes, shapes = [], [], []
    for name, t in named_tensors:
        names.append(name)
        dtypes.append(str(t.dtype).replace("torch.", ""))
        shapes.append(list(t.shape))
    if expect_version:
        names.append(EXPECTED_VERSION_NAME)
        dtypes.append("uint8")
        shapes.append([VERSION_BYTES])
    info = {"names": names, "dtype_names": dtypes, "shapes": shapes}
    info["wtx"] = dict(wtx_fields, tx=tx, kind=kind)
    return info


def _inner_config(config: Any, name: str) -> Any:
    """The weight-transfer config the inner engine is built with: wtx's own, its backend the
    inner's name (reload_mode and the rest as the user set them)."""
    if dataclasses.is_dataclass(config):
        try:
            return dataclasses.replace(config, backend=name)
        except Exception:
            pass
    ns = types.SimpleNamespace(**{k: v for k, v in vars(config).items()}) if hasattr(
        config, "__dict__") else types.SimpleNamespace()
    ns.backend = name
    if not hasattr(ns, "reload_mode"):
        ns.reload_mode = "layerwise"
    return ns


def _rank_payload(update_info: Any, rank: int, size: int) -> Any:
    """vLLM main's update payload is a dict, or a list of dicts with one per worker (rank r
    takes entry r; a single entry is everyone's)."""
    if not isinstance(update_info, list):
        return update_info
    if len(update_info) == 1:
        return update_info[0]
    if len(update_info) != size:
        raise InvalidInfo("update_info", "WtxWeightTransferEngine",
                          f"a list of {len(update_info)} per-worker payloads for {size} ranks")
    return update_info[rank]


# ---------------------------------------------------------------------------------- engine

_ENGINE_BASE = _vllm_engine_base()  # vLLM's WeightTransferEngine, or object without vLLM


class WtxWeightTransferEngine(UpdateState, _ENGINE_BASE):  # type: ignore[misc, valid-type]
    """vLLM weight-transfer backend "wtx" (module docstring; docs/vllm.md).

    Built by vLLM's factory as (config, vllm_config, device, model); the base class keeps the
    served model as the update target (set/reset_weight_update_target). Draft updates are
    refused (supports_draft_weight_update is False: the participant holds the target model's
    parameters only). `weight_version` is the version the last update committed (unchanged by
    an empty round), `last_outcome` its outcome dict; serving_state() what the plugin's gate
    reads (wtx.vllm.register).

    Attributes a worker may set after construction: `process_group` (the TP group for 2PC;
    default: vLLM's TP group, else the default group) and `refresh_derived` (callable(names):
    recomputes derived state the engine's own processing does not).
    """

    __wtx_engine__ = True  # the plugin's hooks recognize wtx's engine by this
    init_info_cls = WtxInitInfo
    update_info_cls = WtxUpdateInfo
    supports_draft_weight_update = False
    _how_to_init = "init_transfer_engine"

    def __init__(self, config: Any, *args: Any) -> None:
        if len(args) < 3:
            raise Error("E_UNSUPPORTED", f"WtxWeightTransferEngine: vLLM {_vllm_version()} "
                        "built it as (config, parallel_config), vLLM's contract before 0.25 (no "
                        "start_weight_update/finish_weight_update): wtx could begin an update "
                        "there but never commit it; upgrade vLLM to 0.25 or later (main)")
        vllm_config, device, model = args[0], args[1], args[2]
        if _ENGINE_BASE is not object and vllm_config is not None:
            super().__init__(config, vllm_config, device, model)  # type: ignore[call-arg]
        else:  # no vLLM (or no vLLM config): the same attributes as its base class sets
            self.config = config
            self.vllm_config = vllm_config
            self.parallel_config = getattr(vllm_config, "parallel_config", None)
            self.model_config = getattr(vllm_config, "model_config", None)
            self.device = device
            self.model = model
            self._default_model_config = self.model_config
            self._default_model = model
        self.process_group: Any = None
        self.refresh_derived: Optional[Callable[[List[str]], None]] = None
        self.weight_version: Optional[str] = None
        self.last_outcome: Optional[Dict[str, Any]] = None
        self.participant: Optional[Participant] = None
        self.group: Optional[Group] = None
        self._inner: Any = None
        self._inner_takes_loader = False
        self._init: Optional[WtxInitInfo] = None
        self._mode = "write_source"
        self._tx: Optional[str] = None
        self._failure: Optional[str] = None
        self._ended: Optional[str] = None  # why the update ended early (aborted everywhere)
        self._refusal: Optional[str] = None  # vLLM's worker refuses this chunk on this rank
        # Why the live weights are not vouched for outside any update (vLLM's sleep released
        # them, or they woke with nothing committed to check them against).
        self._unvouched: Optional[str] = None
        self._member: Optional[fleet.Member] = None  # init_info.fleet
        self._expected: Optional[str] = None
        self._updates = 0
        self._writes = _Pipeline(self._fail)
        self._receiver = InPlaceReceiver()  # full sources received into live memory
        self._kind = "full"
        self._pinned: Dict[str, torch.nn.Parameter] = {}
        self._model_load: Optional[Callable[..., Any]] = None
        self._buffers: Optional[Dict[str, torch.Tensor]] = None
        self._rank = 0
        self._size = 1
        self._reloading = False  # the inner's start ran (vLLM's layerwise reload) until finish
        # Sources reserved and loaded through the model's loader inside the inner's reload
        # window: landed once the inner's finish has written them (_land_deferred).
        self._deferred: List[str] = []
        # Sources only other ranks of the group hold (other pipeline stages, other experts):
        # received and dropped here.
        self._elsewhere: FrozenSet[str] = frozenset()
        self._processed: FrozenSet[str] = frozenset()  # sources of processed parameters

    # vLLM's base keeps these; without vLLM the engine has its own.
    if _ENGINE_BASE is object:
        def set_weight_update_target(self, model: Any, model_config: Any) -> None:
            """vLLM's base: the model (and its config) the next update targets."""
            self.model, self.model_config = model, model_config

        def reset_weight_update_target(self) -> None:
            """vLLM's base: the served model is the target again."""
            self.model, self.model_config = self._default_model, self._default_model_config

    # -- parsing ---------------------------------------------------------------------------

    def parse_init_info(self, init_dict: Dict[str, Any]) -> WtxInitInfo:
        """init_info dict -> WtxInitInfo. A missing, unknown or malformed key raises
        InvalidInfo (a wtx.Error and a ValueError, as vLLM's engines) naming it."""
        if isinstance(init_dict, WtxInitInfo):
            return init_dict
        try:
            if not isinstance(init_dict, dict):
                raise Error("INVALID_ARGUMENT", "init_info: expected a dict, got "
                            f"{type(init_dict).__name__}")
            names = {f.name for f in dataclasses.fields(WtxInitInfo)}
            unknown = sorted(set(init_dict) - names)
            if unknown:
                raise Error("INVALID_ARGUMENT", f"init_info: unknown key(s) {unknown} (expected "
                            f"{sorted(names)})")
            if "journal_dir" not in init_dict:
                raise Error("INVALID_ARGUMENT", "init_info.journal_dir: missing")
            return WtxInitInfo(**init_dict)
        except Error as e:
            raise InvalidInfo("init_info", type(self).__name__, e.message) from None

    def parse_update_info(self, update_dict: Dict[str, Any]) -> WtxUpdateInfo:
        """update_info dict -> WtxUpdateInfo: `wtx` checked here, the rest parsed by the inner
        engine. A malformed field raises InvalidInfo naming it."""
        if isinstance(update_dict, WtxUpdateInfo):
            return update_dict
        try:
            if not isinstance(update_dict, dict):
                raise Error("INVALID_ARGUMENT", "update_info: expected a dict, got "
                            f"{type(update_dict).__name__}")
            inner = self._require_init("update_weights")[0]
            rest = dict(update_dict)
            w = rest.pop("wtx", None) or {}
            if not isinstance(w, dict):
                raise Error("INVALID_ARGUMENT", f"update_info.wtx: expected a dict, got {w!r}")
            unknown = sorted(set(w) - set(_WTX_UPDATE_KEYS))
            if unknown:
                raise Error("INVALID_ARGUMENT", f"update_info.wtx: unknown key(s) {unknown} "
                            f"(expected {list(_WTX_UPDATE_KEYS)})")
            if "kind" in w and w["kind"] not in _KINDS:
                raise Error("INVALID_ARGUMENT", "update_info.wtx.kind: expected one of "
                            f"{_KINDS}, got {w['kind']!r}")
            if "tx" in w and (not isinstance(w["tx"], str) or not w["tx"]):
                raise Error("INVALID_ARGUMENT", "update_info.wtx.tx: expected a non-empty "
                            f"string, got {w['tx']!r}")
            if "step" in w and (isinstance(w["step"], bool) or not isinstance(w["step"], int)
                                or w["step"] < 0):
                raise Error("INVALID_ARGUMENT", "update_info.wtx.step: expected an integer "
                            f">= 0, got {w['step']!r}")
            if "lineage" in w and (not isinstance(w["lineage"], str) or not w["lineage"]):
                raise Error("INVALID_ARGUMENT", "update_info.wtx.lineage: expected a non-empty "
                            f"string, got {w['lineage']!r}")
            try:
                parsed = (inner.parse_update_info(rest) if hasattr(inner, "parse_update_info")
                          else rest)
            except Error:
                raise
            except Exception as e:  # the inner engine's own validation (ValueError, TypeError)
                raise Error("INVALID_ARGUMENT", f"update_info: {e}") from e
            return WtxUpdateInfo(inner=parsed, wtx=w)
        except Error as e:
            if e.code != "INVALID_ARGUMENT":
                raise
            raise InvalidInfo("update_info", type(self).__name__, e.message) from None

    # -- the phases ------------------------------------------------------------------------

    def init_transfer_engine(self, init_info: Any) -> None:
        """Builds and initializes the inner transport over the served model, opens this rank's
        participant over the model's parameters and joins 2PC over the TP group (collective
        over it; recovers an in-doubt rank). Raises wtx.Error naming what was wrong; on
        failure nothing stays open, and a later call may try again (a trainer that died
        before init completed leaves nothing behind)."""
        info = self.parse_init_info(init_info)
        if self.participant is not None:
            # A trainer that died and came back: the old transport is replaced, the
            # participant and the group are kept (an update it left open is aborted first).
            self._reinit_inner(info)
            return
        inner_name = info.inner
        if not inner_name:
            raise InvalidInfo("init_info", type(self).__name__, "init_info.inner: missing "
                              "(name the transport that moves the bytes: nccl, ipc, "
                              "sparse_nccl, torch_broadcast or a registered name)")
        if inner_name == "wtx":
            raise InvalidInfo("init_info", type(self).__name__,
                              "init_info.inner: 'wtx' cannot wrap itself")
        if _ENGINE_BASE is not object and self.vllm_config is not None:
            # Built by vLLM: without the gate's worker hook, vLLM would generate from whatever
            # an aborted update left; refused before anything opens.
            missing = gate_missing()
            if missing is not None:
                raise Error("E_UNSUPPORTED", f"init_transfer_engine: {missing}; after an "
                            "aborted update vLLM would generate from bytes no committed "
                            "version vouches for")
        if self.model is None:
            raise Error("INVALID_ARGUMENT", "init_transfer_engine: the engine has no model")
        place = placement_of(self.parallel_config)
        if self.process_group is not None:
            tp, group = self.process_group, self.process_group
        else:
            tp, group = tp_group(), commit_group(place)
        tp_size, tp_rank = dist.get_world_size(tp), dist.get_rank(tp)
        self._rank, self._size = dist.get_rank(group), dist.get_world_size(group)
        journal_dir = journal_path(info.journal_dir, "journal_dir", self._rank, place)
        coordinator_journal = (journal_path(info.coordinator_journal, "coordinator_journal",
                                            self._rank, place)
                               if info.coordinator_journal else info.coordinator_journal)
        inner, inner_init = self._build_inner(inner_name, info)
        if info.manifest is not None:
            manifest = Manifest.from_json(info.manifest)
        else:
            mapping = (info.stacked_params_mapping if info.stacked_params_mapping is not None
                       else getattr(self.model, "stacked_params_mapping",
                                    LLAMA_STACKED_PARAMS_MAPPING))
            manifest = manifest_from_module(self.model, mapping, tp_size, tp_rank)
        # The Parameter objects themselves: vLLM's layerwise reload swaps meta placeholders
        # onto the modules during an update and registers these same objects back after it;
        # wtx follows their storage (a rebinding of .data is seen at every phase).
        params = dict(self.model.named_parameters())
        names = [q["name"] for q in manifest.params]
        pinned = {n: params[n] for n in names if n in params}
        extra: Dict[str, Any] = {}
        if info.rollback_budget_bytes is not None:
            extra["rollback_budget_bytes"] = info.rollback_budget_bytes
        labels = dict(info.metric_labels or {})
        if place.dp_size > 1 and not place.replicas_commit_together:
            labels.setdefault("replica", f"dp{place.dp_index}")
        participant = Participant.open(journal_dir, manifest, rank=self._rank,
                                       tensors=pinned if len(pinned) == len(names)
                                       else self.model,
                                       kernel_identity=info.kernel_identity,
                                       threads=info.threads, metric_labels=labels,
                                       lineage=info.lineage, new_lineage=info.new_lineage,
                                       **extra)
        try:
            stages = manifest_groups(place, group) if self.process_group is None else None
            self.group = Group(participant, coordinator_journal, group=group,
                               prepare_timeout=info.prepare_timeout, metric_labels=labels,
                               **({"manifest_groups": stages} if stages else {}))
            inner.init_transfer_engine(inner_init)
            if info.fleet is not None:
                self._member = fleet.join(participant, info.fleet, world=self._size,
                                          what="init_info.fleet")
        except BaseException:
            if self.group is not None:
                self.group.close()
                self.group = None
            participant.close()
            raise
        self.participant = participant
        self._processed = processed_sources(participant)
        self._pinned = pinned
        self._elsewhere = sources_held_elsewhere(participant, self.group)
        self._adopt_inner(inner, info)
        self._reattach_surviving()

    def _reattach_surviving(self) -> None:
        """An engine opened again in a process whose tensors survived (a trainer reconnecting
        after shutdown, a rebuilt engine): the journal's committed version is proven against
        the live bytes (Participant.reattach: every chunk hashed); an exact match makes the
        rank clean and loaded, so a delta can follow without a full update first. A mismatch
        leaves it held until a full update commits."""
        st = self._p.status()
        if st.get("loaded") or not st.get("version") or st.get("active_tx"):
            return
        try:
            report = self._p.reattach()
        except Error as e:
            logger.warning("wtx: rank %d: the surviving tensors were not reattached: %s",
                           self._rank, e.message)
            return
        if not self._p.status().get("loaded"):
            logger.warning("wtx: rank %d: the live bytes differ from committed version %s "
                           "(%s); held until a full update commits", self._rank,
                           st.get("version"), report)

    def _build_inner(self, name: str, info: WtxInitInfo) -> Tuple[Any, Any]:
        cls = _inner_class(name)
        inner = _construct_inner(cls, _inner_config(self.config, name), self.vllm_config,
                                 self.parallel_config, self.device, self.model)
        if hasattr(inner, "parse_init_info"):
            try:
                inner_init = inner.parse_init_info(info.inner_init_info)
            except Exception as e:
                raise InvalidInfo("init_info", type(self).__name__,
                                  f"init_info.inner_init_info: {e}") from e
        else:
            inner_init = info.inner_init_info
        return inner, inner_init

    def _adopt_inner(self, inner: Any, info: WtxInitInfo) -> None:
        self._inner = inner
        self._init = info
        self._inner_takes_loader = _takes_load_weights(inner.receive_weights)
        own = isinstance(inner, TorchBroadcastEngine)
        self._mode = info.load if info.load != "auto" else (
            "write_source" if own or self._inner_takes_loader else "load_weights")
        if self._mode == "write_source" and hasattr(inner, "destination"):
            inner.destination = self._destination  # full tensors land in place
        if hasattr(inner, "_apply_patch"):  # sparse_nccl: runtime-name patches through wtx
            inner._apply_patch = self._apply_runtime_patch

    def _reinit_inner(self, info: WtxInitInfo) -> None:
        """A trainer that came back: the new transport is initialized first; only once it
        works is the open update (if any) aborted and the old transport closed. A re-init that
        fails (the trainer did not rejoin) leaves the engine exactly as it was."""
        inner, inner_init = self._build_inner(info.inner or "", info)
        try:
            inner.init_transfer_engine(inner_init)
        except BaseException:
            if hasattr(inner, "shutdown"):
                try:
                    inner.shutdown()
                except Exception:
                    pass
            raise
        self.end_open_update()
        self._ended = None
        old = self._inner
        if old is not None and old is not inner and hasattr(old, "shutdown"):
            old.shutdown()
        self._adopt_inner(inner, info)

    def start_weight_update(self) -> None:
        """Starts an update on this rank: the inner engine's start (vLLM's layerwise reload of
        the served model). An update still open here (a finish never came) is refused, naming
        it: vLLM's worker refuses a second start itself, and finish_weight_update ends the
        open one. The transaction begins at the first update_weights (or is a no-op when none
        comes)."""
        self._require_init("start_weight_update")
        if self._tx is not None:
            raise Error("E_TX_ACTIVE", f"rank {self._rank}: start_weight_update: update "
                        f"'{self._tx}' is still open (finish_weight_update ends it)")
        self._failure = None
        self._ended = None
        self._expected = None
        self._deferred = []
        self._check_parameter_objects()
        self._buffers = None
        if self._init is not None and self._init.serving_gate == "restore":
            # Buffers the engine derives (scales, absorbed matrices) go back with the
            # parameters' before-images when an update aborts.
            self._buffers = {n: b.detach().clone() for n, b in self.model.named_buffers()}
        if hasattr(self._inner, "start_weight_update"):
            self._inner.start_weight_update()
            self._reloading = True

    def update_weights(self, update_info: Any) -> None:
        """One chunk: parse, begin on the first chunk, receive through the inner transport.
        Every rank then learns every rank's failure before any returns (collective): a chunk
        that failed anywhere aborts the update on every rank and raises wtx.Aborted naming
        the ranks and causes (vLLM's worker then ends its session on every rank alike)."""
        failure = None
        try:
            parsed = self.parse_update_info(_rank_payload(update_info, self._rank, self._size))
            self.receive_weights(parsed)
        except BaseException as e:
            self._fail(e)
            failure = self._failure
            if isinstance(e, InvalidInfo) and self.participant is None:
                raise
        synchronize = getattr(getattr(torch, "accelerator", None), "synchronize", None)
        if synchronize is not None and torch.cuda.is_available():
            synchronize()
        self._exchange_failures("update_weights", failure)

    def receive_weights(self, update_info: WtxUpdateInfo,
                        load_weights: Optional[Callable[..., Any]] = None) -> None:
        """Receives one chunk through the inner engine; every tensor goes through wtx (written
        by source name, or loaded by the model's own loader between reserve and landed)."""
        self._require_init("receive_weights")
        try:
            try:
                self._begin_if_needed(update_info)  # collective: every rank begins alike
            except BaseException as e:
                # Recorded; the transport still receives (and wtx discards) what the trainer
                # sends, so a collective send completes and no trainer is left blocked.
                self._fail(e)
            if self._refusal is not None:
                self._fail(RuntimeError(self._refusal))  # received and dropped
            try:
                if self._receiver.enabled and speaks_vllm_nccl(self._inner, update_info.inner):
                    # vLLM's NCCL engine in direct mode: its wire, received in place.
                    receive_direct(self._inner, update_info.inner, self._destination, self._load)
                elif self._inner_takes_loader:
                    self._inner.receive_weights(update_info.inner, self._load)
                else:
                    with self._loads_through_wtx():
                        self._inner.receive_weights(update_info.inner)
            finally:
                self._writes.drain()  # every write handed off is done (or failed) first
            if self._failure is not None:
                raise Error("E_UPDATE_FAILED", f"rank {self._rank}: {self._failure}")
        except BaseException as e:
            self._fail(e)
            raise

    def finish_weight_update(self) -> Optional[Dict[str, Any]]:
        """The inner engine's finish on the served model (vLLM's finalize_layerwise_reload:
        its post-load processing), the refreshes of derived state, then the all-ranks commit
        (collective). Returns the outcome ("noop" for an empty round: weight_version stays);
        raises wtx.Aborted on every rank when any rank failed or the commit aborted."""
        self._require_init("finish_weight_update")
        ended = self._end_reload()
        if ended is not None:
            self._fail(ended)
        if self._failure is None:
            try:
                self._check_parameter_objects()
                self._land_deferred()
                self._refresh_stale()
            except BaseException as e:
                self._fail(e)
        tx, self._tx = self._tx, None
        if tx is None:
            self._exchange_failures("finish_weight_update", self._failure)
            if self._ended is not None:
                raise Error("E_UPDATE_FAILED", f"rank {self._rank}: finish_weight_update: this "
                            f"update already aborted on every rank ({self._ended})")
            out = {"outcome": "noop", "version": self.weight_version}
            self.last_outcome = out
            return out
        try:
            out = decide_update(self._g, tx, self._failure, self._expected)
        except Aborted as e:
            self.last_outcome = e.decision
            self._after_abort()
            raise
        self.last_outcome = out
        if out.get("version"):
            self.weight_version = out.get("version")
        if out.get("outcome") == "committed" and self._kind == "full":
            self._unvouched = None  # every byte of the model was written and proven
        report_to_fleet(self._member)
        return out

    def weights_released(self, call: str = "sleep") -> None:
        """vLLM's worker slept (its weights offloaded or discarded): this rank holds until
        they are back and proven (weights_resumed) or a full update commits."""
        if self.participant is not None:
            self._unvouched = released_reason(call)

    def weights_resumed(self, call: str = "wake_up") -> Dict[str, Any]:
        """vLLM's worker woke its weights: every chunk is checked against the committed
        version (resumed_check); the rank holds unless they match. Returns the report."""
        if self.participant is None:
            return {"ok": False, "comparable": False, "message": "not initialized"}
        self._unvouched, report = resumed_check(self._p, call)
        return report

    def refuse_update(self, update_info: Any, reason: str) -> None:
        """This rank's part of a chunk vLLM's worker refuses here (the plugin's hook): the
        chunk is received and dropped, and the refusal is exchanged like any failure, so every
        rank aborts the update now, naming this one. Raises wtx.Aborted."""
        self._refusal = f"vLLM's worker refused it: {reason}"
        try:
            self.update_weights(update_info)
        finally:
            self._refusal = None

    def refuse_finish(self, reason: str) -> None:
        """This rank's part of a finish vLLM's worker refuses here: the update is decided as
        failed on every rank (naming this one) instead of leaving the others to wait for its
        vote. Raises wtx.Aborted (or returns when nothing was open anywhere)."""
        self._fail(RuntimeError(f"vLLM's worker refused it: {reason}"))
        try:
            self.finish_weight_update()
        except Aborted:
            pass

    def end_open_update(self) -> None:
        """Ends whatever of an update is still open on this rank (after a finish that raised):
        the transaction aborted, the inner's reload window closed, the failure cleared, so the
        next start finds this rank as every other."""
        tx, self._tx = self._tx, None
        self._finish_reload_quietly()
        if tx is not None and self.group is not None:
            abort_quietly(self._g, tx)
        self._failure = None

    def shutdown(self) -> None:
        """Ends an open update if it can (aborted), then closes the inner engine, the
        coordinator and the participant. Idempotent; never raises for a peer that is gone."""
        group, participant, inner, tx = self.group, self.participant, self._inner, self._tx
        self.group, self.participant, self._inner, self._tx = None, None, None, None
        member, self._member = self._member, None
        if member is not None:
            member.close()  # leaves the fleet (its lease revoked) before the participant closes
        if group is not None and tx is not None:
            try:
                abort_quietly(group, tx)
            except Exception:
                pass
        if inner is not None and hasattr(inner, "shutdown"):
            try:
                inner.shutdown()
            except Exception:
                pass
        if group is not None:
            group.close()
        if participant is not None:
            participant.close()

    def serving_state(self) -> Dict[str, Any]:
        """What the serving gate reads: {"rank", "serving" (False while this rank holds),
        "reason", "policy_hold" (True when the only reason is an outside hold, the fleet's
        staleness gate: the live bytes are still the committed version), "version",
        "last_outcome" (of the last update: "committed", "noop", "aborted")}
        (wtx.vllm.register's hooks of vLLM's engine core and worker)."""
        if self.participant is None:
            return {"rank": self._rank, "serving": True, "reason": None, "version": None,
                    "policy_hold": False}
        st = self.participant.status()
        why = holds(st) or self._unvouched
        bytes_why = holds(dict(st, held=None)) or self._unvouched
        return {"rank": self._rank, "serving": why is None, "reason": why,
                "policy_hold": why is not None and bytes_why is None,
                "version": st.get("version"),
                "last_outcome": (self.last_outcome or {}).get("outcome")}

    @staticmethod
    def trainer_send_weights(iterator: Iterator[Tuple[str, torch.Tensor]],
                             trainer_args: Dict[str, Any]) -> Optional[str]:
        """The older trainer path, for inners that still have a static trainer_send_weights
        (torch_broadcast; vLLM releases before the trainer engines): sends through the inner
        transport's trainer side (trainer_args["inner"] names it, ["inner_args"] are its own
        trainer_args). With ["manifests"] (every engine rank's wtx.Manifest or manifest JSON)
        the version a full update of exactly these weights must commit is computed and sent
        after them (list it with trainer_update_info(expect_version=True)); returned. On vLLM
        main use the "wtx" trainer engine (wtx.vllm.WtxTrainerWeightTransferEngine)."""
        if not isinstance(trainer_args, dict):
            raise Error("INVALID_ARGUMENT", "trainer_args: expected a dict")
        name = trainer_args.get("inner")
        if not name:
            raise Error("INVALID_ARGUMENT", "trainer_args.inner: missing (the inner transport)")
        send: Callable[..., None] = getattr(_inner_class(name), "trainer_send_weights")
        inner_args = trainer_args.get("inner_args", {})
        manifests = trainer_args.get("manifests")
        if manifests is None:
            send(iterator, inner_args)
            return None
        hasher = SendHasher(manifests)  # each piece hashed as it leaves, beside the send
        try:
            send(hashed_as_sent(iterator, hasher), inner_args)
        except BaseException:
            hasher.close()
            raise
        error: Optional[BaseException] = None
        try:
            version = hasher.version()
        except BaseException as e:  # raised below, after the engine got its last tensor
            version, error = "", e
        send(iter([(EXPECTED_VERSION_NAME, expected_version_tensor(version))]), inner_args)
        if error is not None:
            raise error
        return version

    # -- internals -------------------------------------------------------------------------

    def _require_init(self, call: str) -> Tuple[Any, Participant]:
        if self.participant is None or self._inner is None:
            raise Error("INVALID_ARGUMENT", f"{call}: the wtx engine is not initialized "
                        "(init_transfer_engine)")
        return self._inner, self.participant

    def _fail(self, e: BaseException) -> None:
        if self._failure is None:
            self._failure = describe_failure(e)

    def _fail_on(self, name: str, e: BaseException) -> None:
        """A failure of source `name`, named (describe_source_failure)."""
        if self._failure is None:
            self._failure = describe_source_failure(name, e)

    def _exchange_failures(self, phase: str, failure: Optional[str]) -> None:
        """Every rank's failure of `phase` reaches every rank (collective); any aborts the open
        update everywhere and raises wtx.Aborted naming each rank and cause. A rank that is
        gone (the exchange itself fails) is named as such."""
        try:
            failures = gather_from_ranks(failure, self._g)
        except RuntimeError as e:
            self._failure = self._failure or f"a rank of the TP group is gone ({e})"
            tx, self._tx = self._tx, None
            self._finish_reload_quietly()
            raise Error("E_UPDATE_FAILED", f"rank {self._rank}: {phase}: the TP group lost a "
                        f"rank ({e}); update '{tx}' cannot commit") from None
        if not any(failures):
            return
        reason = failure_reason(failures)
        tx, self._tx = self._tx, None
        # The update has ended (every rank aborts it): the next call reports its own failure,
        # and a finish after it says the update already ended.
        self._failure, self._ended = None, reason
        self._finish_reload_quietly()
        decision: Dict[str, Any] = {"outcome": "aborted", "reason": reason,
                                    "error": {"code": "E_UPDATE_FAILED", "message": reason}}
        if tx is not None:
            try:
                decision = dict(self._g.abort(tx), **decision)
            except Error as e:
                decision["abort_error"] = e.message
        self.last_outcome = decision
        self._after_abort()
        raise Aborted(tx or "(not begun)", decision)

    def _end_reload(self) -> Optional[BaseException]:
        """The inner's finish, once per start (vLLM's finalize_layerwise_reload: the served
        model has its own parameters back, processed); what it raised, if anything."""
        if not self._reloading:
            return None
        self._reloading = False
        try:
            self._inner.finish_weight_update()
        except BaseException as e:
            return e
        return None

    def _land_deferred(self) -> None:
        """Lands what the model's loader took inside the inner's reload window, now that the
        inner's finish has written it: vLLM's layerwise reload buffers each load and writes a
        layer's processed bytes into the live storage only when the layer completes (or at
        finalize), so a landing at load time would hash bytes that are not yet there."""
        deferred, self._deferred = self._deferred, []
        for name in deferred:
            try:
                self._p.landed_source(name)
            except BaseException as e:
                self._fail_on(name, e)  # named; finish aborts the update
                raise

    def _finish_reload_quietly(self) -> None:
        """An update that ends early still ends the inner's reload (vLLM's layerwise reload
        leaves meta placeholders on the modules otherwise); its error is the abort's to name."""
        self._end_reload()

    def _after_abort(self) -> None:
        """After an abort: with the restore gate, the engine's derived buffers go back too (the
        parameters came back from wtx's before-images)."""
        saved, self._buffers = self._buffers, None
        if saved is None or self.participant is None:
            return
        if holds(self.participant.status()) is not None:
            return  # nothing was restored (a full update on a rank with nothing committed)
        with torch.no_grad():
            for name, b in self.model.named_buffers():
                if name in saved and saved[name].shape == b.shape:
                    b.copy_(saved[name])

    def _check_parameter_objects(self) -> None:
        """The served model's parameters are still the objects wtx follows (outside an
        update's reload window): an engine that replaced one is named, never vouched for."""
        if not self._pinned:
            return
        now = dict(self.model.named_parameters())
        replaced = [n for n, p in self._pinned.items() if now.get(n) is not p]
        if replaced:
            raise Error("E_STORAGE_MOVED", f"rank {self._rank}: the engine replaced the "
                        f"parameter object(s) {replaced[:8]} wtx follows; wtx does not vouch "
                        "for them (re-initialize the weight transfer)")

    def _refresh_stale(self) -> None:
        """Derived state whose sources were written: the inner's finish ran the engine's own
        post-load processing on the served model (vLLM's layerwise reload processes each layer
        as it completes and at finalize), which recomputes it; a `refresh_derived` hook runs
        first for anything the engine does not process itself."""
        stale = self._p.status()["stale_derived"]
        if not stale:
            return
        if self.refresh_derived is not None:
            self.refresh_derived(list(stale))
        elif not hasattr(self._inner, "finish_weight_update"):
            return  # nothing recomputed it: prepare names it stale
        for name in stale:
            self._p.refresh(name)

    def _begin_if_needed(self, info: WtxUpdateInfo) -> None:
        w = info.wtx
        if self._tx is not None:
            if "tx" in w and w["tx"] != self._tx:
                raise Error("INVALID_ARGUMENT", f"update_info.wtx.tx: '{w['tx']}' while "
                            f"'{self._tx}' is being received (finish_weight_update first)")
            if "expect_version" in w:
                self._expected = w["expect_version"]
            return
        if self._failure is not None:
            raise Error("E_UPDATE_FAILED", f"this update already failed: {self._failure}")
        if self._ended is not None:
            raise Error("E_UPDATE_FAILED", f"this update already aborted ({self._ended}); "
                        "start_weight_update begins the next")
        self._updates += 1
        tx = w.get("tx") or default_tx("vllm", self._p, self._updates)
        kind = w.get("kind")
        sources = w.get("sources")
        base = w.get("base")
        if kind is None and hasattr(self._inner, "_apply_patch"):
            kind = "delta"  # sparse_nccl: a patch of the sources it names
            sources = sources or self._sources_of_runtime_names(
                getattr(info.inner, "names", []))
        kind = kind or "full"
        if kind == "delta" and base is None:
            base = self._p.status().get("version")
        gate = self._init.serving_gate if self._init else "hold"
        rollback = bool(w.get("rollback", gate == "restore"))
        self._g.begin(tx, kind=kind, base=base, modules=w.get("modules"), sources=sources,
                      rollback=rollback, verify=w.get("verify", "touched"),
                      lineage=w.get("lineage"), step=w.get("step"))
        self._tx = tx
        self._kind = kind
        if "expect_version" in w:
            self._expected = w["expect_version"]
        self._receiver.reset()

    def _sources_of_runtime_names(self, names: List[str]) -> List[str]:
        params = {q["name"]: q for q in self._p.manifest.params}
        out: List[str] = []
        for name in names:
            for s in params[name]["shards"] if name in params else []:
                if s["source"] not in out:
                    out.append(s["source"])
        return out

    def _apply_runtime_patch(self, patch: Any) -> None:
        """A sparse_nccl patch (flat indices into the LIVE parameter `patch.name`) as wtx
        patches of the sources that parameter's shards hold (translated through each shard's
        box): applied, recorded and checked like any wtx patch."""
        p = self._p
        name = patch.name
        params = {q["name"]: q for q in p.manifest.params}
        if name not in params:
            raise Error("E_UNKNOWN_PARAM", f"rank {self._rank}: sparse patch of unknown "
                        f"parameter '{name}'")
        for src, idx, vals in _runtime_patch_to_sources(params[name],
                                                        patch.indices.to(torch.long).cpu(),
                                                        patch.values.cpu()):
            p.patch(src, idx, vals)

    @contextlib.contextmanager
    def _loads_through_wtx(self) -> Iterator[None]:
        """While the inner engine receives, the served model's load_weights goes through wtx
        (an instance attribute shadowing the model's method; removed after)."""
        model = self.model
        self._model_load = model.load_weights
        model.load_weights = self._load
        try:
            yield
        finally:
            try:
                del model.load_weights
            except AttributeError:
                pass
            self._model_load = None

    def _destination(self, name: str, dtype: torch.dtype,
                     shape: List[int]) -> Optional[torch.Tensor]:
        """The inner transport's destination hook: see InPlaceReceiver (a full or partial
        update that has not failed)."""
        if self._failure is not None or self._tx is None or self._kind == "delta":
            return None
        try:
            return self._receiver.destination(self._p, name, dtype, shape)
        except BaseException as e:  # recorded: the transport still receives into a buffer
            self._fail(e)
            return None

    @property
    def receive_in_place(self) -> bool:
        """Whether full tensors are received straight into live memory where the inner
        transport offers a destination hook (torch_broadcast) or wtx speaks its wire (vLLM's
        nccl engine with reload_mode "direct", _direct.py); False: received into the
        transport's buffer, then written by name or loaded by the model's loader."""
        return self._receiver.enabled

    @receive_in_place.setter
    def receive_in_place(self, on: bool) -> None:
        self._receiver.enabled = bool(on)

    @property
    def received_in_place(self) -> int:
        """Sources of the current update received straight into live memory."""
        return self._receiver.in_place

    @property
    def received_reserved(self) -> int:
        """Sources of the current update reserved, received into a buffer, then copied into
        their reserved views (a source split over several shards of this rank)."""
        return self._receiver.buffered

    def _load(self, weights: Any = None, **kwargs: Any) -> set:
        """What the inner engine loads (the model's load_weights while it receives): each item
        through wtx. Returns the names loaded.

        A failure (an unknown name, a wrong shape or dtype, the model's loader raising) is
        recorded and the rest of the chunk is still taken from the transport but not written,
        so that a collective transport (a broadcast) completes for the other ranks;
        receive_weights then raises it."""
        if weights is None:
            weights = kwargs.get("weights", ())
        p = self._p
        loaded = set()
        for name, value in weights:
            if name == EXPECTED_VERSION_NAME:
                self._expected = version_of(value)
                if not self._expected:
                    self._fail(Error("E_VERSION_MISMATCH", "the trainer sent no expected "
                                     "version (its computation failed)"))
                continue
            if self._failure is not None or name in self._elsewhere:
                continue  # drained, not written (failed; or another rank's source)
            if self._receiver.owns(name):
                try:
                    self._receiver.land(p, name, value)
                except BaseException as e:
                    self._fail_on(name, e)
                    continue
            elif name in self._processed and not isinstance(value, (tuple, list)):
                # Checkpoint bytes of processed parameters: declared, then the model's loader
                # and its post-load processing write the served form (hashed at prepare).
                try:
                    declare_and_load(p, self._model_load or self.model, name, value)
                except BaseException as e:
                    self._fail_on(name, e)
                    continue
            elif self._mode == "write_source" and not isinstance(value, (tuple, list)):
                # Written on the writer thread while the transport receives the next tensor
                # (write_source releases the GIL); its failure is recorded there.
                self._writes.submit(functools.partial(p.write_source, name, value))
            else:
                try:
                    if (self._reloading and self._mode == "load_weights"
                            and not isinstance(value, (tuple, list))):
                        if reserve_and_load(p, self._model_load or self.model, name, value):
                            self._deferred.append(name)  # landed after the inner's finish
                    else:
                        load_one(p, self._model_load or self.model, self._mode, name, value)
                except BaseException as e:
                    self._fail_on(name, e)
                    continue
            loaded.add(name)
        return loaded


def _runtime_patch_to_sources(param: Dict[str, Any], flat: torch.Tensor,
                              values: torch.Tensor) -> List[Tuple[str, torch.Tensor,
                                                                  torch.Tensor]]:
    """Flat indices into the live parameter `param` (a Manifest.params entry) -> (source,
    flat source indices, values) for each source its shards hold (each shard's live box
    translated to its source box)."""
    shards = param["shards"]
    shape = param["shape"]
    coords = []
    rem = flat.clone()
    for d in reversed(shape):
        coords.append(rem % d)
        rem //= d
    coords.reverse()
    taken = torch.zeros(flat.numel(), dtype=torch.bool)
    out = []
    for s in shards:
        if not s["source"]:
            continue  # padding: fed by no source
        live, src_box, src_shape = s["box"], s["source_box"], s["source_shape"]
        inside = torch.ones(flat.numel(), dtype=torch.bool)
        for d, (lo, hi) in enumerate(live):
            inside &= (coords[d] >= lo) & (coords[d] < hi)
        # A shard the patch does not touch still gets its (empty) part: the patch of a
        # runtime parameter carries every change of it, so its other sources are unchanged.
        taken |= inside
        idx = torch.zeros(int(inside.sum()), dtype=torch.long)
        stride = 1
        for d in reversed(range(len(src_shape))):
            c = coords[d][inside] - live[d][0] + src_box[d][0]
            idx += c * stride
            stride *= src_shape[d]
        out.append((s["source"], idx, values[inside]))
    if not bool(taken.all()):
        raise Error("E_OUT_OF_RANGE", f"sparse patch of '{param['name']}': "
                    f"{int((~taken).sum())} index(es) in no shard of it")
    return out


class _Pipeline:
    """One writer thread behind the transport: at most `depth` received tensors wait for their
    write (each holds its buffer), so receiving the next one overlaps writing this one.
    Failures go to `on_error` (the first is kept); drain() waits for every submitted write."""

    def __init__(self, on_error: Callable[[BaseException], None], depth: int = 4) -> None:
        self._on_error = on_error
        self._slots = threading.BoundedSemaphore(depth)
        self._cv = threading.Condition()
        self._pending = 0
        self._jobs: List[Callable[[], Any]] = []
        self._thread: Optional[threading.Thread] = None

    def submit(self, job: Callable[[], Any]) -> None:
        self._slots.acquire()
        with self._cv:
            self._jobs.append(job)
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wtx-writer",
                                                daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def drain(self) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self._pending == 0)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._jobs))
                job = self._jobs.pop(0)
            try:
                job()
            except BaseException as e:  # recorded; the update fails at its end
                self._on_error(e)
            finally:
                self._slots.release()
                with self._cv:
                    self._pending -= 1
                    self._cv.notify_all()


register_inner("torch_broadcast", TorchBroadcastEngine)
