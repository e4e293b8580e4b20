"""Double of sglang/srt/managers/scheduler.py at v0.5.12.post1 (upstream 5a15cde8, release blob
143054cd6e5; line numbers from THUDM/slime's patch against it at d87391e3, the rest from the
stored neighbour 64469892): `class Scheduler(..., SchedulerUpdateWeightsMixin, ...)`; __init__
builds the model worker, then the request dispatcher, whose weight entries are bound methods
of the Scheduler itself (1449-1458: (UpdateWeightsFromDistributedReqInput,
self.update_weights_from_distributed), (UpdateWeightsFromTensorReqInput,
self.update_weights_from_tensor) at 1453, ..., (CheckWeightsReqInput, self.check_weights) at
1458), (PauseGenerationReqInput, self.pause_generation) and (ContinueGenerationReqInput,
self.continue_generation). The event loop, pause and continue: scheduler_base (shared with
the newest shape). run_scheduler_process: plugins first, then Scheduler looked up by name."""

from typing import Any

from sglang.srt.managers.scheduler_base import SchedulerBase
from sglang.srt.managers.scheduler_update_weights_mixin import SchedulerUpdateWeightsMixin


class Scheduler(SchedulerBase, SchedulerUpdateWeightsMixin):
    def weight_handlers(self) -> Any:
        return self


def run_scheduler_process(tp_worker: Any, tp_cpu_group: Any) -> Any:
    """Double of run_scheduler_process (3986-4060): load_plugins() first (plugins may override
    the Scheduler and its dependencies), then the module's Scheduler, looked up at call time."""
    from sglang.srt.plugins import load_plugins
    load_plugins()
    return Scheduler(tp_worker, tp_cpu_group)
