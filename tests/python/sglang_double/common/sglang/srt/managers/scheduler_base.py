"""The parts of SGLang's Scheduler (scheduler.py) that both shapes the doubles model share (this
module is the double's, not SGLang's; each shape's scheduler.py subclasses it and says where its
weight handlers live). Hop by hop, where a request enters:

* __init__: the model worker first, then the running status (`_engine_paused = False`), then
  the shape's weight handlers (init_weight_updater, newest only), then init_request_dispatcher,
  which collects BOUND METHODS into a TypeBasedDispatcher (v0.5.12.post1: self.X; newest
  0003215c 1684-1782: self.weight_updater.X for the weight requests). A method set on the
  instance or the class after __init__ is never called by the dispatcher;
* process_input_requests(recv_reqs) (0003215c 2048-2086): each request through
  `self._request_dispatcher(recv_req)`; an output that is not None goes to the tokenizer
  (send_to_tokenizer.send_output); an exception is not caught (SGLang's run_scheduler_process
  logs it and kills the server: the test records it as "raised");
* the event loop (event_loop_normal, 0003215c 1881-1918): receive, process_input_requests, then
  `if self._engine_paused: continue` BEFORE get_next_batch_to_run: nothing is generated while
  paused. event_loop_iteration is one turn of it, with the requests the test's transport
  received (SGLang: TP rank 0 receives them and broadcasts them to every TP rank);
* pause_generation (v0.5.12.post1 3660-3707, newest 5267-5353) and continue_generation
  (3709-3719, newest 5355-5375) set `_engine_paused`; flush_cache / is_fully_idle.
Generation: a TokenizedGenerateReqInput is queued (handle_generate_request); a turn of the loop
that is not paused runs the model on every queued request and sends each one's output to the
detokenizer (send_to_detokenizer)."""

from typing import Any, Callable, List, Tuple

import torch

from sglang.srt.managers.io_struct import (BatchTokenIDOutput, CheckWeightsReqInput,
                                           ContinueGenerationReqInput,
                                           InitWeightsUpdateGroupReqInput,
                                           PauseGenerationReqInput,
                                           ReleaseMemoryOccupationReqInput,
                                           ResumeMemoryOccupationReqInput,
                                           TokenizedGenerateReqInput,
                                           UpdateWeightFromDiskReqInput,
                                           UpdateWeightsFromDistributedReqInput,
                                           UpdateWeightsFromTensorReqInput)
from sglang.utils import TypeBasedDispatcher


class Sink:
    """A ZMQ push socket as the scheduler uses it: what was sent, in order. `wire` is what the
    transport does to an object (the newest shape's msgspec validation)."""

    def __init__(self, wire: Callable[[Any], Any] = lambda obj: obj) -> None:
        self.sent: List[Any] = []
        self.wire = wire

    def send_output(self, output: Any, recv_req: Any = None) -> None:
        self.sent.append(self.wire(output))

    def take(self) -> List[Any]:
        out, self.sent = self.sent, []
        return out


class SchedulerBase:
    def __init__(self, tp_worker: Any, tp_cpu_group: Any) -> None:
        self.init_model_worker(tp_worker, tp_cpu_group)
        self.init_ipc_channels()
        self.init_memory_saver()
        self.init_running_status()
        self.init_weight_updater()
        self.init_request_dispatcher()

    def init_model_worker(self, tp_worker: Any, tp_cpu_group: Any) -> None:
        self.tp_worker = tp_worker
        self.draft_worker = None
        self.tp_cpu_group = tp_cpu_group
        self.tp_rank = tp_worker.tp_rank

    def init_memory_saver(self) -> None:
        """init_watch_dog_memory_saver_input_blocker (0003215c 1399-1406)."""
        from sglang.srt.torch_memory_saver_adapter import TorchMemorySaverAdapter
        runner = self.tp_worker.model_runner
        self.memory_saver_adapter = TorchMemorySaverAdapter(
            runner.model, getattr(runner.server_args, "enable_weights_cpu_backup", False))

    def init_ipc_channels(self) -> None:
        self.send_to_tokenizer = Sink()
        self.send_to_detokenizer = Sink()

    def init_running_status(self) -> None:
        self._engine_paused = False
        self.waiting_queue: List[Any] = []
        self.cache_flushes = 0

    def init_weight_updater(self) -> None:
        """The newest shape builds self.weight_updater here (0003215c 685)."""

    def weight_handlers(self) -> Any:
        """The object whose bound methods the dispatcher collects for the weight requests."""
        raise NotImplementedError

    def init_request_dispatcher(self) -> None:
        w = self.weight_handlers()
        self._request_dispatcher = TypeBasedDispatcher([
            (TokenizedGenerateReqInput, self.handle_generate_request),
            (UpdateWeightFromDiskReqInput, w.update_weights_from_disk),
            (InitWeightsUpdateGroupReqInput, w.init_weights_update_group),
            (UpdateWeightsFromDistributedReqInput, w.update_weights_from_distributed),
            (UpdateWeightsFromTensorReqInput, w.update_weights_from_tensor),
            (ReleaseMemoryOccupationReqInput, w.release_memory_occupation),
            (ResumeMemoryOccupationReqInput, w.resume_memory_occupation),
            (CheckWeightsReqInput, w.check_weights),
            (PauseGenerationReqInput, self.pause_generation),
            (ContinueGenerationReqInput, self.continue_generation),
        ])

    # -- the event loop -------------------------------------------------------------------

    def process_input_requests(self, recv_reqs: List[Any]) -> None:
        for recv_req in recv_reqs:
            output = self._request_dispatcher(recv_req)
            if output is not None:
                self.send_to_tokenizer.send_output(output, recv_req)

    def event_loop_iteration(self, recv_reqs: List[Any]) -> Tuple[List[Any], List[Any]]:
        """One turn of event_loop_normal; returns (sent to the tokenizer, to the detokenizer)."""
        self.process_input_requests(recv_reqs)
        if not self._engine_paused:
            batch = self.get_next_batch_to_run()
            if batch:
                self.run_batch(batch)
        return self.send_to_tokenizer.take(), self.send_to_detokenizer.take()

    def handle_generate_request(self, recv_req: TokenizedGenerateReqInput) -> None:
        self.waiting_queue.append(recv_req)

    def get_next_batch_to_run(self) -> List[Any]:
        batch, self.waiting_queue = self.waiting_queue, []
        return batch

    def run_batch(self, batch: List[Any]) -> None:
        with torch.no_grad():
            for req in batch:
                logits = self.tp_worker.model_runner.model(req.input_ids)
                self.send_to_detokenizer.send_output(BatchTokenIDOutput(req.rid, logits), req)

    # -- scheduler.py -----------------------------------------------------------------------

    def is_fully_idle(self) -> bool:
        return not self.waiting_queue

    def flush_cache(self, empty_cache: bool = True) -> bool:
        if self.is_fully_idle():
            self.cache_flushes += 1
            return True
        return False

    def pause_generation(self, recv_req: PauseGenerationReqInput) -> None:
        self._engine_paused = True

    def continue_generation(self, recv_req: ContinueGenerationReqInput) -> None:
        self._engine_paused = False
