"""Double of vllm/distributed/weight_transfer/packed_tensor.py's NCCL half (vllm-project/vllm
00a9ccfb, find_string id 69331762450; main's trainer engine sends packed by default:
NCCLTrainerInitInfo.packed = True, vllm/backends/distributed/weight_transfer/nccl_engine.py
at 055e47c2).

The wire: the sender packs tensors, in iteration order, into one uint8 buffer until the bytes
gathered exceed `buffer_size_bytes` (the tensor that crosses the bound is in the chunk) or the
iterator ends, and broadcasts it from `src`; the receiver forms the same chunks from the
metadata alone, receives each into a fresh `torch.empty` buffer and hands
`post_unpack_func` the chunk's (name, tensor) list, each tensor a VIEW of that buffer. A chunk
is never re-used by the receiver (a fresh buffer each), so a view stays valid as long as it is
referenced. CUDA streams and the `num_buffers` ring are not modeled (gloo is synchronous).
"""

import math
from typing import Any, Callable, Iterator, List, Tuple

import torch

DEFAULT_PACKED_BUFFER_SIZE_BYTES = 1024 * 1024 * 1024
DEFAULT_PACKED_NUM_BUFFERS = 2

_Meta = Tuple[str, List[int], torch.dtype, int]


def _unpack(packed: torch.Tensor, metas: List[_Meta]) -> List[Tuple[str, torch.Tensor]]:
    parts = packed.split([m[3] for m in metas])
    return [(name, part.view(dtype).view(*shape))
            for (name, shape, dtype, _), part in zip(metas, parts)]


def packed_nccl_broadcast_producer(iterator: Iterator[Tuple[str, torch.Tensor]], group: Any,
                                   src: int, post_iter_func: Callable[[Any], torch.Tensor],
                                   buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES,
                                   num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS) -> None:
    pending: List[torch.Tensor] = []
    size = 0
    for item in iterator:
        flat = post_iter_func(item).contiguous().view(torch.uint8).view(-1)
        pending.append(flat)
        size += flat.numel()
        if size > buffer_size_bytes:
            group.broadcast(torch.cat(pending), src=src)
            pending, size = [], 0
    if pending:
        group.broadcast(torch.cat(pending), src=src)


def packed_nccl_broadcast_consumer(
        iterator: Iterator[Tuple[str, Tuple[List[int], torch.dtype]]], group: Any, src: int,
        post_unpack_func: Callable[[List[Tuple[str, torch.Tensor]]], Any],
        buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES,
        num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS, device: Any = "cuda") -> None:
    metas: List[_Meta] = []
    size = 0

    def flush() -> None:
        packed = torch.empty(size, dtype=torch.uint8, device=device)
        group.broadcast(packed, src=src)
        post_unpack_func(_unpack(packed, metas))

    for name, (shape, dtype) in iterator:
        n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()  # torch 1.13
        metas.append((name, list(shape), dtype, n))
        size += n
        if size > buffer_size_bytes:
            flush()
            metas, size = [], 0
    if metas:
        flush()
