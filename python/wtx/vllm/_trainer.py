"""The trainer side of wtx for vLLM main: a trainer engine registered as "wtx" with vLLM's
WeightTransferTrainerFactory, wrapping the inner transport's own trainer engine (its init info,
its send) as vLLM's trainer engines are driven:

    info = WtxTrainerInitInfo(inner="nccl", inner_init_info={...NCCLTrainerInitInfo fields...},
                              engine_init_info={"journal_dir": ..., "coordinator_journal": ...},
                              manifests=[...], rank=0)
    engine = WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)
    engine.send_weights()        # start, update_weights, finish through `client`

`client` is any VLLMWeightSyncClient (vLLM's HTTP or Ray client). The wrapper turns the inner
engine's init_weight_transfer_engine into wtx's init_info (the inner's own init info inside
it), labels every update with a transaction id every engine rank shares, and, given the engine
ranks' manifests, computes the version the update must commit as it sends (each piece hashed
on a thread as the inner engine takes it from the source, _expect.py) and hands it to the
engine ranks before finish: a commit of anything else aborts with E_VERSION_MISMATCH. The
expected version is the checkpoint version (the bytes as sent); where post-load processing serves
another form, the manifests say so per parameter (`served`): its checkpoint bytes are hashed as
they pass to the loader, and the served digest is what verify checks (docs/manifest.md).
"""

import uuid
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, ClassVar, Dict, List, Optional

from .. import Error
from .._expect import HashingSource, SendHasher


def _vllm_base(name: str) -> Any:
    try:
        from vllm.distributed.weight_transfer import base
        return getattr(base, name)
    except Exception:
        return object


def _trainer_registry() -> Dict[str, Any]:
    try:
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
        return getattr(WeightTransferTrainerFactory, "_registry", {})
    except Exception:
        return {}


_InitBase = _vllm_base("TrainerInitInfo")


@dataclass
class WtxTrainerInitInfo(_InitBase):  # type: ignore[misc, valid-type]
    """inner: the inner trainer engine's name in vLLM's WeightTransferTrainerFactory ("nccl",
    "ipc"); inner_init_info: its init info's fields (rank excluded: this one's is used);
    engine_init_info: the wtx engine ranks' init_info (journal_dir, coordinator_journal,
    serving_gate, ...; `inner` and `inner_init_info` are filled in); manifests: every engine
    rank's manifest (JSON text or wtx.Manifest), for the expected version; tx_prefix: update
    ids are "<prefix>-<trainer session>-<n>"."""

    backend: ClassVar[str] = "wtx"
    inner: str = "nccl"
    inner_init_info: Dict[str, Any] = field(default_factory=dict)
    engine_init_info: Dict[str, Any] = field(default_factory=dict)
    manifests: Optional[List[Any]] = None
    tx_prefix: str = "step"
    if _InitBase is object:
        rank: int = field(default=0, kw_only=True)

        @property
        def is_sender(self) -> bool:
            return self.rank == 0


class _WtxClient:
    """The VLLMWeightSyncClient the inner trainer engine talks to: wtx's fields added."""

    def __init__(self, client: Any, info: WtxTrainerInitInfo) -> None:
        self.client = client
        self.info = info
        self.tx: Optional[str] = None
        self.count = 0
        # A trainer engine (a trainer process, a restart) of its own: ids never repeat one an
        # engine rank already decided.
        self.session = uuid.uuid4().hex[:12]
        self.expected: Optional[str] = None

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        wtx_info = dict(self.info.engine_init_info, inner=self.info.inner,
                        inner_init_info=init_info)
        self.client.init_weight_transfer_engine(wtx_info)

    def start_weight_update(self) -> None:
        self.count += 1
        self.tx = f"{self.info.tx_prefix}-{self.session}-{self.count}"
        self.client.start_weight_update()

    def _label(self, info: Any, **extra: Any) -> Any:
        w = dict({"tx": self.tx}, **extra)
        if isinstance(info, list):
            return [dict(i, wtx=w) for i in info]
        return dict(info, wtx=w)

    def update_weights(self, update_info: Any) -> None:
        self.client.update_weights(self._label(update_info))

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        if self.expected is not None:
            # One more round trip with no tensors: the version the update must commit.
            empty: Dict[str, Any] = {"names": [], "dtype_names": [], "shapes": []}
            self.client.update_weights(self._label(empty, expect_version=self.expected))
        if weight_version is None:
            self.client.finish_weight_update()
        else:
            self.client.finish_weight_update(weight_version)


