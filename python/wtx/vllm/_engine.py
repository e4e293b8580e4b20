"""wtx as a vLLM weight-transfer backend: every update a transaction over the TP group.

vLLM (about v0.25 on) loads weight-transfer engines by name from `WeightTransferEngineFactory`
(`--weight-transfer-config '{"backend": "wtx"}'`) and drives them through four phases on every
worker: `init_transfer_engine(init_info)`, `start_weight_update()`, `update_weights(update_info)`
(one or more times; it parses the dict and calls `receive_weights`), `finish_weight_update()`;
`shutdown()` at the end; the trainer calls the static `trainer_send_weights(iterator,
trainer_args)`. `WtxWeightTransferEngine` implements that contract around an *inner* engine
(vLLM's "nccl", "ipc", "sparse_nccl", or any registered name) that moves the bytes:

* init: the inner engine is built and initialized; this rank's wtx participant opens over the
  model itself (identity checked at every phase), and 2PC joins the TP process group
  (`wtx.torch_dist.Group`; its rank 0 runs the coordinator);
* start: a transaction left open by a failed update is aborted (collective), and the next
  `update_weights` begins the new one on every TP rank, with the tx id and kind of its
  update_info (`update_info["wtx"]`: tx, kind, base, modules, sources, rollback);
* receive: the inner engine receives; every (name, tensor) it would load goes through wtx
  instead: written by source name (`write_source`: TP slices, fused q/k/v and gate/up parts) or,
  with `load: "load_weights"`, loaded by the model's own `load_weights` bracketed by
  reserve/landed of exactly the shards that name feeds (quantized and packed loaders keep
  working; coverage stays element-exact). `(name, (indices, values))` items are sparse patches;
* finish: the model's post-load processing and the refreshes of stale derived state run, then
  prepare and the all-ranks commit; `weight_version` is the committed version hash. A rank
  that failed anywhere in the update makes every rank abort (the failure flags are exchanged
  first) and raises `wtx.Aborted`; the rank does not serve until a full update commits.

The trainer's `trainer_send_weights` computes the version the update must commit from the
weights it sends and the engine ranks' manifests (`trainer_args["manifests"]`) and sends it
after the weights as one more tensor (`EXPECTED_VERSION_NAME`, which `trainer_update_info`
lists): a commit of anything else aborts with E_VERSION_MISMATCH.

Contracts accepted: the newest engine constructor `(config, vllm_config, device, model)` and
the older `(config, parallel_config)`; `receive_weights(update_info)` (the engine loads into
its model) and the older `receive_weights(update_info, load_weights)`. Importing this module
does not import vLLM; without it the engine subclasses `object` and works against any object of
the same shape.
"""

import dataclasses
import functools
import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist

from .. import (Aborted, Error, Manifest, Participant, _fill_reserved, _whole_view,
               expected_version)
from ..torch_dist import Group, abort_quietly, decide_update, failure_reason, gather_from_ranks
from ._broadcast import TorchBroadcastEngine
from ._extension import LLAMA_STACKED_PARAMS_MAPPING, manifest_from_module

EXPECTED_VERSION_NAME = "__wtx__.expected_version"
_VERSION_BYTES = 128
_LOAD_MODES = ("write_source", "load_weights")
_KINDS = ("full", "partial", "delta")
_WTX_UPDATE_KEYS = ("tx", "kind", "base", "modules", "sources", "rollback", "verify")


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

