"""A vLLM deployment made of the doubles in vllm_double/ (each mirrors vLLM's own code, see its
README), in separate processes over gloo, for the wtx backend's tests:

* global rank 0: the trainer process, which also hosts what runs beside vLLM's workers: the
  engine core (vllm.v1.engine.core.EngineCore), the API layer (AsyncLLM) and the dev-mode
  HTTP routes; the engine core reaches the workers through `Executor.collective_rpc`, which
  relays each call to every worker process (the multiproc executor's role) and wraps a
  worker's failure as vLLM's executor does;
* global ranks 1..TP: one vLLM worker each (WorkerWrapperBase.init_worker: general plugins
  loaded first, then the Worker, whose load_model builds the weight-transfer engine through the
  factory), running the calls it is relayed until "exit".

Plugins reach every process as in a real deployment: through the `vllm.general_plugins` entry
point of an installed distribution. plugin_path() makes a distribution whose entry points are
the ones pyproject.toml declares for wtx (parsed from it, so they cannot drift), and each
process puts it on sys.path before vLLM loads its plugins.
"""

import atexit
import os
import shutil
import sys
import tempfile
import tomllib
import threading
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "vllm_double"))

UPDATE_GROUP_ADDRESS = ("127.0.0.1", 29555)  # the key of the gloo stand-in for NCCL's group


