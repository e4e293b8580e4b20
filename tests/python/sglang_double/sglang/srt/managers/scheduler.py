"""Double of SGLang's Scheduler around weight updates (v0.5.12.post1):
scheduler_update_weights_mixin.py (45-106: flush only after success and only when
recv_req.flush_cache, `assert flush_cache_success`; the tensor path barriers on the TP group),
scheduler.py's flush_cache / is_fully_idle (3295-3467), pause_generation (3660-3707: the engine
is paused, the event loop schedules nothing) and continue_generation (3709-3719). An exception
in a handler escapes (SGLang's event loop then takes the server down). `generate` stands in for
one scheduling step of the event loop: nothing runs while paused."""

from typing import Any, Optional

import torch
import torch.distributed as dist

from sglang.srt.managers.io_struct import (CheckWeightsReqOutput, ContinueGenerationReqInput,
                                           PauseGenerationReqInput, ReqOutput)


class Scheduler:
    def __init__(self, tp_worker: Any, tp_cpu_group: Any) -> None:
        self.tp_worker = tp_worker
        self.tp_cpu_group = tp_cpu_group
        self.tp_rank = tp_worker.tp_rank
        self._engine_paused = False
        self.running = 0  # requests in the running batch
        self.cache_flushes = 0

    # -- scheduler.py ---------------------------------------------------------------------

    def is_fully_idle(self) -> bool:
        return self.running == 0

    def flush_cache(self, empty_cache: bool = True) -> bool:
        if self.is_fully_idle():
            self.cache_flushes += 1
            return True
        return False

    def pause_generation(self, recv_req: PauseGenerationReqInput) -> None:
        self._engine_paused = True

    def continue_generation(self, recv_req: ContinueGenerationReqInput) -> None:
        self._engine_paused = False

    def generate(self, input_ids: torch.Tensor) -> Optional[torch.Tensor]:
        if self._engine_paused:
            return None
        with torch.no_grad():
            return self.tp_worker.model_runner.model(input_ids)

    # -- scheduler_update_weights_mixin.py --------------------------------------------------

    def flush_cache_after_weight_update(self, recv_req: Any) -> None:
        if recv_req.flush_cache:
            flush_cache_success = self.flush_cache(empty_cache=recv_req.torch_empty_cache)
            assert flush_cache_success, "Cache flush failed after updating weights"

    def check_weights(self, recv_req: Any) -> CheckWeightsReqOutput:  # mixin 188-197
        try:
            payload = self.tp_worker.model_runner.check_weights(action=recv_req.action)
            return CheckWeightsReqOutput(success=True, message="Success.", payload=payload)
        except Exception as e:
            return CheckWeightsReqOutput(success=False, message=f"{e}")

    def init_weights_update_group(self, recv_req: Any) -> ReqOutput:
        success, message = self.tp_worker.init_weights_update_group(recv_req)
        return ReqOutput(success, message)

    def update_weights_from_disk(self, recv_req: Any) -> ReqOutput:
        success, message = self.tp_worker.update_weights_from_disk(recv_req)
        if success:
            self.flush_cache_after_weight_update(recv_req)
        return ReqOutput(success, message, 0)

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


def run_scheduler_process(tp_worker: Any, tp_cpu_group: Any) -> Scheduler:
    """Double of run_scheduler_process (scheduler.py 3986-4060): plugins are loaded first (so
    hooks can override the Scheduler and its dependencies), then the Scheduler is built (the
    event loop is the test's)."""
    from sglang.srt.plugins import load_plugins
    load_plugins()
    return Scheduler(tp_worker, tp_cpu_group)
