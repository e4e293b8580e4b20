"""Double of vllm/distributed/weight_transfer/factory.py (vllm-project/vllm 047c993c; trainer
registrations find_string id 54625757849; trainer_init by init_info.backend as in the latest
docs). Registration is lazy (module path + class name), not idempotent (a second
registration of a name raises ValueError), and has no unregister; create_engine builds the
engine positionally (config, vllm_config, device, model)."""

import importlib
from typing import Any, Callable, Dict, Optional


def _loader(module_path_or_cls: Any, class_name: Optional[str]) -> Callable[[], Any]:
    if isinstance(module_path_or_cls, str):
        if class_name is None:
            raise ValueError("class_name is required when registering with module path")
        path, name = module_path_or_cls, class_name
        return lambda: getattr(importlib.import_module(path), name)
    cls = module_path_or_cls
    return lambda: cls


class _Registry:
    """register_engine of both factories (each has its own registry and message)."""

    _registry: Dict[str, Callable[[], Any]]
    _what = "Weight transfer engine"

    @classmethod
    def register_engine(cls, name: str, module_path_or_cls: Any,
                        class_name: Optional[str] = None) -> None:
        if name in cls._registry:
            raise ValueError(f"{cls._what} '{name}' is already registered.")
        cls._registry[name] = _loader(module_path_or_cls, class_name)


class WeightTransferEngineFactory(_Registry):
    _registry: Dict[str, Callable[[], Any]] = {}

    @classmethod
    def create_engine(cls, config: Any, vllm_config: Any, device: Any, model: Any) -> Any:
        backend = config.backend
        if backend not in cls._registry:
            available = list(cls._registry.keys())
            raise ValueError(f"Invalid weight transfer backend: {backend}. "
                             f"Available engines: {available}")
        engine_cls = cls._registry[backend]()
        return engine_cls(config, vllm_config, device, model)


class WeightTransferTrainerFactory(_Registry):
    _registry: Dict[str, Callable[[], Any]] = {}
    _what = "Weight transfer trainer engine"

    @classmethod
    def trainer_init(cls, init_info: Any, *, client: Any, source: Any = None) -> Any:
        backend = type(init_info).backend
        if backend not in cls._registry:
            available = list(cls._registry.keys())
            raise ValueError(f"Invalid weight transfer backend: {backend}. "
                             f"Available trainer engines: {available}")
        return cls._registry[backend]().trainer_init(init_info, client=client, source=source)


WeightTransferEngineFactory.register_engine(
    "nccl", "vllm.distributed.weight_transfer.nccl_engine", "NCCLWeightTransferEngine")
WeightTransferEngineFactory.register_engine(
    "sparse_nccl", "vllm.distributed.weight_transfer.sparse_nccl_engine",
    "SparseNCCLWeightTransferEngine")
WeightTransferTrainerFactory.register_engine(
    "nccl", "vllm.distributed.weight_transfer.nccl_engine", "NCCLTrainerWeightTransferEngine")
