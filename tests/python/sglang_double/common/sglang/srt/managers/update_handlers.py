"""The scheduler-side weight-update handlers, identical in both SGLang shapes the doubles model
(this module is the double's, not SGLang's): v0.5.12.post1 has them as methods of
SchedulerUpdateWeightsMixin (scheduler_update_weights_mixin.py 45-106 and 188-197; the Scheduler
inherits them), the newest main as methods of SchedulerWeightUpdaterManager
(scheduler_components/weight_updater.py; b2d53a07 53-109 and 185-194: the move kept every body).
Each reads tp_worker, tp_cpu_group and flush_cache from `self` (the Scheduler, or the manager's
fields): flush only after success and only when recv_req.flush_cache (an assert), the tensor
path barriers on the TP group, an exception in an update escapes to the event loop,
check_weights answers its exception as success=False."""

from typing import Any

import torch.distributed as dist

from sglang.srt.constants import GPU_MEMORY_ALL_TYPES, GPU_MEMORY_TYPE_WEIGHTS
from sglang.srt.managers.io_struct import (CheckWeightsReqOutput,
                                           ReleaseMemoryOccupationReqOutput, ReqOutput,
                                           ResumeMemoryOccupationReqOutput)


class UpdateHandlers:
    __slots__ = ()  # the newest shape's manager is a slots dataclass: no instance attributes

    tp_worker: Any
    tp_cpu_group: Any
    flush_cache: Any
    is_fully_idle: Any
    memory_saver_adapter: Any

    def flush_cache_after_weight_update(self, recv_req: Any) -> None:
        if recv_req.flush_cache:
            flush_cache_success = self.flush_cache(empty_cache=recv_req.torch_empty_cache)
            assert flush_cache_success, "Cache flush failed after updating weights"

    def update_weights_from_disk(self, recv_req: Any) -> ReqOutput:
        success, message = self.tp_worker.update_weights_from_disk(recv_req)
        if success:
            self.flush_cache_after_weight_update(recv_req)
        return ReqOutput(success, message, 0)

    def init_weights_update_group(self, recv_req: Any) -> ReqOutput:
        success, message = self.tp_worker.init_weights_update_group(recv_req)
        return ReqOutput(success, message)

    def update_weights_from_distributed(self, recv_req: Any) -> ReqOutput:
        success, message = self.tp_worker.update_weights_from_distributed(recv_req)
        if success:
            self.flush_cache_after_weight_update(recv_req)
        return ReqOutput(success, message)

    def update_weights_from_tensor(self, recv_req: Any) -> ReqOutput:
        success, message = self.tp_worker.update_weights_from_tensor(recv_req)
        if success:
            self.flush_cache_after_weight_update(recv_req)
        dist.barrier(group=self.tp_cpu_group)
        return ReqOutput(success, message)

    def release_memory_occupation(self, recv_req: Any) -> ReleaseMemoryOccupationReqOutput:
        """mixin 127-158 / weight_updater 128-157: only when fully idle; the weights' memory
        paused (their content undefined) after a barrier over the TP group."""
        assert self.is_fully_idle(), "release_memory_occupation should be called only when " \
            "no ongoing request"
        tags = recv_req.tags if recv_req.tags is not None else GPU_MEMORY_ALL_TYPES
        if GPU_MEMORY_TYPE_WEIGHTS in tags:
            dist.barrier(group=self.tp_cpu_group)
            self.memory_saver_adapter.pause(GPU_MEMORY_TYPE_WEIGHTS)
        return ReleaseMemoryOccupationReqOutput()

    def resume_memory_occupation(self, recv_req: Any) -> ResumeMemoryOccupationReqOutput:
        """mixin 160-186 / weight_updater 159-183: the weights' memory mapped back (their old
        content only with the CPU backup), after a barrier over the TP group."""
        tags = recv_req.tags if recv_req.tags is not None else GPU_MEMORY_ALL_TYPES
        if GPU_MEMORY_TYPE_WEIGHTS in tags:
            self.memory_saver_adapter.resume(GPU_MEMORY_TYPE_WEIGHTS)
            dist.barrier(group=self.tp_cpu_group)
        return ResumeMemoryOccupationReqOutput()

    def check_weights(self, recv_req: Any) -> CheckWeightsReqOutput:
        try:
            payload = self.tp_worker.model_runner.check_weights(action=recv_req.action)
            return CheckWeightsReqOutput(success=True, message="Success.", payload=payload)
        except Exception as e:
            return CheckWeightsReqOutput(success=False, message=f"{e}")
