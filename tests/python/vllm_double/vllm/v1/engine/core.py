"""Double of vllm/v1/engine/core.py's EngineCore, the parts around weight updates
(vllm-project/vllm 00080ee1): the scheduler's pause state (pause_scheduler(mode, clear_cache),
resume_scheduler, is_scheduler_paused), the weight version (a caller's string, "default" at
start, set by the API layer after the workers' finish_weight_update returned), and
collective_rpc(method, timeout, args, kwargs) over the model executor (one result per
worker). load_general_plugins is the first call of __init__. A utility call that raises reaches
the client as Exception("Call to <name> method failed: <msg>") (core_client)."""

from typing import Any, Dict, Optional, Sequence

from vllm.plugins import load_general_plugins

UNPAUSED, PAUSED_NEW, PAUSED_ALL = "unpaused", "paused_new", "paused_all"


class EngineCore:
    def __init__(self, model_executor: Any) -> None:
        load_general_plugins()
        self.model_executor = model_executor
        self.pause_state = UNPAUSED
        self._weight_version = "default"

    def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> None:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"Invalid pause mode: {mode}")
        self.pause_state = PAUSED_ALL if mode == "keep" else PAUSED_NEW

    def resume_scheduler(self) -> None:
        self.pause_state = UNPAUSED

    def is_scheduler_paused(self) -> bool:
        return self.pause_state != UNPAUSED

    def set_weight_version(self, version: str) -> None:
        self._weight_version = version

    def get_weight_version(self) -> str:
        return self._weight_version

    def collective_rpc(self, method: str, timeout: Optional[float] = None,
                       args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None) -> list:
        return self.model_executor.collective_rpc(method, timeout=timeout, args=args,
                                                  kwargs=kwargs)

    def step(self, scheduler_output: Any) -> Any:
        """One scheduling step: nothing runs while paused; else the executor's forward."""
        if self.pause_state != UNPAUSED:
            return None
        return self.model_executor.execute_model(scheduler_output)


def utility_call(core: EngineCore, name: str, *args: Any) -> Any:
    """EngineCoreProc's utility dispatch as the client sees it."""
    try:
        return getattr(core, name)(*args)
    except Exception as e:
        raise Exception(f"Call to {name} method failed: {e}") from e
