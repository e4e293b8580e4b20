"""Double of vllm/distributed/weight_transfer/sparse_nccl_engine.py (vllm-project/vllm
8f5ec677): sparse patches in RUNTIME names (the live parameters), applied in place with
`self.model.get_parameter(name).data.view(-1).index_copy_(...)`, no layerwise reload; start
refuses TP/PP > 1; draft updates unsupported. NCCL is gloo (nccl_engine.GROUPS)."""

from dataclasses import dataclass
from typing import Any, List, Optional

import torch

from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllm.distributed.weight_transfer.base import WeightTransferEngine, WeightTransferUpdateInfo
from vllm.distributed.weight_transfer.nccl_engine import (NCCLWeightTransferInitInfo,
                                                          _broadcast, _group_of)


@dataclass
class SparseWeightPatch:
    name: str
    indices: torch.Tensor
    values: torch.Tensor


@dataclass
class SparseNCCLWeightTransferUpdateInfo(WeightTransferUpdateInfo):
    names: List[str]
    dtype_names: List[str]
    shapes: List[List[int]]
    num_updates_list: List[int]

    def __post_init__(self) -> None:
        if len(self.dtype_names) != len(self.names) or len(self.shapes) != len(self.names):
            raise ValueError("`dtype_names` and `shapes` should be of the same size as `names`")
        if not self.num_updates_list:
            raise ValueError("`num_updates_list` cannot be empty for sparse updates")
        if len(self.num_updates_list) != len(self.names):
            raise ValueError("`num_updates_list` should be of the same size as `names`")
        if any(n < 0 for n in self.num_updates_list):
            raise ValueError("Sparse `num_updates_list` entries must be non-negative")


class SparseNCCLWeightTransferEngine(WeightTransferEngine):
    init_info_cls = NCCLWeightTransferInitInfo
    update_info_cls = SparseNCCLWeightTransferUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        super().__init__(config, vllm_config, device, model)
        self.model_update_group: Optional[PyNcclCommunicator] = None

    def init_transfer_engine(self, init_info: NCCLWeightTransferInitInfo) -> None:
        self.model_update_group = _group_of(init_info.master_address, init_info.master_port)

    def start_weight_update(self) -> None:
        if self.parallel_config.world_size != 1:
            raise NotImplementedError("Sparse weight updates currently require TP=1 and PP=1")

    def finish_weight_update(self) -> None:
        pass

    def receive_weights(self, update_info: SparseNCCLWeightTransferUpdateInfo) -> None:
        for name, dtype_name, n in zip(update_info.names, update_info.dtype_names,
                                       update_info.num_updates_list):
            indices = torch.empty(n, dtype=torch.int32, device=self.device)
            values = torch.empty(n, dtype=getattr(torch, dtype_name), device=self.device)
            assert self.model_update_group is not None
            _broadcast(indices, self.model_update_group)
            _broadcast(values, self.model_update_group)
            self._apply_patch(SparseWeightPatch(name, indices, values))

    def _apply_patch(self, patch: SparseWeightPatch) -> None:
        param = self.model.get_parameter(patch.name)
        if not param.is_contiguous():
            raise NotImplementedError("Sparse weight updates currently require contiguous "
                                      f"params: {patch.name}")
        if patch.indices.dtype != torch.int32:
            raise ValueError(f"Sparse weight updates require int32 indices: {patch.name}")
        if patch.values.dtype != param.dtype:
            raise ValueError(f"Sparse values dtype {patch.values.dtype} does not match "
                             f"parameter dtype {param.dtype} for {patch.name}")
        param.data.view(-1).index_copy_(0, patch.indices.to(torch.long),
                                        patch.values.to(param.device))

    def shutdown(self) -> None:
        self.model_update_group = None

    @staticmethod
    def trainer_send_weights(patches: Any, trainer_args: Any) -> None:
        group = trainer_args["group"]
        for p in patches:
            _broadcast(p.indices.to(torch.int32).contiguous(), group)
            _broadcast(p.values.contiguous(), group)
