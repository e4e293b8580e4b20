"""Double of vllm/distributed/parallel_state.py's get_tp_group(): the worker's tensor-parallel
group coordinator, whose `cpu_group` is a gloo group of the TP ranks. The tests set it as vLLM's
worker initialization does (init_tp_group)."""

from typing import Any, Optional


class GroupCoordinator:
    def __init__(self, cpu_group: Any) -> None:
        self.cpu_group = cpu_group


_TP: Optional[GroupCoordinator] = None


def init_tp_group(cpu_group: Any) -> None:
    global _TP
    _TP = GroupCoordinator(cpu_group)


def get_tp_group() -> GroupCoordinator:
    assert _TP is not None, "tensor model parallel group is not initialized"
    return _TP
