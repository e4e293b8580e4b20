"""Double of vllm/distributed/weight_transfer/nccl_engine.py, the generation whose engine owns
start/finish (find_string id 56585172333; nccl_common.py at vllm-project/vllm 15a3fd47 and its
later NCCLTrainerInitInfo). NCCL is gloo here: `PyNcclCommunicator` over a
`StatelessProcessGroup` becomes a torch.distributed group of the trainer (rank 0 of it) and
the engine ranks, built by the test and found by `init_info.group_key` (tests only).

Worker side, as vLLM's: start_weight_update runs initialize_layerwise_reload(self.model);
receive_weights broadcasts each tensor from src 0 into a fresh buffer on self.device and hands
it to self.model.load_weights; finish_weight_update runs finalize_layerwise_reload(self.model,
self.model_config). The static trainer path is the stub that raises. Trainer side:
NCCLTrainerWeightTransferEngine.trainer_init (the sender calls
client.init_weight_transfer_engine with rank_offset 1 while it joins the group) and
send_weights (start, then ONE update_weights for every parameter concurrently with the
broadcast, then finish).
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Dict, List

import torch
import torch.distributed as dist

from vllm.distributed.weight_transfer.base import (TrainerInitInfo, TrainerWeightTransferEngine,
                                                   WeightTransferEngine,
                                                   WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)
from vllm.model_executor.model_loader.reload import (finalize_layerwise_reload,
                                                     initialize_layerwise_reload)

# Test-only: the process groups a StatelessProcessGroup.create(host, port, ...) would build.
GROUPS: Dict[str, Any] = {}


@dataclass
class NCCLWeightTransferInitInfo(WeightTransferInitInfo):
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    packed: bool = False


@dataclass
class NCCLWeightTransferUpdateInfo(WeightTransferUpdateInfo):
    names: List[str]
    dtype_names: List[str]
    shapes: List[List[int]]

    def __post_init__(self) -> None:
        if len(self.dtype_names) != len(self.names):
            raise ValueError("`dtype_names` should be of the same size as `names`: got "
                             f"{len(self.dtype_names)} and {len(self.names)}")
        if len(self.shapes) != len(self.names):
            raise ValueError("`shapes` should be of the same size as `names`: got "
                             f"{len(self.shapes)} and {len(self.names)}")


def _group_of(address: str, port: int) -> Any:
    return GROUPS[f"{address}:{port}"]


def _broadcast(t: torch.Tensor, group: Any) -> None:
    src = dist.get_global_rank(group, 0) if hasattr(dist, "get_global_rank") else 0
    dist.broadcast(t.view(torch.uint8), src=src, group=group)  # gloo: no bf16 collectives


class NCCLWeightTransferEngine(WeightTransferEngine):
    init_info_cls = NCCLWeightTransferInitInfo
    update_info_cls = NCCLWeightTransferUpdateInfo

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        super().__init__(config, vllm_config, device, model)
        self.model_update_group = None
        self.packed = False

    def init_transfer_engine(self, init_info: NCCLWeightTransferInitInfo) -> None:
        self.packed = init_info.packed
        self.model_update_group = _group_of(init_info.master_address, init_info.master_port)

    def start_weight_update(self) -> None:
        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        finalize_layerwise_reload(self.model, self.model_config)

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.model_update_group is None:
            raise RuntimeError("NCCL weight transfer not initialized. "
                               "Call init_transfer_engine() first.")
        for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names,
                                           update_info.shapes):
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name), device=self.device)
            _broadcast(weight, self.model_update_group)
            self.model.load_weights(weights=[(name, weight)])

    def shutdown(self) -> None:
        self.model_update_group = None

    @staticmethod
    def trainer_send_weights(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "The static NCCL trainer path has been replaced by NCCLTrainerWeightTransferEngine. "
            "Build it via WeightTransferTrainerFactory.trainer_init(NCCLTrainerInitInfo(...), "
            "client=..., source=...) and drive it with send_weights().")


@dataclass
class NCCLTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = "nccl"
    master_address: str = "127.0.0.1"
    master_port: int = 0
    world_size: int = 1
    packed: bool = False


class NCCLTrainerWeightTransferEngine(TrainerWeightTransferEngine):
    init_info_cls = NCCLTrainerInitInfo

    def __init__(self, *, client: Any, source: Any = None, is_sender: bool = True) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.model_update_group = None

    @classmethod
    def trainer_init(cls, init_info: NCCLTrainerInitInfo, *, client: Any,
                     source: Any = None) -> "NCCLTrainerWeightTransferEngine":
        if source is None:
            raise ValueError("NCCL trainer weight transfer requires a WeightSource.")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender)
        if not engine.is_sender:
            return engine
        worker_init_info = NCCLWeightTransferInitInfo(
            master_address=init_info.master_address, master_port=init_info.master_port,
            rank_offset=1, world_size=init_info.world_size, packed=init_info.packed)
        with ThreadPoolExecutor(max_workers=1) as exe:
            future = exe.submit(engine.client.init_weight_transfer_engine,
                                asdict(worker_init_info))
            engine.model_update_group = _group_of(init_info.master_address,
                                                  init_info.master_port)
            future.result()
        return engine

    def send_weights(self) -> None:
        meta = self.source.metadata()
        if not self.is_sender:
            for _ in self.source:
                pass
            return
        self.client.start_weight_update()
        update_info = NCCLWeightTransferUpdateInfo(
            names=[m.name for m in meta],
            dtype_names=[str(m.dtype).split(".")[-1] for m in meta],
            shapes=[list(m.shape) for m in meta])
        with ThreadPoolExecutor(max_workers=1) as exe:
            future = exe.submit(self.client.update_weights, asdict(update_info))
            for _, tensor in self.source:
                _broadcast(tensor.detach().contiguous(), self.model_update_group)
            future.result()
        self.client.finish_weight_update()
