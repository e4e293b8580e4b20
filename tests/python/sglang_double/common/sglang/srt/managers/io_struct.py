"""Double of sglang/srt/managers/io_struct.py: the request dataclasses of the weight-update path,
their fields and defaults in order (v0.5.12.post1, lines 1352-1650; the same fields in the newest
stored io_struct.py at 00a2ca2e, where they are msgspec Structs: CheckWeightsReqInput 2049-2056
gives `action` a default and adds selectors, CheckWeightsReqOutput 2079-2084 types its payload
Optional[List[ChecksumInfo]], which the msgpack wire enforces: msgspec_wire)."""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from sglang.version import __version__


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


@dataclass
class ReleaseMemoryOccupationReqInput:  # tags: None = every memory type (constants.py)
    tags: Optional[List[str]] = None


@dataclass
class ResumeMemoryOccupationReqInput:
    tags: Optional[List[str]] = None


@dataclass
class ReleaseMemoryOccupationReqOutput:
    pass


@dataclass
class ResumeMemoryOccupationReqOutput:
    pass


@dataclass
class TokenizedGenerateReqInput:
    """A generation request as the tokenizer hands it to the scheduler (the fields the double
    needs: the request id and its token ids)."""
    rid: str
    input_ids: Any


@dataclass
class BatchTokenIDOutput:
    """What one scheduling step sends the detokenizer for a request (here: its logits)."""
    rid: str
    output: Any


# ChecksumInfo and its typed wire came with SGLang PR #26863 (merged 2026-05-31), after
# v0.5.12.post1: only the newest shape's io_struct has them.
if __version__ != "0.5.12.post1":
    @dataclass
    class ParallelismInfo:  # newest io_struct.py 2062-2070 (a msgspec.Struct there)
        tp_rank: int
        tp_size: int
        dp_rank: int
        dp_size: int
        pp_rank: int
        pp_size: int
        rank: int
        size: int


    @dataclass
    class ChecksumInfo:  # newest io_struct.py 2073-2076 (a msgspec.Struct there)
        checksums: Dict[str, str]
        per_gpu_checksum: str
        parallelism_info: ParallelismInfo


    def msgspec_wire(obj: Any) -> Any:
        """The newest shape's msgpack IPC between scheduler and tokenizer: a CheckWeightsReqOutput
        whose payload is not Optional[List[ChecksumInfo]] fails to decode (msgspec validates every
        field's type). Raises TypeError naming the field, as msgspec's ValidationError does."""
        if isinstance(obj, CheckWeightsReqOutput) and obj.payload is not None:
            if not isinstance(obj.payload, list):
                raise TypeError(f"Expected `array | null`, got `{type(obj.payload).__name__}` - at "
                                "`$.payload`")
            for i, info in enumerate(obj.payload):
                where = f"$.payload[{i}]"
                if not isinstance(info, ChecksumInfo):
                    raise TypeError(f"Expected `object`, got `{type(info).__name__}` - at `{where}`")
                if not isinstance(info.per_gpu_checksum, str):
                    raise TypeError(f"Expected `str` - at `{where}.per_gpu_checksum`")
                if not (isinstance(info.checksums, dict) and all(
                        isinstance(k, str) and isinstance(v, str) for k, v in info.checksums.items())):
                    raise TypeError(f"Expected `object` of str to str - at `{where}.checksums`")
                if not isinstance(info.parallelism_info, ParallelismInfo):
                    raise TypeError(f"Expected `object` - at `{where}.parallelism_info`")
        return obj
