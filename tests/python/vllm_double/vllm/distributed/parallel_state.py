"""Double of vllm/distributed/parallel_state.py's group accessors: get_tp_group() (the worker's
tensor-parallel group coordinator) and get_world_group() (every worker of the torch world:
with one data-parallel replica, its TP x PP ranks), each with a `cpu_group`, a gloo group.
The tests set them as vLLM's worker initialization does (init_tp_group, init_world_group)."""

from typing import Any, Optional


class GroupCoordinator:
    def __init__(self, cpu_group: Any) -> None:
        self.cpu_group = cpu_group


_TP: Optional[GroupCoordinator] = None
_WORLD: Optional[GroupCoordinator] = None


def init_tp_group(cpu_group: Any) -> None:
    global _TP
    _TP = GroupCoordinator(cpu_group)


def init_world_group(cpu_group: Any) -> None:
    global _WORLD
    _WORLD = GroupCoordinator(cpu_group)


def get_tp_group() -> GroupCoordinator:
    assert _TP is not None, "tensor model parallel group is not initialized"
    return _TP


def get_world_group() -> GroupCoordinator:
    assert _WORLD is not None, "world group is not initialized"
    return _WORLD
