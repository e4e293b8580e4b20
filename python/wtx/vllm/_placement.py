"""Where a vLLM worker sits in the parallel layout, and the group its transactions span.

A transaction covers every rank that serves one copy of the model: a data-parallel replica's
tensor-parallel group and, with pipeline stages, every stage of it (one stage committing while
another aborts would serve a model made of two versions). vLLM gives a replica's TP group
(get_tp_group) and, with one replica, its world group of TP x PP ranks (get_world_group); with
several replicas and several stages no vLLM group spans exactly one replica, so that layout is
refused. Replicas commit independently, each with its own journals: with more than one, the
journal paths must carry "{dp_rank}".
"""

from dataclasses import dataclass
from typing import Any, Optional

from .. import Error


@dataclass(frozen=True)
class Placement:
    """dp_size / dp_index: vLLM's data-parallel size and this replica's index; pp_size: its
    pipeline stages."""

    dp_size: int = 1
    dp_index: int = 0
    pp_size: int = 1


def _int(config: Any, *names: str, default: int) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def placement_of(parallel_config: Any) -> Placement:
    """The placement vLLM's ParallelConfig describes (1 replica, 1 stage without one)."""
    if parallel_config is None:
        return Placement()
    return Placement(dp_size=max(1, _int(parallel_config, "data_parallel_size", default=1)),
                     dp_index=_int(parallel_config, "data_parallel_index", "data_parallel_rank",
                                   default=0),
                     pp_size=max(1, _int(parallel_config, "pipeline_parallel_size", default=1)))


def _group(getter: str) -> Optional[Any]:
    try:
        from vllm.distributed import parallel_state
        return getattr(parallel_state, getter)().cpu_group
    except Exception:
        return None  # no vLLM (the caller's default group)


def tp_group() -> Optional[Any]:
    """vLLM's tensor-parallel CPU group of this worker (None without vLLM)."""
    return _group("get_tp_group")


def commit_group(placement: Placement) -> Optional[Any]:
    """The CPU group a transaction of this worker spans (module docstring). Raises wtx.Error
    E_UNSUPPORTED for several replicas of several stages."""
    if placement.pp_size == 1:
        return tp_group()
    if placement.dp_size > 1:
        raise Error("E_UNSUPPORTED", f"init_transfer_engine: pipeline_parallel_size "
                    f"{placement.pp_size} with data_parallel_size {placement.dp_size}: a "
                    "transaction must span every stage of one replica and no vLLM group does "
                    "(one replica, or one stage per replica, is supported)")
    return _group("get_world_group")


def journal_path(template: str, field: str, rank: int, placement: Placement) -> str:
    """`template` with "{rank}" (the rank in the commit group) and "{dp_rank}" replaced.
    Raises wtx.Error INVALID_ARGUMENT naming `field` when several replicas would share it."""
    if placement.dp_size > 1 and "{dp_rank}" not in template:
        raise Error("INVALID_ARGUMENT", f"init_info.{field}: data_parallel_size is "
                    f"{placement.dp_size}, so each replica needs its own journals: put "
                    f"'{{dp_rank}}' in the path (got {template!r})")
    return template.replace("{rank}", str(rank)).replace("{dp_rank}", str(placement.dp_index))
