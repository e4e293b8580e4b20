"""Where a vLLM worker sits in the parallel layout, and the group its transactions span.

A transaction covers every rank that serves one copy of the model (one part committing while
another aborts would serve a model made of two versions):

* a data-parallel replica's tensor-parallel group (get_tp_group);
* with pipeline stages, every stage too: vLLM's world group (get_world_group), which with one
  replica is its TP x PP ranks;
* with expert parallelism across replicas (enable_expert_parallel, data_parallel_size > 1) the
  experts of one copy are spread over every replica, so one transaction spans them all: the
  world group, which vLLM builds across replicas (world_size_across_dp).

Several replicas of several stages without expert parallelism have no vLLM group spanning
exactly one replica: refused. Replicas that commit independently have their own journals, so
their paths must carry "{dp_rank}".
"""

from dataclasses import dataclass
from typing import Any, List, Optional

from .. import Error
from ..torch_dist import gather_stages


@dataclass(frozen=True)
class Placement:
    """dp_size / dp_index: vLLM's data-parallel size and this replica's index; pp_size: its
    pipeline stages."""

    dp_size: int = 1
    dp_index: int = 0
    pp_size: int = 1
    pp_index: int = 0
    expert_parallel: bool = False

    @property
    def replicas_commit_together(self) -> bool:
        """Whether one transaction spans every replica (experts spread over them)."""
        return self.expert_parallel and self.dp_size > 1


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
    pp = max(1, _int(parallel_config, "pipeline_parallel_size", default=1))
    tp = max(1, _int(parallel_config, "tensor_parallel_size",
                     default=max(1, _int(parallel_config, "world_size", default=pp) // pp)))
    return Placement(dp_size=max(1, _int(parallel_config, "data_parallel_size", default=1)),
                     pp_index=_int(parallel_config, "rank", default=0) // tp,
                     dp_index=_int(parallel_config, "data_parallel_index", "data_parallel_rank",
                                   default=0),
                     pp_size=max(1, _int(parallel_config, "pipeline_parallel_size", default=1)),
                     expert_parallel=getattr(parallel_config, "enable_expert_parallel",
                                             False) is True)


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
    if placement.replicas_commit_together:
        return _group("get_world_group")
    if placement.pp_size == 1:
        return tp_group()
    if placement.dp_size > 1:
        raise Error("E_UNSUPPORTED", f"init_transfer_engine: pipeline_parallel_size "
                    f"{placement.pp_size} with data_parallel_size {placement.dp_size}: a "
                    "transaction must span every stage of one replica and no vLLM group does "
                    "(one replica, one stage per replica, or expert parallelism across the "
                    "replicas is supported)")
    return _group("get_world_group")


def manifest_groups(placement: Placement, group: Any) -> Optional[List[int]]:
    """Each rank's pipeline stage, in the order of `group` (collective over it when there are
    stages): the coordinator then requires the same manifest within a stage only. None with
    one stage (every rank the same manifest)."""
    if placement.pp_size == 1:
        return None
    return gather_stages(placement.pp_index, group)


def journal_path(template: str, field: str, rank: int, placement: Placement) -> str:
    """`template` with "{rank}" (the rank in the commit group) and "{dp_rank}" replaced.
    Raises wtx.Error INVALID_ARGUMENT naming `field` when several replicas would share it."""
    if (placement.dp_size > 1 and not placement.replicas_commit_together
            and "{dp_rank}" not in template):
        raise Error("INVALID_ARGUMENT", f"init_info.{field}: data_parallel_size is "
                    f"{placement.dp_size}, so each replica needs its own journals: put "
                    f"'{{dp_rank}}' in the path (got {template!r})")
    return template.replace("{rank}", str(rank)).replace("{dp_rank}", str(placement.dp_index))