@dataclass
class WtxInitInfo:
    """init_info of the "wtx" backend (a dict through vLLM's API; unknown keys raise).

    journal_dir: this rank's journal ("{rank}" is replaced by the TP rank).
    coordinator_journal: the coordinator's journal, used on TP rank 0.
    inner / inner_init_info: the transport that moves the bytes and its own init_info (the
      inner name may also come from the weight-transfer config's "inner").
    load: "write_source" (default) or "load_weights" (the model's loader, bracketed).
    manifest: this rank's manifest as JSON text; default: built from the model
      (manifest_from_module with `stacked_params_mapping`).
    threads: the participant's data-path threads (copy and hash; 0: one per core).
    """

    journal_dir: str
    coordinator_journal: Optional[str] = None
    inner: Optional[str] = None
    inner_init_info: Dict[str, Any] = field(default_factory=dict)
    load: str = "write_source"
    manifest: Optional[str] = None
    stacked_params_mapping: Optional[List[Any]] = None
    kernel_identity: str = ""
    prepare_timeout: float = 30.0
    threads: int = 0  # the participant's data-path threads (0: one per core)

    def __post_init__(self) -> None:
        if not isinstance(self.journal_dir, str) or not self.journal_dir:
            raise Error("INVALID_ARGUMENT", "init_info.journal_dir: expected a directory path, "
                        f"got {self.journal_dir!r}")
        if self.load not in _LOAD_MODES:
            raise Error("INVALID_ARGUMENT", f"init_info.load: expected one of {_LOAD_MODES}, "
                        f"got {self.load!r}")
        if not isinstance(self.inner_init_info, dict):
            raise Error("INVALID_ARGUMENT", "init_info.inner_init_info: expected a dict, got "
                        f"{type(self.inner_init_info).__name__}")


@dataclass
class WtxUpdateInfo:
    """update_info of the "wtx" backend: the inner transport's own fields (names, dtype_names,
    shapes, ...) plus `wtx`: {tx, kind, base, modules, sources, rollback, verify}."""

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
        shapes.append([_VERSION_BYTES])
    info = {"names": names, "dtype_names": dtypes, "shapes": shapes}
    info["wtx"] = dict(wtx_fields, tx=tx, kind=kind)
    return info


