"""Double of sglang/srt/managers/io_struct.py (v0.5.12.post1, lines 1352-1603): the request
dataclasses of the weight-update path, their fields and defaults in order."""

from dataclasses import dataclass
from typing import Any, List, Optional, Union


@dataclass
class UpdateWeightFromDiskReqInput:  # 1406-1429
    model_path: str
    load_format: Optional[str] = None
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True


@dataclass
class UpdateWeightsFromDistributedReqInput:  # 1440-1456
    names: List[str]
    dtypes: List[str]
    shapes: List[List[int]]
    group_name: str = "weight_update_group"
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    load_format: Optional[str] = None
    torch_empty_cache: bool = False


@dataclass
class UpdateWeightsFromTensorReqInput:  # 1465-1485
    serialized_named_tensors: List[Union[str, bytes]]
    load_format: Optional[str] = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    disable_draft_model: Optional[bool] = None
    torch_empty_cache: bool = False


@dataclass
class InitWeightsUpdateGroupReqInput:  # 1565-1578
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    group_name: str = "weight_update_group"
    backend: str = "nccl"


@dataclass
class PauseGenerationReqInput:  # 1352-1379
    mode: str = "abort"

    def __post_init__(self) -> None:
        allowed = ["abort", "retract", "in_place"]
        if self.mode not in allowed:
            raise ValueError(f"Invalid mode: {self.mode!r}. Expected one of {allowed}.")


@dataclass
class ContinueGenerationReqInput:  # 1382-1389
    torch_empty_cache: bool = True


@dataclass
class CheckWeightsReqInput:  # 1641-1644
    action: str


@dataclass
class CheckWeightsReqOutput:  # 1646-1650
    success: bool
    message: str
    payload: Optional[Any] = None


@dataclass
class ReqOutput:
    """UpdateWeights*ReqOutput / InitWeightsUpdateGroupReqOutput: (success, message)."""
    success: bool
    message: str
    num_paused_requests: Any = 0