def plugin_path(group: str = "vllm.general_plugins") -> str:
    """A folder holding a distribution whose entry points of `group` are the ones
    pyproject.toml declares for wtx (parsed from it, so they cannot drift)."""
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    points = project.get("entry-points", {}).get(group)
    assert points, f"pyproject.toml declares no {group} entry point"
    folder = tempfile.mkdtemp(prefix="wtx-plugin-")
    atexit.register(shutil.rmtree, folder, True)  # the test process leaves no folder behind
    info = os.path.join(folder, "wtx_entry_points-0.1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: wtx-entry-points\nVersion: 0.1.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return folder


class Executor:
    """The model executor seen from the engine core: collective_rpc to every worker."""

    def __init__(self, ctrl: Any, workers: int) -> None:
        self.ctrl = ctrl
        self.workers = workers
        self.lock = threading.Lock()

    def collective_rpc(self, method: str, timeout: Optional[float] = None, args: Any = (),
                       kwargs: Optional[Dict[str, Any]] = None) -> List[Any]:
        with self.lock:
            dist.broadcast_object_list([(method, tuple(args), kwargs or {})], src=0,
                                       group=self.ctrl)
            out: List[Any] = [None] * (self.workers + 1)
            dist.all_gather_object(out, None, group=self.ctrl)
        results = out[1:]
        for r in results:
            if r[0] == "error":
                raise RuntimeError(f"Worker failed with error '{r[1]}', please check the stack "
                                   "trace above for the root cause")
        return [r[1] for r in results]

    def execute_model(self, scheduler_output: Any) -> Any:
        return self.collective_rpc("execute_model", args=(scheduler_output,))[0]

    # vllm/v1/executor/abstract.py sleep (334-345) / wake_up (347-372): every worker's, with
    # the tags still asleep kept here.
    is_sleeping = False
    sleeping_tags: set = set()

    def sleep(self, level: int = 1) -> None:
        if self.is_sleeping:
            return
        self.collective_rpc("sleep", kwargs=dict(level=level))
        self.sleeping_tags = {"weights", "kv_cache"}
        self.is_sleeping = True

    def wake_up(self, tags: Optional[List[str]] = None) -> None:
        if not self.is_sleeping:
            return
        self.collective_rpc("wake_up", kwargs=dict(tags=tags))
        self.sleeping_tags -= set(tags) if tags else set(self.sleeping_tags)
        self.is_sleeping = bool(self.sleeping_tags)

    def exit(self) -> None:
        with self.lock:
            dist.broadcast_object_list([("exit", (), {})], src=0, group=self.ctrl)


class Layout:
    """vLLM's parallel layout of the workers: dp replicas of pp stages of tp ranks. Worker w
    (global rank w + 1) is replica w // (pp * tp), stage (w // tp) % pp, TP rank w % tp."""

    def __init__(self, tp: int, dp: int = 1, pp: int = 1, ep: bool = False) -> None:
        self.tp, self.dp, self.pp, self.ep = tp, dp, pp, ep
        self.workers = tp * dp * pp

    def of(self, worker: int) -> Dict[str, int]:
        """dp index, pp index, tp rank, and rank within its replica (vLLM's
        parallel_config.rank) of worker `worker` (0-based)."""
        tp, pp = self.tp, self.pp
        return {"dp": worker // (pp * tp), "pp": (worker // tp) % pp, "tp": worker % tp,
                "rank": worker % (pp * tp)}

    def tp_groups(self) -> List[List[int]]:
        return [[1 + first + t for t in range(self.tp)]
                for first in range(0, self.workers, self.tp)]


def groups(tp: int, layout: Optional[Layout] = None) -> Dict[str, Any]:
    """Every process makes the same groups, in the same order: control and update groups of
    every process, every TP group (g["tp_groups"]) and the workers' world group (vLLM's:
    across data-parallel replicas too)."""
    layout = layout or Layout(tp)
    world = layout.workers + 1
    g = {"ctrl": dist.new_group(list(range(world))),
         "update": dist.new_group(list(range(world))),
         "tp_groups": [dist.new_group(ranks) for ranks in layout.tp_groups()],
         "workers": dist.new_group(list(range(1, world))), "layout": layout}
    from vllm.distributed.weight_transfer import nccl_engine
    nccl_engine.GROUPS["%s:%d" % UPDATE_GROUP_ADDRESS] = g["update"]
    return g


def vllm_config(tp: int, backend: str = "wtx", reload_mode: str = "layerwise",
                layout: Optional[Layout] = None, worker: int = 0) -> Any:
    from types import SimpleNamespace
    from vllm.config import WeightTransferConfig
    layout = layout or Layout(tp)
    at = layout.of(worker)
    return SimpleNamespace(
        weight_transfer_config=WeightTransferConfig(backend=backend, reload_mode=reload_mode),
        parallel_config=SimpleNamespace(
            world_size=layout.tp * layout.pp, rank=at["rank"], tensor_parallel_size=layout.tp,
            pipeline_parallel_size=layout.pp, data_parallel_size=layout.dp,
            data_parallel_index=at["dp"], enable_expert_parallel=layout.ep),
        model_config=SimpleNamespace(dtype=torch.bfloat16), speculative_config=None)


def worker_main(rank: int, tp: int, g: Dict[str, Any], make_model: Any,
                plugins: str, reload_mode: str = "layerwise") -> Dict[str, Any]:
    """A vLLM worker process: plugins, the worker, then the relayed calls until "exit"."""
    sys.path.insert(0, plugins)
    from vllm.distributed.parallel_state import init_tp_group, init_world_group
    from vllm.v1.worker.gpu_worker import ModelRunnerDouble
    from vllm.v1.worker.worker_base import WorkerWrapperBase
    layout: Layout = g["layout"]
    tp_group = g["tp_groups"][(rank - 1) // layout.tp]
    init_tp_group(tp_group)
    init_world_group(g["workers"])
    tp_rank = layout.of(rank - 1)["tp"]
    model = make_model(layout.tp, tp_rank, tp_group)
    wrapper = WorkerWrapperBase()
    wrapper.init_worker({"vllm_config": vllm_config(tp, reload_mode=reload_mode, layout=layout,
                                                    worker=rank - 1),
                         "model_runner": ModelRunnerDouble(model)})
    worker = wrapper.worker
    assert worker is not None
    worker.load_model()
    log = []
    while True:
        box: List[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=g["ctrl"])
        method, args, kwargs = box[0]
        if method == "exit":
            break
        if method == "__test__":  # a test's own instruction to this worker (its result back)
            result: Any = ("ok", args[0](worker, tp_rank))
        else:
            try:
                result = ("ok", wrapper.execute_method(method, *args, **kwargs))
            except Exception as e:
                result = ("error", f"{type(e).__name__}: {e}")
        log.append((method, result[0]))
        dist.all_gather_object([None] * (layout.workers + 1), result, group=g["ctrl"])
    engine = worker.weight_transfer_engine
    status = engine.participant.status() if engine.participant is not None else None
    return {"log": log, "status": status, "active": worker._weight_update_active,
            "lora_resets": worker.model_runner.lora_resets,
            "weight_version": engine.weight_version}


class Front:
    """What runs beside the workers, in the trainer process: engine core, API, HTTP routes."""

    def __init__(self, tp: int, g: Dict[str, Any], plugins: str) -> None:
        sys.path.insert(0, plugins)
        from vllm.entrypoints.rlhf_routes import RlhfRoutes
        from vllm.v1.engine.async_llm import AsyncLLM
        from vllm.v1.engine.core import EngineCore
        self.executor = Executor(g["ctrl"], g["layout"].workers)
        self.core = EngineCore(self.executor)  # loads the general plugins first
        self.llm = AsyncLLM(self.core)
        self.routes = RlhfRoutes(self.llm)
        self.url = self.routes.url

    def to_workers(self, fn: Any) -> List[Any]:
        """fn(worker, tp_rank) on every worker (a test's own instruction), in worker order."""
        return self.executor.collective_rpc("__test__", args=(fn,))

    def close(self) -> None:
        self.routes.close()
        self.executor.exit()


class Source:
    """vLLM's WeightSource: metadata() then (name, tensor) in that order."""

    def __init__(self, weights: Dict[str, torch.Tensor]) -> None:
        self.weights = weights

    def metadata(self) -> List[Any]:
        from vllm.distributed.weight_transfer.base import ParamMeta
        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.weights.items()]

    def __iter__(self) -> Any:
        return iter(list(self.weights.items()))
