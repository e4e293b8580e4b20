"""Double of vllm/v1/engine/core.py's EngineCore, the parts around weight updates
(vllm-project/vllm 00080ee1; step 583 with no handler around the executor's call,
run_engine_core 1379-1385 sending ENGINE_CORE_DEAD, the client's EngineDeadError from
core_client.py 499-502 on; pause_scheduler 828-857, weight version 961-966, collective_rpc
952-959): the scheduler's pause state (pause_scheduler(mode, clear_cache),
resume_scheduler, is_scheduler_paused), the weight version (a caller's string, "default" at
start, set by the API layer after the workers' finish_weight_update returned), and
collective_rpc(method, timeout, args, kwargs) over the model executor (one result per
worker). load_general_plugins is the first call of __init__. A utility call that raises reaches
the client as Exception("Call to <name> method failed: <msg>") (core_client)."""

from typing import Any, Dict, List, Optional, Sequence

from vllm.plugins import load_general_plugins

UNPAUSED, PAUSED_NEW, PAUSED_ALL = "unpaused", "paused_new", "paused_all"


class EngineDeadError(Exception):
    """vllm/v1/engine/exceptions.py: the engine core died; the server cannot continue."""

    def __init__(self) -> None:
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the "
                         "root cause.")


class EngineCore:
    def __init__(self, model_executor: Any) -> None:
        load_general_plugins()
        self.model_executor = model_executor
        self.pause_state = UNPAUSED
        self._weight_version = "default"
        self.errored = False  # the busy loop died (a step raised)

    def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> None:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"Invalid pause mode: {mode}")
        self.pause_state = PAUSED_ALL if mode == "keep" else PAUSED_NEW

    def resume_scheduler(self) -> None:
        self.pause_state = UNPAUSED

    def is_scheduler_paused(self) -> bool:
        return self.pause_state != UNPAUSED

    def sleep(self, level: int = 1, mode: str = "abort") -> None:
        """core.py 867-903: the scheduler paused first (caches cleared), then the executor's
        sleep (level 0 only pauses)."""
        self.pause_scheduler(mode, True)
        if level == 0:
            return
        self.model_executor.sleep(level)

    def wake_up(self, tags: Optional[List[str]] = None) -> None:
        """core.py 905-921: the executor's wake_up; the scheduler resumes once nothing sleeps."""
        self.model_executor.wake_up(tags)
        if not self.model_executor.is_sleeping:
            self.resume_scheduler()

    def is_sleeping(self) -> bool:
        """core.py 923-925: paused, or the executor asleep."""
        return self.is_scheduler_paused() or self.model_executor.is_sleeping

    def set_weight_version(self, version: str) -> None:
        self._weight_version = version

    def get_weight_version(self) -> str:
        return self._weight_version

    def collective_rpc(self, method: str, timeout: Optional[float] = None,
                       args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None) -> list:
        return self.model_executor.collective_rpc(method, timeout=timeout, args=args,
                                                  kwargs=kwargs)

    def step(self, scheduler_output: Any) -> Any:
        """One scheduling step of the busy loop: nothing runs while paused; else the
        executor's forward, with no handler around it: a worker's exception ends the engine
        core (EngineCoreProc.run_engine_core logs it and sends ENGINE_CORE_DEAD; every later
        call of the client raises EngineDeadError)."""
        if self.errored:
            raise EngineDeadError()
        if self.pause_state != UNPAUSED:
            return None
        try:
            return self.model_executor.execute_model(scheduler_output)
        except Exception:
            self.errored = True
            raise EngineDeadError() from None


def utility_call(core: EngineCore, name: str, *args: Any) -> Any:
    """EngineCoreProc's utility dispatch as the client sees it."""
    try:
        return getattr(core, name)(*args)
    except Exception as e:
        raise Exception(f"Call to {name} method failed: {e}") from e
