"""Double of sglang/srt/distributed/parallel_state.py's get_world_group() (v0.5.12.post1): the
group coordinator of every rank of this server's torch world (TP x PP ranks), whose `cpu_group`
is a gloo group. The tests set it as SGLang's init_distributed_environment does
(init_world_group)."""

from typing import Any, Optional


class GroupCoordinator:
    def __init__(self, cpu_group: Any) -> None:
        self.cpu_group = cpu_group


_WORLD: Optional[GroupCoordinator] = None


def init_world_group(cpu_group: Any) -> None:
    global _WORLD
    _WORLD = GroupCoordinator(cpu_group)


def get_world_group() -> GroupCoordinator:
    assert _WORLD is not None, "world group is not initialized"
    return _WORLD
