"""Test transports and a TP-2 engine driver for wtx.vllm's torch_broadcast paths.

vLLM's own modules (factory, base class, config) come from vllm_double/, written from vLLM's
source; the full worker / engine core / HTTP stack as vLLM runs it is in vllm_world.py
(test_vllm_main.py). Here:

* `install_fake_vllm()`: vllm_double/ on sys.path, with the transports below registered in its
  WeightTransferEngineFactory.
* Inner transports over torch.distributed (gloo here, where vLLM uses NCCL), the trainer being
  `src`: `BroadcastEngine` (the older contract: `__init__(config, parallel_config)`,
  `receive_weights(update_info, load_weights)`) and `BroadcastEngineV2` (the newest:
  `__init__(config, vllm_config, device, model)`, `receive_weights(update_info)` loading into
  `self.model`); wtx's own TorchBroadcastEngine (dense and sparse) is registered as "sparse".
* `LoaderLlama` (vllm_model.VllmLlama): the tiny Llama with a model-owned `load_weights` (vLLM's stacked mapping and
  TP slicing), for the backend's "load_weights" mode.
* `VllmWorkerDouble`: what a vLLM worker does with the engine: builds it through the factory
  and calls the four phases.
"""

import os
import sys
import types
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tiny_llama import CONFIG
from vllm_model import VllmLlama
from wtx.vllm import TorchBroadcastEngine, WtxWeightTransferEngine


# ------------------------------------------------------------------------------ the factory

def install_fake_vllm():
    """vLLM's weight-transfer modules from vllm_double/ (written from vLLM's source), with the
    test transports below registered in its factory (idempotent)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.join(here, "vllm_double") not in sys.path:
        sys.path.insert(0, os.path.join(here, "vllm_double"))
    from vllm.distributed.weight_transfer import factory
    for name, cls in (("bcast", BroadcastEngine), ("bcast2", BroadcastEngineV2),
                      ("sparse", TorchBroadcastEngine)):
        if name not in factory.WeightTransferEngineFactory._registry:
            factory.WeightTransferEngineFactory.register_engine(name, cls)
    return factory


def weight_transfer_config():
    from vllm.config import WeightTransferConfig
    return WeightTransferConfig(backend="wtx")


def vllm_config(tp_size, rank):
    return types.SimpleNamespace(
        parallel_config=types.SimpleNamespace(tensor_parallel_size=tp_size, world_size=tp_size,
                                              rank=rank),
        model_config=types.SimpleNamespace(dtype=torch.bfloat16))


# ------------------------------------------------------------------------- inner transports

@dataclass
class BroadcastInitInfo:
    src: int = 2


@dataclass
class BroadcastUpdateInfo:
    names: list
    dtype_names: list
    shapes: list

    def __post_init__(self):
        if not (len(self.names) == len(self.dtype_names) == len(self.shapes)):
            raise ValueError(f"names, dtype_names and shapes differ in length: "
                             f"{len(self.names)}, {len(self.dtype_names)}, {len(self.shapes)}")


def _recv(shape, dtype, src):
    t = torch.empty(shape, dtype=dtype)
    dist.broadcast(t.view(torch.uint8), src=src)  # gloo has no bf16 collectives: bytes
    return t


class BroadcastEngine:
    """The older contract: (config, parallel_config); receive_weights(info, load_weights)."""

    init_info_cls = BroadcastInitInfo
    update_info_cls = BroadcastUpdateInfo
    fail_after = None  # a test hook: raise in the transport after this many tensors

    def __init__(self, config, parallel_config):
        self.config, self.parallel_config, self.src = config, parallel_config, None

    def parse_init_info(self, d):
        return BroadcastInitInfo(**d)

    def parse_update_info(self, d):
        return BroadcastUpdateInfo(**d)

    def init_transfer_engine(self, info):
        self.src = info.src

    def receive_weights(self, info, load_weights):
        for i, (name, dtype, shape) in enumerate(zip(info.names, info.dtype_names, info.shapes)):
            load_weights([(name, _recv(shape, getattr(torch, dtype), self.src))])

    def shutdown(self):
        self.src = None

    @staticmethod
    def trainer_send_weights(iterator, trainer_args):
        src = trainer_args.get("src", 2)
        for name, t in iterator:
            dist.broadcast(t.contiguous().view(torch.uint8), src=src)


class BroadcastEngineV2(BroadcastEngine):
    """The newest contract: (config, vllm_config, device, model); the engine loads into
    self.model through its load_weights."""

    def __init__(self, config, vllm_config, device, model):
        super().__init__(config, vllm_config.parallel_config)
        self.model = model

    def start_weight_update(self):
        pass

    def finish_weight_update(self):
        pass

    def receive_weights(self, info):
        for name, dtype, shape in zip(info.names, info.dtype_names, info.shapes):
            self.model.load_weights(weights=[(name, _recv(shape, getattr(torch, dtype),
                                                           self.src))])


# ------------------------------------------------------------------------------- the model

# vLLM's model-owned loader (HF names through the stacked mapping, each parameter's
# weight_loader slicing to this TP rank; `fail_on`: a name whose load raises): vllm_model.py.
LoaderLlama = VllmLlama


def make_model(tp_rank, group):
    return LoaderLlama(2, tp_rank, group, config=CONFIG)


# ------------------------------------------------------------------------------ the worker

class VllmWorkerDouble:
    """A vLLM worker's side: the engine from the factory, then the four phases."""

    def __init__(self, model, tp_rank, tp_group, inner="bcast"):
        factory = install_fake_vllm()
        import wtx.vllm
        wtx.vllm.register()
        wtx.vllm.register()  # idempotent, as a worker re-imported by vLLM would do
        self.model = model
        self.inner = inner
        self.engine = factory.WeightTransferEngineFactory.create_engine(
            weight_transfer_config(), vllm_config(2, tp_rank), torch.device("cpu"), model)
        assert isinstance(self.engine, WtxWeightTransferEngine)
        self.engine.process_group = tp_group

    # The four routes / RPCs: init_weight_transfer_engine, start_weight_update,
    # update_weights, finish_weight_update.
    def init_weight_transfer_engine(self, init_info):
        init_info = dict(init_info)
        init_info.setdefault("inner", self.inner)
        self.engine.init_transfer_engine(self.engine.parse_init_info(init_info))

    def start_weight_update(self):
        self.engine.start_weight_update()

    def update_weights(self, update_info):
        self.engine.update_weights(update_info)

    def finish_weight_update(self):
        return self.engine.finish_weight_update()
