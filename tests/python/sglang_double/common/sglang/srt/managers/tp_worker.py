"""Double of sglang/srt/managers/tp_worker.py's BaseTpWorker forwarders (v0.5.12.post1,
96-167): positional calls into the model runner (update_weights_from_distributed's
`load_format` is the FIFTH positional argument), each TP rank deserializing its own entry of
serialized_named_tensors, no try/except (an exception reaches the scheduler)."""

from typing import Any, Tuple

from sglang.srt.utils import MultiprocessingSerializer


class TpModelWorker:
    def __init__(self, model_runner: Any, tp_rank: int) -> None:
        self.model_runner = model_runner
        self.tp_rank = tp_rank

    def update_weights_from_disk(self, recv_req: Any) -> Tuple[bool, str]:
        return self.model_runner.update_weights_from_disk(
            recv_req.model_path, recv_req.load_format,
            recapture_cuda_graph=recv_req.recapture_cuda_graph)

    def init_weights_update_group(self, recv_req: Any) -> Tuple[bool, str]:
        return self.model_runner.init_weights_update_group(
            recv_req.master_address, recv_req.master_port, recv_req.rank_offset,
            recv_req.world_size, recv_req.group_name, recv_req.backend)

    def update_weights_from_distributed(self, recv_req: Any) -> Tuple[bool, str]:
        return self.model_runner.update_weights_from_distributed(
            recv_req.names, recv_req.dtypes, recv_req.shapes, recv_req.group_name,
            recv_req.load_format)

    def update_weights_from_tensor(self, recv_req: Any) -> Tuple[bool, str]:
        return self.model_runner.update_weights_from_tensor(
            named_tensors=MultiprocessingSerializer.deserialize(
                recv_req.serialized_named_tensors[self.tp_rank]),
            load_format=recv_req.load_format)
