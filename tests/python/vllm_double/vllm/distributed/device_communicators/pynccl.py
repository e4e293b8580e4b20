"""Double of vllm/distributed/device_communicators/pynccl.py's PyNcclCommunicator, as the weight
transfer engines use it (vllm/distributed/weight_transfer/nccl_engine.py at vllm-project/vllm
71364e12 and find_string id 56585172333: `self.model_update_group.broadcast(weight, src=0,
stream=torch.cuda.current_stream())`; the constructor at 0531c222: `rank`/`world_size` are the
rank and size in the communicator's group, not global ranks).

NCCL is gloo here: a broadcast goes over the torch.distributed group the test made, as bytes
(gloo has no bf16 collectives); `src` is the rank within this communicator (torch.distributed
wants the global rank, so it is translated).
"""

from typing import Any, Optional

import torch
import torch.distributed as dist


class PyNcclCommunicator:
    """A communicator over `group` (a torch.distributed group; rank 0 of it is the trainer)."""

    def __init__(self, group: Any, device: Any = None) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.device = device

    def broadcast(self, tensor: torch.Tensor, src: int, stream: Optional[Any] = None) -> None:
        """Every member receives `tensor` from member `src`, in place (contiguous, as NCCL
        needs: a buffer's data pointer)."""
        assert tensor.is_contiguous(), "NCCL broadcasts a contiguous buffer"
        dist.broadcast(tensor.view(torch.uint8), src=dist.get_global_rank(self.group, src),
                       group=self.group)
