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

from sglang.srt.managers.io_struct import CheckWeightsReqOutput, ReqOutput


class UpdateHandlers:
    __slots__ = ()  # the newest shape's manager is a slots dataclass: no instance attributes

    tp_worker: Any
    tp_cpu_group: Any
    flush_cache: Any

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

    def check_weights(self, recv_req: Any) -> CheckWeightsReqOutput:
        try:
            payload = self.tp_worker.model_runner.check_weights(action=recv_req.action)
            return CheckWeightsReqOutput(success=True, message="Success.", payload=payload)
        except Exception as e:
            return CheckWeightsReqOutput(success=False, message=f"{e}")
