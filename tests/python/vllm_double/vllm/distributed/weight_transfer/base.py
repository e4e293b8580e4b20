"""Double of vllm/distributed/weight_transfer/base.py, latest mainline (find_string id
57510213075, matching docs.vllm.ai training/weight_transfer/base of 2026-09-23).

WeightTransferEngine: built positionally (config, vllm_config, device, model) by the factory;
keeps the default model as the target and set/reset_weight_update_target swap it (draft
updates); parse_*_info turn a TypeError of the info dataclass into
ValueError("Invalid init_info for <Class>: ..."); update_weights is concrete: parse, then
receive_weights, then a device synchronize. Trainer side: TrainerInitInfo (backend ClassVar,
kw-only rank), VLLMWeightSyncClient (protocol), TrainerWeightTransferEngine.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Generic, List, Optional, TypeVar, Union

import torch

TInitInfo = TypeVar("TInitInfo")
TUpdateInfo = TypeVar("TUpdateInfo")
WeightTransferUpdatePayload = Union[Dict[str, Any], List[Dict[str, Any]]]


@dataclass
class WeightTransferInitInfo(ABC):  # noqa: B024
    pass


@dataclass
class WeightTransferUpdateInfo(ABC):  # noqa: B024
    pass


@dataclass
class WeightTransferInitRequest:
    init_info: Dict[str, Any] = field(default_factory=dict)


@dataclass
class WeightTransferUpdateRequest:
    update_info: Any = field(default_factory=dict)  # WeightTransferUpdatePayload


class WeightTransferEngine(ABC, Generic[TInitInfo, TUpdateInfo]):
    init_info_cls: type
    update_info_cls: type
    supports_draft_weight_update: bool = True
    defers_processing: bool = False

    def __init__(self, config: Any, vllm_config: Any, device: Any,
                 model: torch.nn.Module) -> None:
        self.config = config
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.model_config = vllm_config.model_config
        self.device = device
        self.model = model
        self._default_model_config = self.model_config
        self._default_model = model

    def set_weight_update_target(self, model: torch.nn.Module, model_config: Any) -> None:
        self.model = model
        self.model_config = model_config

    def reset_weight_update_target(self) -> None:
        self.model = self._default_model
        self.model_config = self._default_model_config

    def parse_init_info(self, init_dict: Dict[str, Any]) -> Any:
        try:
            return self.init_info_cls(**init_dict)
        except TypeError as e:
            raise ValueError(f"Invalid init_info for {self.__class__.__name__}: {e}") from e

    def parse_update_info(self, update_dict: Dict[str, Any]) -> Any:
        try:
            return self.update_info_cls(**update_dict)
        except TypeError as e:
            raise ValueError(f"Invalid update_info for {self.__class__.__name__}: {e}") from e

    @abstractmethod
    def init_transfer_engine(self, init_info: Any) -> None:
        raise NotImplementedError

    @abstractmethod
    def start_weight_update(self) -> None:
        raise NotImplementedError

    @abstractmethod
    def finish_weight_update(self) -> None:
        raise NotImplementedError

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        typed = self.parse_update_info(update_info)
        self.receive_weights(typed)
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def drain_pending(self) -> None:
        pass

    @abstractmethod
    def receive_weights(self, update_info: Any) -> None:
        raise NotImplementedError

    @abstractmethod
    def shutdown(self) -> None:
        raise NotImplementedError


# ------------------------------------------------------------------------------ trainer side

@dataclass(frozen=True)
class ParamMeta:
    name: str
    dtype: torch.dtype
    shape: tuple


class WeightSource(ABC):
    """What a trainer engine sends: metadata() first, then (name, tensor) in that order."""

    @abstractmethod
    def metadata(self) -> List[ParamMeta]:
        raise NotImplementedError

    @abstractmethod
    def __iter__(self) -> Any:
        raise NotImplementedError


@dataclass
class TrainerInitInfo:
    backend: ClassVar[str]
    rank: int = field(default=0, kw_only=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.__dict__.get("backend", getattr(cls, "backend", None)), str):
            raise TypeError(f"{cls.__name__} must set a class-level `backend` string (the "
                            "WeightTransferTrainerFactory registry key).")

    @property
    def is_sender(self) -> bool:
        return self.rank == 0


class VLLMWeightSyncClient:
    """Protocol (typing.Protocol in vLLM): what a trainer engine calls on the engine side."""

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None: ...
    def start_weight_update(self) -> None: ...
    def update_weights(self, update_info: WeightTransferUpdatePayload) -> None: ...
    def finish_weight_update(self, weight_version: Optional[str] = None) -> None: ...


class TrainerWeightTransferEngine(ABC):
    init_info_cls: type

    def __init__(self, *, client: Any, source: Any = None, is_sender: bool = True) -> None:
        self.client = client
        self.source = source
        self.is_sender = is_sender

    @classmethod
    @abstractmethod
    def trainer_init(cls, init_info: Any, *, client: Any, source: Any = None) -> Any:
        raise NotImplementedError

    @abstractmethod
    def send_weights(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        pass
