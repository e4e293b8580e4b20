"""Double of sglang/srt/managers/scheduler.py on SGLang main (stored 0003215c): the class no
longer inherits the weight handlers (bases 424-431); __init__ builds the model worker (570),
the running status (643, `_engine_paused = False` at 1262), then init_weight_updater (685,
def 2178-2188: a SchedulerWeightUpdaterManager over the worker, the TP group and the bound
flush_cache / is_fully_idle), then init_request_dispatcher (688), whose weight entries are
bound methods of that manager (1699-1748: (UpdateWeightsFromDistributedReqInput,
self.weight_updater.update_weights_from_distributed), ..., (CheckWeightsReqInput,
self.weight_updater.check_weights)); pause (1767) and continue (1768) stay the Scheduler's.
The tokenizer socket is msgpack (msgspec): a CheckWeightsReqOutput whose payload is not a list
of ChecksumInfo fails there (io_struct.msgspec_wire). run_scheduler_process (5682-5770):
load_plugins() (5698) before the module's Scheduler is looked up and built (5733)."""

from typing import Any

from sglang.srt.managers.io_struct import msgspec_wire
from sglang.srt.managers.scheduler_base import SchedulerBase, Sink
from sglang.srt.managers.scheduler_components.weight_updater import (
    SchedulerWeightUpdaterManager)


class Scheduler(SchedulerBase):
    def init_ipc_channels(self) -> None:
        self.send_to_tokenizer = Sink(wire=msgspec_wire)
        self.send_to_detokenizer = Sink()

    def init_weight_updater(self) -> None:
        self.weight_updater = SchedulerWeightUpdaterManager(
            tp_worker=self.tp_worker, draft_worker=self.draft_worker,
            tp_cpu_group=self.tp_cpu_group, memory_saver_adapter=self.memory_saver_adapter,
            flush_cache=self.flush_cache, is_fully_idle=self.is_fully_idle, scheduler=self,
            metrics_collector=None)

    def weight_handlers(self) -> Any:
        return self.weight_updater


def run_scheduler_process(tp_worker: Any, tp_cpu_group: Any) -> Any:
    """Double of run_scheduler_process: load_plugins() first, then the module's Scheduler."""
    from sglang.srt.plugins import load_plugins
    load_plugins()
    return Scheduler(tp_worker, tp_cpu_group)