_EngineBase = _vllm_base("TrainerWeightTransferEngine")


class WtxTrainerWeightTransferEngine(_EngineBase):  # type: ignore[misc, valid-type]
    """vLLM trainer engine "wtx" (module docstring)."""

    init_info_cls = WtxTrainerInitInfo

    def __init__(self, *, client: Any, source: Any = None, is_sender: bool = True) -> None:
        if _EngineBase is not object:
            super().__init__(client=client, source=source, is_sender=is_sender)
        else:
            self.client, self.source, self.is_sender = client, source, is_sender
        self.inner: Any = None
        self.wrapped: Optional[_WtxClient] = None
        self.info: Optional[WtxTrainerInitInfo] = None
        self.hashing_source: Optional[HashingSource] = None

    @classmethod
    def trainer_init(cls, init_info: WtxTrainerInitInfo, *, client: Any,
                     source: Any = None) -> "WtxTrainerWeightTransferEngine":
        if not isinstance(init_info, WtxTrainerInitInfo):
            raise Error("INVALID_ARGUMENT", "trainer_init: expected a WtxTrainerInitInfo, got "
                        f"{type(init_info).__name__}")
        registry = _trainer_registry()
        if init_info.inner == "wtx" or init_info.inner not in registry:
            raise Error("INVALID_ARGUMENT", f"WtxTrainerInitInfo.inner: '{init_info.inner}' is "
                        f"not a trainer engine of vLLM (registered: "
                        f"{sorted(k for k in registry if k != 'wtx')})")
        inner_cls = registry[init_info.inner]()
        try:
            inner_info = inner_cls.init_info_cls(**init_info.inner_init_info,
                                                 rank=init_info.rank)
        except TypeError as e:
            raise Error("INVALID_ARGUMENT", f"WtxTrainerInitInfo.inner_init_info: {e}") from None
        engine = cls(client=client, source=source, is_sender=init_info.rank == 0)
        engine.info = init_info
        engine.wrapped = _WtxClient(client, init_info)
        # The inner iterates the source as it sends: each piece goes to the expected version's
        # hasher as it leaves (_expect.py).
        engine.hashing_source = HashingSource(source) if source is not None else None
        engine.inner = inner_cls.trainer_init(inner_info, client=engine.wrapped,
                                              source=engine.hashing_source)
        return engine

    def send_weights(self) -> None:
        """The inner engine's send (start, update_weights, finish through the wrapped client),
        with the expected version hashed as each piece leaves when the manifests are known."""
        assert self.wrapped is not None and self.info is not None, "built by trainer_init"
        source = self.hashing_source
        if not (self.is_sender and self.info.manifests is not None and source is not None):
            self.inner.send_weights()
            return None
        hasher = SendHasher(self.info.manifests)
        source.hasher = hasher
        finish = self.wrapped.finish_weight_update

        def finish_with_version(weight_version: Optional[str] = None) -> None:
            source.hasher = None  # type: ignore[union-attr]
            self.wrapped.expected = hasher.version()  # type: ignore[union-attr]
            finish(weight_version)

        self.wrapped.finish_weight_update = finish_with_version  # type: ignore[assignment]
        try:
            self.inner.send_weights()
        finally:
            source.hasher = None
            hasher.close()
            self.wrapped.expected = None
            del self.wrapped.finish_weight_update
        return None

    def shutdown(self) -> None:
        """Shuts the inner trainer engine down."""
        if self.inner is not None and hasattr(self.inner, "shutdown"):
            self.inner.shutdown()


def update_info_dict(info: Any) -> Dict[str, Any]:
    """A dataclass update info as the dict vLLM's clients send."""
    return asdict(info) if is_dataclass(info) else dict(info)