def expected_version_tensor(version: str) -> torch.Tensor:
    """The tensor that carries `version` after the weights (EXPECTED_VERSION_NAME): its bytes,
    zero-padded to a fixed length (uint8)."""
    raw = version.encode()
    if len(raw) > _VERSION_BYTES:
        raise Error("INVALID_ARGUMENT", f"expected version longer than {_VERSION_BYTES} bytes")
    out = torch.zeros(_VERSION_BYTES, dtype=torch.uint8)
    out[:len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    return out


def _version_of(tensor: torch.Tensor) -> str:
    raw = bytes(tensor.to("cpu", torch.uint8).flatten().tolist())
    return raw.rstrip(b"\0").decode(errors="replace")


class _LoadThroughWtx(torch.nn.Module):
    """The model an inner engine of the newest contract loads into: its load_weights routes
    every (name, tensor) through the wtx engine."""

    def __init__(self, engine: "WtxWeightTransferEngine") -> None:
        super().__init__()
        object.__setattr__(self, "_wtx_engine", engine)  # not a submodule

    def load_weights(self, weights: Iterable[Tuple[str, Any]]) -> set:
        engine: WtxWeightTransferEngine = self.__dict__["_wtx_engine"]
        return engine._load(weights)


# ------------------------------------------------------------- ending an update

def default_tx(prefix: str, participant: Participant, n: int) -> str:
    """A transaction id every TP rank derives alike: the committed version and a count."""
    return "%s-%s-%d" % (prefix, (participant.status().get("version") or "none")[:16], n)


class _UpdateState:
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


# ---------------------------------------------------------------------------------- engine

class WtxWeightTransferEngine(_UpdateState, _vllm_engine_base()):  # type: ignore[misc]
    """vLLM weight-transfer backend "wtx" (module docstring; docs/vllm.md).

    Attributes a worker may set after construction: `process_group` (the TP group for 2PC;
    default: vLLM's TP group, else the default group), `post_load` (callable(model): the
    model's post-load processing, run at finish before the commit) and `refresh_derived`
    (callable(names): recomputes stale derived state). `weight_version` is the version the
    last update committed; `last_outcome` its outcome dict.
    """

    init_info_cls = WtxInitInfo
    update_info_cls = WtxUpdateInfo
    _how_to_init = "init_transfer_engine"

    def __init__(self, config: Any, *args: Any) -> None:
        # Newest vLLM: (config, vllm_config, device, model); older: (config, parallel_config).
        self.config = config
        self.vllm_config = args[0] if args else None
        self.device = args[1] if len(args) > 1 else None
        self.model = args[2] if len(args) > 2 else None
        self.parallel_config = getattr(self.vllm_config, "parallel_config", self.vllm_config)
        self.process_group: Any = None
        self.post_load: Optional[Callable[[Any], None]] = None
        self.refresh_derived: Optional[Callable[[List[str]], None]] = None
        self.weight_version: Optional[str] = None
        self.last_outcome: Optional[Dict[str, Any]] = None
        self.participant: Optional[Participant] = None
        self.group: Optional[Group] = None
        self._inner: Any = None
        self._inner_takes_loader = False
        self._init: Optional[WtxInitInfo] = None
        self._tx: Optional[str] = None
        self._failure: Optional[str] = None
        self._expected: Optional[str] = None
        self._updates = 0
        self._writes = _Pipeline(self._fail)
        self._receiver = InPlaceReceiver()  # full sources received into live memory
        self._kind = "full"

    # -- parsing ---------------------------------------------------------------------------

    def parse_init_info(self, init_dict: Dict[str, Any]) -> WtxInitInfo:
        """init_info dict -> WtxInitInfo; a missing or unknown key raises wtx.Error naming it."""
        if isinstance(init_dict, WtxInitInfo):
            return init_dict
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

    def parse_update_info(self, update_dict: Dict[str, Any]) -> WtxUpdateInfo:
        """update_info dict -> WtxUpdateInfo: `wtx` checked here, the rest parsed by the inner
        engine. A malformed field raises wtx.Error naming it."""
        if isinstance(update_dict, WtxUpdateInfo):
            return update_dict
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
            raise Error("INVALID_ARGUMENT", f"update_info.wtx.kind: expected one of {_KINDS}, "
                        f"got {w['kind']!r}")
        if "tx" in w and (not isinstance(w["tx"], str) or not w["tx"]):
            raise Error("INVALID_ARGUMENT", f"update_info.wtx.tx: expected a non-empty string, "
                        f"got {w['tx']!r}")
        try:
            parsed = inner.parse_update_info(rest) if hasattr(inner, "parse_update_info") else rest
        except Error:
            raise
        except Exception as e:  # the inner engine's own validation (ValueError, TypeError)
            raise Error("INVALID_ARGUMENT", f"update_info: {e}") from e
        return WtxUpdateInfo(inner=parsed, wtx=w)

    # -- the four phases -------------------------------------------------------------------

    def init_transfer_engine(self, init_info: Any) -> None:
        """Builds and initializes the inner transport, opens this rank's participant over the
        model and joins 2PC over the TP group (collective over it; recovers an in-doubt rank).
        Raises wtx.Error naming what was wrong; on failure nothing stays open."""
        info = self.parse_init_info(init_info)
        if self.participant is not None:
            raise Error("INVALID_ARGUMENT", "init_transfer_engine: already initialized "
                        "(shutdown() first)")
        inner_name = info.inner or getattr(self.config, "inner", None)
        if inner_name is None and isinstance(self.config, dict):
            inner_name = self.config.get("inner")
        if not inner_name:
            raise Error("INVALID_ARGUMENT", "init_info.inner: missing (name the transport that "
                        "moves the bytes: nccl, ipc, sparse_nccl or a registered name)")
        if inner_name == "wtx":
            raise Error("INVALID_ARGUMENT", "init_info.inner: 'wtx' cannot wrap itself")
        if self.model is None:
            raise Error("INVALID_ARGUMENT", "init_transfer_engine: the engine has no model "
                        "(older vLLM: set engine.model to the worker's model first)")
        group = self.process_group if self.process_group is not None else _vllm_tp_group()
        tp_size, tp_rank = dist.get_world_size(group), dist.get_rank(group)
        cls = _inner_class(inner_name)
        inner = _construct_inner(cls, self.config, self.vllm_config, self.parallel_config,
                                 self.device, _LoadThroughWtx(self))
        if hasattr(inner, "parse_init_info"):
            try:
                inner_init = inner.parse_init_info(info.inner_init_info)
            except Exception as e:
                raise Error("INVALID_ARGUMENT", f"init_info.inner_init_info: {e}") from e
        else:
            inner_init = info.inner_init_info
        if info.manifest is not None:
            manifest = Manifest.from_json(info.manifest)
        else:
            mapping = (info.stacked_params_mapping if info.stacked_params_mapping is not None
                       else getattr(self.model, "stacked_params_mapping",
                                    LLAMA_STACKED_PARAMS_MAPPING))
            manifest = manifest_from_module(self.model, mapping, tp_size, tp_rank)
        participant = Participant.open(info.journal_dir.replace("{rank}", str(tp_rank)),
                                       manifest, rank=tp_rank, tensors=self.model,
                                       kernel_identity=info.kernel_identity,
                                       threads=info.threads)
        try:
            self.group = Group(participant, info.coordinator_journal, group=group,
                               prepare_timeout=info.prepare_timeout)
            inner.init_transfer_engine(inner_init)
        except BaseException:
            if self.group is not None:
                self.group.close()
                self.group = None
            participant.close()
            raise
        self.participant = participant
        self._inner = inner
        self._inner_takes_loader = _takes_load_weights(inner.receive_weights)
        self._init = info
        if info.load == "write_source" and hasattr(inner, "destination"):
            inner.destination = self._destination  # full tensors land in place

    def start_weight_update(self, *args: Any, **kwargs: Any) -> None:
        """Prepares for an update (collective): a transaction a failed update left open is
        aborted on every rank; storage the engine rebound since the last update is adopted
        (and, for the partial or delta update that may follow, proved by the next begin's
        verify). The transaction itself begins at the first update_weights."""
        self._require_init("start_weight_update")
        if hasattr(self._inner, "start_weight_update"):
            self._inner.start_weight_update(*args, **kwargs)
        if self._tx is not None:
            tx, self._tx = self._tx, None
            abort_quietly(self._g, tx)
        self._failure = None
        self._expected = None

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        """One chunk: parse (wtx.Error naming a malformed field), begin on the first chunk,
        receive through the inner transport. Any exception marks the update failed (it will
        abort at finish) and is raised."""
        try:
            parsed = self.parse_update_info(update_info)
            self.receive_weights(parsed)
        except BaseException as e:
            self._fail(e)
            raise
        synchronize = getattr(getattr(torch, "accelerator", None), "synchronize", None)
        if synchronize is not None and torch.cuda.is_available():
            synchronize()

    def receive_weights(self, update_info: WtxUpdateInfo,
                        load_weights: Optional[Callable[..., Any]] = None) -> None:
        """Receives one chunk through the inner engine; every tensor goes through wtx (the
        `load_weights` of an older caller is not used: wtx writes, or brackets the model's own
        loader)."""
        self._require_init("receive_weights")
        try:
            self._begin_if_needed(update_info.wtx)
            try:
                if self._inner_takes_loader:
                    self._inner.receive_weights(update_info.inner, self._load)
                else:
                    self._inner.receive_weights(update_info.inner)
            finally:
                self._writes.drain()  # every write handed off is done (or failed) first
            if self._failure is not None:
                raise Error("E_UPDATE_FAILED", f"receive_weights: {self._failure}")
        except BaseException as e:
            self._fail(e)
            raise

    def finish_weight_update(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        """Post-load processing, derived refreshes, then the all-ranks commit (collective).
        Returns the outcome dict; `weight_version` is the committed version. Raises
        wtx.Aborted when any rank failed or the commit aborted (E_VERSION_MISMATCH, missing
        shards, moved storage, ...): no rank serves the update."""
        self._require_init("finish_weight_update")
        if hasattr(self._inner, "finish_weight_update"):
            try:
                self._inner.finish_weight_update(*args, **kwargs)
            except BaseException as e:
                self._fail(e)
        tx = self._tx
        if tx is None and self._failure is None:
            raise Error("E_NO_TX", "finish_weight_update: no update received since "
                        "start_weight_update (update_weights begins it)")
        if self._failure is None:
            try:
                if self.post_load is not None:
                    self.post_load(self.model)
                stale = self._p.status()["stale_derived"]
                if stale and self.refresh_derived is not None:
                    self.refresh_derived(list(stale))
                for name in stale if self.refresh_derived is not None else ():
                    self._p.refresh(name)
            except BaseException as e:
                self._fail(e)
        self._tx = None
        if tx is None:  # failed before the begin: nothing to abort here
            failures = gather_from_ranks(self._failure, self._g)
            raise Error("E_UPDATE_FAILED",
                        "the update failed before it began: " + failure_reason(failures))
        try:
            out = decide_update(self._g, tx, self._failure, self._expected)
        except Aborted as e:
            self.last_outcome = e.decision
            raise
        self.last_outcome = out
        self.weight_version = out.get("version")
        return out

    def shutdown(self) -> None:
        """Aborts an open transaction if it can, then closes the coordinator, the participant
        and the inner engine. Idempotent."""
        group, participant, inner = self.group, self.participant, self._inner
        self.group, self.participant, self._inner, self._tx = None, None, None, None
        if inner is not None and hasattr(inner, "shutdown"):
            inner.shutdown()
        if group is not None:
            group.close()
        if participant is not None:
            participant.close()

    @staticmethod
    def trainer_send_weights(iterator: Iterator[Tuple[str, torch.Tensor]],
                             trainer_args: Dict[str, Any]) -> Optional[str]:
        """Sends weights through the inner transport's trainer side (trainer_args["inner"]
        names it, ["inner_args"] are its own trainer_args). With ["manifests"] (every engine
        rank's wtx.Manifest or manifest JSON) the version a full update of exactly these
        weights must commit is computed and sent after them (list it with
        trainer_update_info(expect_version=True)); returned."""
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
        ms = [m if isinstance(m, Manifest) else Manifest.from_json(m) for m in manifests]
        items = list(iterator)
        # The hash of every byte runs beside the send (expected_version releases the GIL); the
        # version follows the weights once both are done.
        result: Dict[str, Any] = {}

        def compute() -> None:
            try:
                result["version"] = expected_version(
                    ms, {n: t.detach().to("cpu").contiguous() for n, t in items})["version"]
            except BaseException as e:  # raised below, after the weights went out
                result["error"] = e

        hashing = threading.Thread(target=compute, name="wtx-expected-version")
        hashing.start()
        try:
            send(iter(items), inner_args)
        finally:
            hashing.join()
        version = result.get("version", "")
        # The engine ranks wait for the version tensor: it goes out even when the hash failed
        # (empty: their commit then refuses the update), and the failure is raised here.
        send(iter([(EXPECTED_VERSION_NAME, expected_version_tensor(version))]), inner_args)
        if "error" in result:
            raise result["error"]
        return version

    # -- internals -------------------------------------------------------------------------

    def _require_init(self, call: str) -> Tuple[Any, Participant]:
        if self.participant is None or self._inner is None:
            raise Error("INVALID_ARGUMENT", f"{call}: the wtx engine is not initialized "
                        "(init_transfer_engine)")
        return self._inner, self.participant

    def _fail(self, e: BaseException) -> None:
        if self._failure is None:
            self._failure = f"{type(e).__name__}: {e}"

    def _begin_if_needed(self, w: Dict[str, Any]) -> None:
        if self._tx is not None:
            if "tx" in w and w["tx"] != self._tx:
                raise Error("INVALID_ARGUMENT", f"update_info.wtx.tx: '{w['tx']}' while "
                            f"'{self._tx}' is being received (finish_weight_update first)")
            return
        if self._failure is not None:
            raise Error("E_UPDATE_FAILED", f"this update already failed: {self._failure}")
        self._updates += 1
        tx = w.get("tx") or default_tx("vllm", self._p, self._updates)
        self._g.begin(tx, kind=w.get("kind", "full"), base=w.get("base"),
                         modules=w.get("modules"), sources=w.get("sources"),
                         rollback=bool(w.get("rollback", False)),
                         verify=w.get("verify", "touched"))
        self._tx = tx
        self._kind = w.get("kind", "full")
        self._receiver.reset()

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
        transport offers a destination hook (torch_broadcast); False: written by name
        (received into the transport's buffer, then copied and hashed in one pass)."""
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

    def _load(self, weights: Iterable[Tuple[str, Any]]) -> set:
        """What the inner engine loads: each item through wtx. Returns the names loaded.

        A failure (an unknown name, a wrong shape or dtype, the model's loader raising) is
        recorded and the rest of the chunk is still taken from the transport but not written,
        so that a collective transport (a broadcast) completes for the other ranks;
        receive_weights then raises it."""
        p = self._p
        mode = self._init.load if self._init else "write_source"
        loaded = set()
        for name, value in weights:
            if name == EXPECTED_VERSION_NAME:
                self._expected = _version_of(value)
                if not self._expected:
                    self._fail(Error("E_VERSION_MISMATCH", "the trainer sent no expected "
                                     "version (its computation failed)"))
                continue
            if self._failure is not None:
                continue  # drained, not written
            if self._receiver.owns(name):
                try:
                    self._receiver.land(p, name, value)
                except BaseException as e:
                    self._fail(e)
                    continue
            elif mode == "write_source" and not isinstance(value, (tuple, list)):
                # Written on the writer thread while the transport receives the next tensor
                # (write_source releases the GIL); its failure is recorded there.
                self._writes.submit(functools.partial(p.write_source, name, value))
            else:
                try:
                    load_one(p, self.model, mode, name, value)
                except BaseException as e:
                    self._fail(e)
                    continue
            loaded.add(name)
        return loaded


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


def load_one(p: Participant, model: Any, mode: str, name: str, value: Any) -> None:
    """One received item through wtx: a sparse patch `(indices, values)` (flat indices into the
    source), else the full source tensor written by name ("write_source") or loaded by the
    model's own `load_weights` between reserve_source and landed_source ("load_weights")."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        indices, values = value
        p.patch(name, indices, values)
    elif mode == "write_source":
        p.write_source(name, value)
    elif p.reserve_source(name):
        model.load_weights([(name, value)])
        p.landed_source(name)


def _vllm_tp_group() -> Any:
    try:
        from vllm.distributed.parallel_state import get_tp_group
        return get_tp_group().cpu_group
    except Exception:
        return None  # the default group


register_inner("torch_broadcast", TorchBroadcastEngine)


def register(name: str = "wtx") -> None:
    """Registers WtxWeightTransferEngine with vLLM's WeightTransferEngineFactory under `name`
    (lazily, by module path). Idempotent: a second call, or a name that already loads this
    class, does nothing; a name taken by another engine raises wtx.Error INVALID_ARGUMENT.
    Raises wtx.Error E_UNAVAILABLE when vLLM is not importable."""
    factory = _vllm_factory()
    if factory is None:
        raise Error("E_UNAVAILABLE", "wtx.vllm.register: vLLM's weight transfer "
                    "(vllm.distributed.weight_transfer.factory) is not importable")
    registry = getattr(factory, "_registry", {})
    if name in registry:
        existing = registry[name]()
        if existing is WtxWeightTransferEngine or (
                existing.__module__.startswith("wtx.vllm") and
                existing.__qualname__ == WtxWeightTransferEngine.__qualname__):
            return
        raise Error("INVALID_ARGUMENT", f"wtx.vllm.register: '{name}' is already vLLM's "
                    f"{existing.__module__}.{existing.__qualname__}")
    factory.register_engine(name, "wtx.vllm", "WtxWeightTransferEngine")
