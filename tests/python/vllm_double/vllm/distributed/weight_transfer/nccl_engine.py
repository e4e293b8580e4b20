"""Double of vllm/distributed/weight_transfer/nccl_engine.py, the generation whose engine owns
start/finish (find_string id 56585172333; nccl_common.py at vllm-project/vllm 15a3fd47 and its
later NCCLTrainerInitInfo). NCCL is gloo here: the `PyNcclCommunicator` over a
`StatelessProcessGroup.create(master_address, master_port, ...)` becomes the communicator double
(vllm_double/vllm/distributed/device_communicators/pynccl.py) over a torch.distributed group of
the trainer (rank 0 of it) and the engine ranks, which the test builds and files in GROUPS under
"address:port".

Worker side, as vLLM's: start_weight_update runs initialize_layerwise_reload(self.model);
receive_weights broadcasts each tensor from src 0 (`self.model_update_group.broadcast(weight,
src=0, stream=...)`) into a fresh buffer on self.device and hands it to self.model.load_weights,
or, packed (the wire params come from the trainer's init info; main's trainer packs by
default: nccl_engine.py at 055e47c2), consumes packed chunks (packed_tensor.py) and hands
each chunk's list to self.model.load_weights;
finish_weight_update runs finalize_layerwise_reload(self.model, self.model_config). With
`reload_mode="direct"` (vllm/config/weight_transfer.py, find_string id 68884425237: "`direct`
has each `weight_loader` write into the live parameters with no post-processing"; no stored
engine file shows where the branch sits, so it is placed here, around the reload calls) start
and finish do no layerwise reload and load_weights writes the live parameters. The static
trainer path is the stub that raises. Trainer side:
NCCLTrainerWeightTransferEngine.trainer_init (the sender calls
client.init_weight_transfer_engine with rank_offset 1 while it joins the group) and
send_weights (start, then ONE update_weights for every parameter concurrently with the
broadcast, then finish).
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Dict, List, Optional

import torch

from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllm.distributed.weight_transfer.packed_tensor import (
    DEFAULT_PACKED_BUFFER_SIZE_BYTES, DEFAULT_PACKED_NUM_BUFFERS, packed_nccl_broadcast_consumer,
    packed_nccl_broadcast_producer)
from vllm.distributed.weight_transfer.base import (TrainerInitInfo, TrainerWeightTransferEngine,
                                                   WeightTransferEngine,
                                                   WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)
from vllm.model_executor.model_loader.reload import (finalize_layerwise_reload,
                                                     initialize_layerwise_reload)

# Test-only: the process groups a StatelessProcessGroup.create(host, port, ...) would build.
GROUPS: Dict[str, Any] = {}
_COMMUNICATORS: Dict[str, PyNcclCommunicator] = {}


@dataclass
class NCCLWeightTransferInitInfo(WeightTransferInitInfo):
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    packed: bool = False
    packed_buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES
    packed_num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS


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


def _group_of(address: str, port: int) -> PyNcclCommunicator:
    """The communicator of the group filed under "address:port" (one per group, as each
    process holds one communicator per stateless group)."""
    key = f"{address}:{port}"
    if key not in _COMMUNICATORS or _COMMUNICATORS[key].group is not GROUPS[key]:
        _COMMUNICATORS[key] = PyNcclCommunicator(GROUPS[key])
    return _COMMUNICATORS[key]


def _broadcast(t: torch.Tensor, group: PyNcclCommunicator) -> None:
    group.broadcast(t, src=0, stream=None)


class NCCLWeightTransferEngine(WeightTransferEngine):
    init_info_cls = NCCLWeightTransferInitInfo
    update_info_cls = NCCLWeightTransferUpdateInfo

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        super().__init__(config, vllm_config, device, model)
        self.model_update_group: Optional[PyNcclCommunicator] = None
        self.packed = False
        self.packed_buffer_size_bytes = DEFAULT_PACKED_BUFFER_SIZE_BYTES
        self.packed_num_buffers = DEFAULT_PACKED_NUM_BUFFERS

    def init_transfer_engine(self, init_info: NCCLWeightTransferInitInfo) -> None:
        self.packed = init_info.packed
        self.packed_buffer_size_bytes = init_info.packed_buffer_size_bytes
        self.packed_num_buffers = init_info.packed_num_buffers
        self.model_update_group = _group_of(init_info.master_address, init_info.master_port)

    def _layerwise(self) -> bool:
        return getattr(self.config, "reload_mode", "layerwise") == "layerwise"

    def start_weight_update(self) -> None:
        if self._layerwise():
            initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        if self._layerwise():
            finalize_layerwise_reload(self.model, self.model_config)

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.model_update_group is None:
            raise RuntimeError("NCCL weight transfer not initialized. "
                               "Call init_transfer_engine() first.")
        if self.packed:
            packed_nccl_broadcast_consumer(
                iterator=((n, (s, getattr(torch, d))) for n, d, s in
                          zip(update_info.names, update_info.dtype_names, update_info.shapes)),
                group=self.model_update_group, src=0,
                post_unpack_func=self.model.load_weights,  # type: ignore[arg-type]
                buffer_size_bytes=self.packed_buffer_size_bytes,
                num_buffers=self.packed_num_buffers, device=self.device)
            return
        for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names,
                                           update_info.shapes):
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name), device=self.device)
            self.model_update_group.broadcast(weight, src=0, stream=None)
            self.model.load_weights(weights=[(name, weight)])  # type: ignore[operator]

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
    master_address: str
    master_port: int
    world_size: int
    packed: bool = True  # main's default (the worker-side info defaults to unpacked)
    packed_buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES
    packed_num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS


class NCCLTrainerWeightTransferEngine(TrainerWeightTransferEngine):
    init_info_cls = NCCLTrainerInitInfo

    def __init__(self, *, client: Any, source: Any = None, is_sender: bool = True,
                 packed: bool = True,
                 packed_buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES,
                 packed_num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.packed = packed
        self.packed_buffer_size_bytes = packed_buffer_size_bytes
        self.packed_num_buffers = packed_num_buffers
        self.model_update_group: Optional[PyNcclCommunicator] = None

    @classmethod
    def trainer_init(cls, init_info: NCCLTrainerInitInfo, *, client: Any,
                     source: Any = None) -> "NCCLTrainerWeightTransferEngine":
        if source is None:
            raise ValueError("NCCL trainer weight transfer requires a WeightSource.")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender,
                     packed=init_info.packed,
                     packed_buffer_size_bytes=init_info.packed_buffer_size_bytes,
                     packed_num_buffers=init_info.packed_num_buffers)
        if not engine.is_sender:
            return engine
        worker_init_info = NCCLWeightTransferInitInfo(
            master_address=init_info.master_address, master_port=init_info.master_port,
            rank_offset=1, world_size=init_info.world_size, packed=init_info.packed,
            packed_buffer_size_bytes=init_info.packed_buffer_size_bytes,
            packed_num_buffers=init_info.packed_num_buffers)
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
            assert self.model_update_group is not None
            if self.packed:
                packed_nccl_broadcast_producer(
                    iterator=iter(self.source), group=self.model_update_group, src=0,
                    post_iter_func=lambda item: item[1],
                    buffer_size_bytes=self.packed_buffer_size_bytes,
                    num_buffers=self.packed_num_buffers)
            else:
                for _, tensor in self.source:
                    _broadcast(tensor.detach().contiguous(), self.model_update_group)
            future.result()
        self.client.finish_weight_update()
