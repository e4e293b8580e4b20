"""Doubles of vLLM's weight-transfer contract, written from its public docs (docs.vllm.ai,
"Weight Transfer" and "Base Class and Custom Engines"), for testing wtx.vllm without vLLM.

* `install_fake_vllm()`: a `vllm.distributed.weight_transfer.factory` module whose
  WeightTransferEngineFactory keeps a registry and raises on a second registration of a name,
  as vLLM's does (register_engine(name, module_path, class_name) or (name, cls);
  create_engine(config, vllm_config, device, model)).
* Inner transports over torch.distributed (gloo here, where vLLM uses NCCL), the trainer being
  `src`: `BroadcastEngine` (the older contract: `__init__(config, parallel_config)`,
  `receive_weights(update_info, load_weights)`) and `BroadcastEngineV2` (the newest:
  `__init__(config, vllm_config, device, model)`, `receive_weights(update_info)` loading into
  `self.model`); wtx's own TorchBroadcastEngine (dense and sparse) is registered as "sparse".
* `LoaderLlama`: the tiny Llama with a model-owned `load_weights` (vLLM's stacked mapping and
  TP slicing), for the backend's "load_weights" mode.
* `VllmWorkerDouble`: what a vLLM worker does with the engine: builds it through the factory
  and calls the four phases.
"""

import sys
import threading
import types
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from tiny_llama import CONFIG, TpLlama
from wtx.vllm import (LLAMA_STACKED_PARAMS_MAPPING, TorchBroadcastEngine,
                      WtxWeightTransferEngine)


# ------------------------------------------------------------------------------ the factory

class FakeWeightTransferEngineFactory:
    _registry: dict = {}

    @classmethod
    def register_engine(cls, name, module_path_or_cls, class_name=None):
        if name in cls._registry:
            raise ValueError(f"Weight transfer engine '{name}' is already registered.")
        if isinstance(module_path_or_cls, str):
            if class_name is None:
                raise ValueError("class_name is required when registering with module path")
            path = module_path_or_cls

            def loader():
                import importlib
                return getattr(importlib.import_module(path), class_name)

            cls._registry[name] = loader
        else:
            cls._registry[name] = lambda: module_path_or_cls

    @classmethod
    def create_engine(cls, config, vllm_config, device, model):
        if config.backend not in cls._registry:
            raise ValueError(f"Invalid weight transfer backend: {config.backend}. "
                             f"Available engines: {list(cls._registry)}")
        return cls._registry[config.backend]()(config, vllm_config, device, model)


def install_fake_vllm():
    """Puts the fake factory at vllm.distributed.weight_transfer.factory (idempotent)."""
    if "vllm.distributed.weight_transfer.factory" in sys.modules:
        return sys.modules["vllm.distributed.weight_transfer.factory"]
    names = ["vllm", "vllm.distributed", "vllm.distributed.weight_transfer",
             "vllm.distributed.weight_transfer.factory"]
    for n in names:
        sys.modules[n] = types.ModuleType(n)
    factory = sys.modules["vllm.distributed.weight_transfer.factory"]
    factory.WeightTransferEngineFactory = FakeWeightTransferEngineFactory
    FakeWeightTransferEngineFactory.register_engine("bcast", BroadcastEngine)
    FakeWeightTransferEngineFactory.register_engine("bcast2", BroadcastEngineV2)
    # wtx's own torch.distributed transport (dense and sparse), as a registered vLLM engine.
    FakeWeightTransferEngineFactory.register_engine("sparse", TorchBroadcastEngine)
    return factory


@dataclass
class WeightTransferConfig:
    backend: str = "wtx"
    inner: str = "bcast"


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 2
    rank: int = 0


@dataclass
class VllmConfig:
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)


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

