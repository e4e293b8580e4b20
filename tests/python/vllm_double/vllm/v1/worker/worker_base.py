"""Double of vllm/v1/worker/worker_base.py (vllm-project/vllm 02432253): WorkerWrapperBase.
init_worker loads the general plugins BEFORE it builds the worker (so an entry-point plugin's
registrations are in place in every worker process), then injects the worker extension class,
asserting it adds no attribute the worker already has; execute_method resolves a method name
on the worker (collective_rpc's path) and re-raises what it raises."""

from typing import Any, Dict, Optional

from vllm.plugins import load_general_plugins
from vllm.v1.worker.gpu_worker import Worker


class WorkerWrapperBase:
    def __init__(self) -> None:
        self.worker: Optional[Worker] = None

    def init_worker(self, all_kwargs: Dict[str, Any], worker_extension_cls: Any = None) -> None:
        load_general_plugins()
        worker_class = Worker
        if worker_extension_cls is not None and worker_extension_cls not in worker_class.__bases__:
            for attr in dir(worker_extension_cls):
                if attr.startswith("__"):
                    continue
                assert not hasattr(worker_class, attr), (
                    f"Worker class {worker_class} already has an attribute {attr}, which "
                    f"conflicts with the worker extension class {worker_extension_cls}.")
            worker_class.__bases__ = worker_class.__bases__ + (worker_extension_cls,)
        self.worker = worker_class(**all_kwargs)

    def execute_method(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.worker, method)(*args, **kwargs)

