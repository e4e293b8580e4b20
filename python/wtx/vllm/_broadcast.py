"""An inner transport over torch.distributed broadcast: "torch_broadcast".

For a trainer and engine ranks in one torch.distributed world (gloo on CPU, NCCL on GPU): the
trainer (`src`) broadcasts each tensor in update_info order; every engine rank receives it and
hands it to the loader. A name whose `counts` entry is an integer is a sparse patch: int64 flat
indices, then that many values. Bytes travel as uint8 (gloo has no bf16 collectives).

A consumer that knows where each tensor lives may set `destination(name, dtype, shape)`: a
tensor it returns (a contiguous view of live memory, say) receives the broadcast in place of a
fresh buffer, and is what load_weights then gets (the wtx backend lands full tensors straight in
the live parameters this way); None: a fresh buffer.

It implements vLLM's older engine contract (`__init__(config, parallel_config)`,
`receive_weights(update_info, load_weights)`, static `trainer_send_weights`), which the wtx
backend wraps; registered in wtx's own inner registry, so `{"inner": "torch_broadcast"}` works
with or without vLLM (examples/rl_loop, the backend benchmark).
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist


@dataclass
class BroadcastInitInfo:
    """src: the trainer's global rank; group: a process group (in-process callers only;
    None: the default group)."""

    src: int = 0
    group: Any = None


@dataclass
class BroadcastUpdateInfo:
    """names, dtype_names (torch dtype names), shapes (full shapes; of the values for a
    patch), counts (per name: None for a dense tensor, n for a patch of n elements)."""

    names: List[str]
    dtype_names: List[str]
    shapes: List[List[int]]
    counts: Optional[List[Optional[int]]] = None

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = [None] * len(self.names)
        lengths = (len(self.names), len(self.dtype_names), len(self.shapes), len(self.counts))
        if len(set(lengths)) != 1:
            raise ValueError("names, dtype_names, shapes and counts differ in length: "
                             f"{lengths}")
        for name, d in zip(self.names, self.dtype_names):
            if not isinstance(getattr(torch, str(d), None), torch.dtype):
                raise ValueError(f"dtype_names: '{d}' of {name} is not a torch dtype")


def _bcast(t: torch.Tensor, src: int, group: Any) -> None:
    dist.broadcast(t.contiguous().view(torch.uint8), src=src, group=group)


class TorchBroadcastEngine:
    """The inner transport "torch_broadcast" (module docstring)."""

    init_info_cls = BroadcastInitInfo
    update_info_cls = BroadcastUpdateInfo

    def __init__(self, config: Any, parallel_config: Any = None) -> None:
        self.config = config
        self.parallel_config = parallel_config
        self.info: Optional[BroadcastInitInfo] = None
        # (name, dtype, shape) -> a tensor to receive into, or None (module docstring).
        self.destination: Optional[Callable[[str, torch.dtype, List[int]],
                                            Optional[torch.Tensor]]] = None

    def parse_init_info(self, d: Dict[str, Any]) -> BroadcastInitInfo:
        """init_info dict -> BroadcastInitInfo (TypeError names an unknown key)."""
        return BroadcastInitInfo(**d)

    def parse_update_info(self, d: Dict[str, Any]) -> BroadcastUpdateInfo:
        """update_info dict -> BroadcastUpdateInfo (ValueError names the bad field)."""
        return BroadcastUpdateInfo(**d)

    def init_transfer_engine(self, info: BroadcastInitInfo) -> None:
        """Records the sender and the group; the world is the caller's (init_process_group)."""
        self.info = info

    def receive_weights(self, info: BroadcastUpdateInfo,
                        load_weights: Callable[[List[Tuple[str, Any]]], Any]) -> None:
        """Receives every entry of `info` in order and hands each to load_weights: (name,
        tensor), or (name, (indices, values)) for a patch. RuntimeError when not initialized
        or when the sender is gone."""
        if self.info is None:
            raise RuntimeError("torch_broadcast: init_transfer_engine first")
        src, group = self.info.src, self.info.group
        counts: Sequence[Optional[int]] = info.counts or []
        for name, dtype, shape, n in zip(info.names, info.dtype_names, info.shapes, counts):
            dt = getattr(torch, dtype)
            if n is None:
                into = self.destination(name, dt, list(shape)) if self.destination else None
                t = into if into is not None else torch.empty(list(shape), dtype=dt)
                _bcast(t, src, group)
                load_weights([(name, t)])
            else:
                idx = torch.empty([n], dtype=torch.int64)
                val = torch.empty([n], dtype=dt)
                _bcast(idx, src, group)
                _bcast(val, src, group)
                load_weights([(name, (idx, val))])

    def shutdown(self) -> None:
        """Forgets the sender (the process group is the caller's)."""
        self.info = None

    @staticmethod
    def trainer_send_weights(iterator: Iterator[Tuple[str, Any]],
                             trainer_args: Dict[str, Any]) -> None:
        """Broadcasts each (name, tensor) or (name, (indices, values)) from trainer_args["src"]
        (default: this rank) over trainer_args["group"] (default: the default group)."""
        group = trainer_args.get("group")
        src = trainer_args.get("src", dist.get_rank())
        for _, value in iterator:
            for t in (value if isinstance(value, tuple) else (value,)):
                _bcast(t, src, group)


def update_info(items: Sequence[Tuple[str, Any]]) -> Dict[str, Any]:
    """The torch_broadcast update_info of `items`: dense (name, tensor) or sparse (name,
    (indices, values))."""
    names, dtypes, shapes, counts = [], [], [], []
    for name, value in items:
        names.append(name)
        t = value[1] if isinstance(value, tuple) else value
        dtypes.append(str(t.dtype).replace("torch.", ""))
        shapes.append(list(t.shape))
        counts.append(int(value[0].numel()) if isinstance(value, tuple) else None)
    return {"names": names, "dtype_names": dtypes, "shapes": shapes, "counts": counts}
