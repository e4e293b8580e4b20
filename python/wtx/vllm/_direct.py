"""In-place receive for vLLM's own dense NCCL engine under `reload_mode="direct"`.

vLLM's NCCL engine (vllm/distributed/weight_transfer/nccl_engine.py) receives each tensor of a
round into a fresh buffer (`torch.empty`), broadcast from rank 0 of its communicator
(`model_update_group.broadcast(weight, src=0, stream=...)`, one broadcast per name, in the order
of update_info), and hands it to the model's loader: it has no destination hook, so through it
wtx could only copy out of that buffer. With `reload_mode="direct"` vLLM writes the received
weights straight into the live parameters with no post-load processing (vLLM's
WeightTransferConfig: only for models whose processing leaves the parameters as the checkpoint
has them), so the live parameters hold checkpoint bytes as the manifest maps them, and a source
a rank holds whole can be received where it lives.

`speaks_vllm_nccl(inner)` says whether `inner` is that engine in that mode (its own class, not
a subclass that may change the wire; not packed, whose buffers carry several tensors; its
communicator up); `receive_direct` then runs the same wire protocol over the engine's own
communicator, asking `destination(name, dtype, shape)` for where each tensor goes (the live
view, or None: a fresh buffer) and handing each to `load`. The trainer side is vLLM's own,
unchanged. Any other inner, mode or packing keeps the inner's own receive.
"""

from typing import Any, Callable, List, Optional, Tuple

import torch

_VLLM_NCCL_MODULES = ("vllm.distributed.weight_transfer.nccl_engine",
                      "vllm.backends.distributed.weight_transfer.nccl_engine")


def speaks_vllm_nccl(inner: Any, update_info: Any = None) -> bool:
    """Whether `inner` is vLLM's dense NCCL engine in reload_mode "direct", unpacked (for this
    round's `update_info` too: older vLLM carries `packed` per round), communicator up."""
    cls = type(inner)
    if cls.__name__ != "NCCLWeightTransferEngine" or cls.__module__ not in _VLLM_NCCL_MODULES:
        return False
    if getattr(getattr(inner, "config", None), "reload_mode", "layerwise") != "direct":
        return False
    if getattr(inner, "packed", False) or getattr(update_info, "packed", False):
        return False
    return callable(getattr(getattr(inner, "model_update_group", None), "broadcast", None))


def receive_direct(inner: Any, update_info: Any,
                   destination: Callable[[str, torch.dtype, List[int]], Optional[torch.Tensor]],
                   load: Callable[[List[Tuple[str, torch.Tensor]]], Any]) -> None:
    """One round of vLLM's NCCL wire protocol over `inner`'s communicator, each tensor received
    into `destination(...)` or a fresh buffer on the engine's device, then `load([(name, t)])`.
    REQUIRES: speaks_vllm_nccl(inner, update_info)."""
    group = inner.model_update_group
    device = getattr(inner, "device", None) or "cuda"
    stream = torch.cuda.current_stream() if torch.cuda.is_available() else None
    for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names,
                                       update_info.shapes):
        dtype = getattr(torch, dtype_name)
        into = destination(name, dtype, list(shape))
        weight = into if into is not None else torch.empty(shape, dtype=dtype, device=device)
        group.broadcast(weight, src=0, stream=stream)
        load([(name, weight)])
