"""Double of SGLang's TokenizerManager around weight updates (v0.5.12.post1:
tokenizer_control_mixin.py 412-440 and 763-774, 884-889; tokenizer_manager.py 1500-1519). Every
request goes to the scheduler of every TP rank (SGLang broadcasts it over the TP group) and only
TP rank 0's answer comes back (one per DP rank; DP 1 here). After a successful update request
the request's weight_version is published (`server_args.weight_version`, shown at /model_info)
by _update_weight_version_if_provided. `send` is the test's transport to the schedulers:
send(method, request) -> every rank's answer."""

from types import SimpleNamespace
from typing import Any, Callable, List, Optional, Tuple


class TokenizerManager:
    def __init__(self, send: Callable[[str, Any], List[Any]]) -> None:
        self.send = send
        self.server_args = SimpleNamespace(weight_version="default")
        self.is_pause = False

    def _update_weight_version_if_provided(self, weight_version: Optional[str]) -> None:
        if weight_version is not None:
            self.server_args.weight_version = weight_version

    async def update_weights_from_distributed(self, obj: Any,
                                              request: Any = None) -> Tuple[bool, str]:
        results = self.send("update_weights_from_distributed", obj)[:1]  # TP rank 0's
        success = all(r.success for r in results)
        message = " | ".join(r.message for r in results)
        if success and obj.weight_version is not None:
            self._update_weight_version_if_provided(obj.weight_version)
            message += f" Weight version updated to {obj.weight_version}."
        return success, message

    async def pause_generation(self, obj: Any) -> None:
        self.is_pause = True
        self.send("pause_generation", obj)

    async def continue_generation(self, obj: Any) -> None:
        self.is_pause = False
        self.send("continue_generation", obj)

    async def check_weights(self, obj: Any,
                            request: Any = None) -> Tuple[bool, str, Optional[List[Any]]]:
        results = self.send("check_weights", obj)[:1]
        success = all(r.success for r in results)
        ranks = [r.payload for r in results] if any(r.payload is not None
                                                    for r in results) else None
        return success, " | ".join(r.message for r in results), ranks
