"""Double of vLLM's layerwise reload (vllm/model_executor/model_loader/reload/layerwise.py at
vllm-project/vllm 01424e4b, the default path: no runtime-bound layers).

* initialize_layerwise_reload(model): for every module with parameters of its own, the live
  Parameter objects are put aside untouched (`kernel_tensors`) and meta placeholders in their
  place keep each weight_loader, wrapped to BUFFER the loads (nothing is written yet) and count
  the elements loaded; a forward pass in this window would meet meta tensors (generation must
  stay paused);
* a layer whose every element was loaded is processed at once: real tensors are materialized,
  the buffered loads replayed into them with the original loaders,
  `quant_method.process_weights_after_loading(layer)` runs, and the results are COPIED into the
  original storage, whose Parameter objects are registered back (same objects, same addresses):
  the live bytes change layer by layer during update_weights;
* a load that reaches a layer after it completed is dropped (vLLM logs it at debug level only);
* finalize_layerwise_reload(model, model_config): layers loaded in part are processed too;
  layers that received nothing keep their old weights (a warning in vLLM).
"""

import logging
import weakref
from typing import Any, Dict, List, Tuple

import torch
from torch import nn

logger = logging.getLogger("vllm.model_executor.model_loader.reload")


class _Info:
    def __init__(self) -> None:
        self.kernel_tensors: Dict[str, nn.Parameter] = {}
        self.loaded: List[Tuple[str, tuple]] = []
        self.load_numel = 0
        self.load_numel_total = 0

    def can_load(self) -> bool:
        return bool(self.kernel_tensors)


LAYERWISE_INFO: "weakref.WeakKeyDictionary[nn.Module, _Info]" = weakref.WeakKeyDictionary()


def _own_params(layer: nn.Module) -> Dict[str, nn.Parameter]:
    return dict(layer.named_parameters(recurse=False))


def _count_loaded(meta: nn.Parameter, loader: Any, args: tuple) -> int:
    """Elements a load writes, counted on a scratch tensor (vLLM counts aten.copy_ on meta)."""
    probe = nn.Parameter(torch.full(meta.shape, float("nan")), requires_grad=False)
    loader(probe, *[torch.ones(a.shape) if torch.is_tensor(a) else a for a in args])
    return int((~probe.data.isnan()).sum())


@torch.no_grad()
def initialize_layerwise_reload(model: nn.Module) -> None:
    for layer in model.modules():
        params = _own_params(layer)
        if not params or layer in LAYERWISE_INFO and LAYERWISE_INFO[layer].can_load():
            continue
        info = LAYERWISE_INFO.setdefault(layer, _Info())
        info.kernel_tensors = params
        info.loaded, info.load_numel = [], 0
        info.load_numel_total = sum(p.numel() for p in params.values())
        for name, p in params.items():
            meta = nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device="meta"),
                                requires_grad=False)
            original = p.weight_loader  # type: ignore[attr-defined]
            meta.weight_loader = _buffering_loader(layer, info, name, original)  # type: ignore[attr-defined]
            delattr(layer, name)
            layer.register_parameter(name, meta)


def _buffering_loader(layer: nn.Module, info: _Info, name: str, original: Any) -> Any:
    def load(param: nn.Parameter, *args: Any) -> None:
        if not info.can_load():
            logger.debug("%s: Excessive loading", layer.__class__.__name__)
            return  # dropped
        info.loaded.append((name, args))
        info.load_numel += _count_loaded(param, original, args)
        if info.load_numel >= info.load_numel_total:
            _layerwise_process(layer, info)
    return load


@torch.no_grad()
def _layerwise_process(layer: nn.Module, info: _Info) -> None:
    for name, kernel in info.kernel_tensors.items():
        real = nn.Parameter(torch.empty_like(kernel.data), requires_grad=False)
        real.weight_loader = kernel.weight_loader  # type: ignore[attr-defined]
        delattr(layer, name)
        layer.register_parameter(name, real)
    for name, args in info.loaded:  # replay the buffered loads, for real
        param = getattr(layer, name)
        param.weight_loader(param, *args)
    quant_method = getattr(layer, "quant_method", None)
    if quant_method is not None:
        quant_method.process_weights_after_loading(layer)
    for name, kernel in info.kernel_tensors.items():  # copy back into the original storage
        loaded = getattr(layer, name)
        if kernel.data_ptr() != loaded.data_ptr():
            kernel.data.copy_(loaded.data)
        delattr(layer, name)
        layer.register_parameter(name, kernel)
    info.kernel_tensors, info.loaded, info.load_numel = {}, [], 0


@torch.no_grad()
def finalize_layerwise_reload(model: nn.Module, model_config: Any) -> None:
    for layer in model.modules():
        info = LAYERWISE_INFO.get(layer)
        if info is None or not info.can_load():
            continue
        if info.load_numel > 0:  # loaded in part: processed as it is
            _layerwise_process(layer, info)
            continue
        logger.warning("%s: no weights loaded; keeping the old weights",
                       layer.__class__.__name__)
        for name, kernel in info.kernel_tensors.items():
            delattr(layer, name)
            layer.register_parameter(name, kernel)
        info.kernel_tensors, info.loaded = {}, []
