"""Double of vllm/v1/engine/async_llm.py's weight-transfer and pause methods (annotated copy
find_string id 66045604347, matching the latest docs), synchronous here: each goes to the
engine core (a utility call: an exception becomes Exception("Call to <name> method failed:
<msg>")) or to every worker through collective_rpc. finish_weight_update sets the weight
version only after the workers' finish returned."""

from typing import Any, Optional

from vllm.v1.engine.core import EngineCore, utility_call


class AsyncLLM:
    def __init__(self, core: EngineCore) -> None:
        self.core = core

    def _rpc(self, method: str, **kwargs: Any) -> Any:
        return utility_call(self.core, "collective_rpc", method, None, (), kwargs or None)

    def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True) -> None:
        utility_call(self.core, "pause_scheduler", mode, clear_cache)

    def resume_generation(self) -> None:
        utility_call(self.core, "resume_scheduler")

    def is_paused(self) -> bool:
        return utility_call(self.core, "is_scheduler_paused")

    def sleep(self, level: int = 1, mode: str = "abort") -> None:  # 983-989
        utility_call(self.core, "sleep", level, mode)

    def wake_up(self, tags: Optional[list] = None) -> None:  # 991-995
        utility_call(self.core, "wake_up", tags)

    def is_sleeping(self) -> bool:  # 1003-1004
        return utility_call(self.core, "is_sleeping")

    def init_weight_transfer_engine(self, init_info: Any) -> None:
        self._rpc("init_weight_transfer_engine", init_info=init_info)

    def start_weight_update(self) -> None:
        self._rpc("start_weight_update")

    def start_draft_weight_update(self) -> None:
        self._rpc("start_draft_weight_update")

    def update_weights(self, update_info: Any) -> None:
        self._rpc("update_weights", update_info=update_info)

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        self._rpc("finish_weight_update")
        if weight_version is not None:
            utility_call(self.core, "set_weight_version", weight_version)

    def get_weight_version(self) -> str:
        return utility_call(self.core, "get_weight_version")
