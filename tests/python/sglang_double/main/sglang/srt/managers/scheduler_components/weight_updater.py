"""Double of sglang/srt/managers/scheduler_components/weight_updater.py on SGLang main
(stored b2d53a07, the mechanical move out of the mixin: lines 42-194; the newest scheduler.py
0003215c 2178-2188 also passes `scheduler` and `metrics_collector`):
`@dataclass(kw_only=True, slots=True) class SchedulerWeightUpdaterManager` whose fields are
the scheduler's worker, TP group and its bound flush_cache / is_fully_idle. Being a slots
dataclass, none of its methods can be replaced on the instance (AttributeError: read-only);
the dispatcher holds its bound methods. check_weights (00a2ca2e 438-469): the runner's payload,
gathered over the TP group when tp_size > 1, each converted to ChecksumInfo (msgspec.convert);
an exception is answered success=False."""

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Set

import torch.distributed as dist

from sglang.srt.managers.io_struct import CheckWeightsReqOutput, ChecksumInfo, ParallelismInfo
from sglang.srt.managers.update_handlers import UpdateHandlers


def _convert(p: Any) -> ChecksumInfo:
    """msgspec.convert(p, ChecksumInfo): a dict of the struct's fields, checked by type."""
    if isinstance(p, ChecksumInfo):
        return p
    if not isinstance(p, dict) or set(p) != {"checksums", "per_gpu_checksum",
                                             "parallelism_info"}:
        raise TypeError(f"Expected `object` matching ChecksumInfo, got `{p!r}`")
    info = p["parallelism_info"]
    return ChecksumInfo(checksums=dict(p["checksums"]), per_gpu_checksum=p["per_gpu_checksum"],
                        parallelism_info=info if isinstance(info, ParallelismInfo)
                        else ParallelismInfo(**info))


@dataclass(kw_only=True, slots=True)
class SchedulerWeightUpdaterManager(UpdateHandlers):
    tp_worker: Any
    draft_worker: Any
    tp_cpu_group: Any
    memory_saver_adapter: Any
    flush_cache: Callable[..., bool]
    is_fully_idle: Callable[..., bool]
    scheduler: Any = None
    metrics_collector: Optional[Any] = None
    offload_tags: Set[str] = field(default_factory=set)

    def check_weights(self, recv_req: Any) -> CheckWeightsReqOutput:
        try:
            payload = self.tp_worker.model_runner.check_weights(action=recv_req.action)
            if payload is not None:
                if dist.get_world_size(self.tp_cpu_group) > 1:
                    gathered = [None] * dist.get_world_size(self.tp_cpu_group)
                    dist.all_gather_object(gathered, payload, group=self.tp_cpu_group)
                    payload = gathered
                payload = [_convert(p) for p in (payload if isinstance(payload, list)
                                                 else [payload])]
            return CheckWeightsReqOutput(success=True, message="Success.", payload=payload)
        except Exception as e:
            return CheckWeightsReqOutput(success=False, message=f"{e}")
