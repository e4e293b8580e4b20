"""The parts of SGLang's TokenizerManager (tokenizer_manager.py with its TokenizerControlMixin,
tokenizer_control_mixin.py) that both shapes the doubles model share (this module is the
double's, not SGLang's). Hop by hop, where a request enters (the HTTP routes call these methods
on the manager instance, looked up at call time):

* update_weights_from_distributed / _from_tensor (control mixin, v0.5.12.post1 412-440 and
  470-497; newest 00a2ca2e 495-525 and 584-586): the request goes once through its
  FanOutCommunicator to the schedulers (one reply per DP rank; TP rank 0 answers for its
  replica), `success = all(...)`, messages joined with " | "; on success with a
  weight_version, self._update_weight_version_if_provided(version) and the message gains
  " Weight version updated to V.";
* pause_generation (tokenizer_manager.py 1500-1513; newest 1976-1989): is_pause = True; mode
  "abort" aborts every request and sends NOTHING to the schedulers; other modes are sent;
* continue_generation (1515-1519; newest 1991-1995): is_pause = False, sent to the schedulers;
* generate_request: waits while is_pause (here: answers None), else the tokenized request goes
  to the schedulers and the detokenizer's output comes back;
* check_weights and where the weight version lives: each shape's tokenizer_manager.py.
`send(obj)` is the test's transport: one turn of every TP rank's event loop with `obj`; it
returns TP rank 0's (outputs to the tokenizer, outputs to the detokenizer)."""

from typing import Any, Callable, List, Optional, Tuple

from sglang.srt.managers.io_struct import TokenizedGenerateReqInput


class TokenizerManagerBase:
    def __init__(self, send: Callable[[Any], Tuple[List[Any], List[Any]]]) -> None:
        self.send = send
        self.is_pause = False

    def _communicate(self, obj: Any) -> List[Any]:
        """FanOutCommunicator(obj): the request sent once, one reply per DP rank (DP 1)."""
        return self.send(obj)[0][:1]

    @staticmethod
    def merge_results(results: List[Any]) -> Tuple[bool, str]:
        return all(r.success for r in results), " | ".join(r.message for r in results)

    async def _update_weights(self, obj: Any) -> Tuple[bool, str]:
        success, message = self.merge_results(self._communicate(obj))
        if success and obj.weight_version is not None:
            self._update_weight_version_if_provided(obj.weight_version)
            message += f" Weight version updated to {obj.weight_version}."
        return success, message

    async def update_weights_from_distributed(self, obj: Any,
                                              request: Any = None) -> Tuple[bool, str]:
        return await self._update_weights(obj)

    async def update_weights_from_tensor(self, obj: Any,
                                         request: Any = None) -> Tuple[bool, str]:
        return await self._update_weights(obj)

    async def release_memory_occupation(self, obj: Any, request: Any = None) -> None:
        """control mixin: sent through its communicator; the replies are awaited."""
        self._communicate(obj)

    async def resume_memory_occupation(self, obj: Any, request: Any = None) -> None:
        self._communicate(obj)

    async def pause_generation(self, obj: Any) -> None:
        self.is_pause = True
        if obj.mode != "abort":
            self.send(obj)

    async def continue_generation(self, obj: Any) -> None:
        self.is_pause = False
        self.send(obj)

    async def generate_request(self, rid: str, input_ids: Any) -> Optional[Any]:
        """The request's output, or None while generation is paused (SGLang waits)."""
        if self.is_pause:
            return None
        outputs = self.send(TokenizedGenerateReqInput(rid, input_ids))[1]
        return next((o.output for o in outputs if o.rid == rid), None)

    def _update_weight_version_if_provided(self, weight_version: Optional[str]) -> None:
        raise NotImplementedError

    def model_info(self) -> dict:
        """GET /model_info's weight_version (the published label)."""
        raise NotImplementedError