class LoaderLlama(TpLlama):
    """TpLlama with vLLM's model-owned loader: HF names through the stacked mapping, sliced to
    this TP rank. `fail_on`: a name whose load raises (a broken loader)."""

    fail_on = None

    stacked_params_mapping = LLAMA_STACKED_PARAMS_MAPPING

    @torch.no_grad()
    def load_weights(self, weights):
        c, tp, r = self.c, self.tp_size, self.tp_rank
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            if name == self.fail_on:
                raise RuntimeError(f"the model's loader cannot load {name}")
            for fused, part, sid in LLAMA_STACKED_PARAMS_MAPPING:
                if part in name:
                    dst = params[name.replace(part, fused)]
                    if fused == ".qkv_proj":
                        q, kv = c["heads"] * c["head"] // tp, c["kv_heads"] * c["head"] // tp
                        off = {"q": 0, "k": q, "v": q + kv}[sid]
                        n = q if sid == "q" else kv
                        dst[off:off + n].copy_(w[r * n:(r + 1) * n])
                    else:
                        n = c["inter"] // tp
                        dst[sid * n:(sid + 1) * n].copy_(w[r * n:(r + 1) * n])
                    break
            else:
                dst = params[name]
                if name.endswith(("o_proj.weight", "down_proj.weight")):
                    n = dst.shape[1]
                    dst.copy_(w[:, r * n:(r + 1) * n])
                elif name.endswith(("embed_tokens.weight", "lm_head.weight")):
                    n = dst.shape[0]
                    dst.copy_(w[r * n:(r + 1) * n])
                else:
                    dst.copy_(w)
            loaded.add(name)
        return loaded


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
        self.engine = factory.WeightTransferEngineFactory.create_engine(
            WeightTransferConfig(inner=inner), VllmConfig(ParallelConfig(2, tp_rank)),
            torch.device("cpu"), model)
        assert isinstance(self.engine, WtxWeightTransferEngine)
        self.engine.process_group = tp_group

    # The four routes / RPCs: init_weight_transfer_engine, start_weight_update,
    # update_weights, finish_weight_update.
    def init_weight_transfer_engine(self, init_info):
        self.engine.init_transfer_engine(self.engine.parse_init_info(init_info))

    def start_weight_update(self):
        self.engine.start_weight_update()

    def update_weights(self, update_info):
        self.engine.update_weights(update_info)

    def finish_weight_update(self):
        return self.engine.finish_weight_update()


# ------------------------------------------------------------------------ the HTTP routes

ROUTES = ("init_weight_transfer_engine", "start_weight_update", "update_weights",
          "finish_weight_update")


class HttpFrontDouble:
    """vLLM's API server routes, POST /<route> with a JSON body ({"init_info": {...}} or
    {"update_info": {...}}), in front of a TP group: each request is relayed to every rank of
    `tp_group` (a broadcast from TP rank 0, as collective_rpc), run on each rank's worker, and
    answered with rank 0's result: 200 {"ok": true, "weight_version": ...} or 500 {"ok": false,
    "error": {"code", "message"}}. POST /shutdown ends serve()."""

    def __init__(self, worker, tp_group, tp_rank):
        import queue
        self.worker, self.tp, self.rank = worker, tp_group, tp_rank
        self.requests, self.answers = queue.Queue(), queue.Queue()
        self.port = None
        if tp_rank == 0:
            self._start_server()

    def _start_server(self):
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        front = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                route = self.path.strip("/")
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                front.requests.put((route, body))
                code, answer = front.answers.get()
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self):
        """Runs requests until /shutdown (every TP rank calls it)."""
        import wtx
        while True:
            box = [self.requests.get() if self.rank == 0 else None]
            dist.broadcast_object_list(box, src=dist.get_global_rank(self.tp, 0)
                                       if hasattr(dist, "get_global_rank") else 0,
                                       group=self.tp)
            route, body = box[0]
            if route == "shutdown":
                if self.rank == 0:
                    self.answers.put((200, {"ok": True}))
                    self.server.shutdown()
                return
            try:
                if route not in ROUTES:
                    raise wtx.Error("INVALID_ARGUMENT", f"no route /{route}")
                arg = body.get("init_info", body.get("update_info"))
                fn = getattr(self.worker, route)
                fn(*([] if arg is None else [arg]))
                answer = (200, {"ok": True,
                                "weight_version": self.worker.engine.weight_version})
            except wtx.Aborted as e:
                answer = (500, {"ok": False, "error": {"code": "E_ABORTED",
                                                       "message": str(e)}})
            except Exception as e:
                answer = (500, {"ok": False, "error": {"code": getattr(e, "code", "ERROR"),
                                                       "message": str(e)}})
            if self.rank == 0:
                self.answers.put(answer)


def http_post(port, route, body=None, timeout=60):
    """The trainer's client: (status, JSON answer)."""
    import json
    import urllib.error
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{port}/{route}",
                                 data=json.dumps(body or {}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
