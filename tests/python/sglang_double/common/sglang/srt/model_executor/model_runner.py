"""Double of sglang/srt/model_executor/model_runner.py's weight-update methods (v0.5.12.post1,
lines 1750-2131 and 3645-3675; stored model_runner.py at 0005834c matches them).

* init_weights_update_group(master_address, master_port, rank_offset, world_size, group_name,
  backend="nccl"): rank = rank_offset + tp_rank; the group goes into self._model_update_group
  (gloo here: GROUPS maps the address to a group the test made);
* update_weights_from_distributed(names, dtypes, shapes, group_name, load_format=None):
  an unknown group is an AssertionError (raised, not returned); "flattened_bucket" receives one
  uint8 buffer; otherwise every tensor into torch.empty(shape, dtype, device=self.device) with
  an async broadcast from src 0 each, then ONE self.model.load_weights(list); a failure returns
  (False, "Failed to update parameter online: ... partially updated ...");
* update_weights_from_tensor(named_tensors, load_format=None): no try: a loader error, or a
  format that is not None/"direct"/"flattened_bucket"/a --custom-weight-loader, RAISES
  (NotImplementedError("Unknown load_format=...")); LocalSerializedTensor entries unwrapped
  with this rank's value; the custom loader is called as loader(self.model, named_tensors);
* update_weights_from_disk(model_path, load_format, weight_name_filter=None,
  recapture_cuda_graph=False).
"""

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from sglang.srt.utils import MultiprocessingSerializer

GROUPS: Dict[str, Any] = {}  # test-only: "address:port" -> the gloo group standing in for NCCL


@dataclass
class LocalSerializedTensor:
    """The i-th element of `values` is rank i's serialized tensor."""
    values: List[bytes]

    def get(self, rank: int) -> Any:
        return MultiprocessingSerializer.deserialize(self.values[rank])


def _unwrap_tensor(tensor: Any, tp_rank: int, device: Any) -> torch.Tensor:
    if isinstance(tensor, LocalSerializedTensor):
        tensor = tensor.get(tp_rank)
    return tensor.to(device)


def dynamic_import(func_path: str) -> Callable[..., Any]:
    parts = func_path.split(".")
    if len(parts) < 2:
        raise ValueError("func_path should contain both module name and func name (such as "
                         "'module.func')")
    module = importlib.import_module(".".join(parts[:-1]))
    return getattr(module, parts[-1])


def _flat_split(flat: torch.Tensor, names: List[str], dtypes: List[torch.dtype],
                shapes: List[List[int]]) -> List[Tuple[str, torch.Tensor]]:
    """FlattenedTensorBucket.reconstruct_tensors: byte slices viewed back (views)."""
    out, at = [], 0
    for name, dtype, shape in zip(names, dtypes, shapes):
        n = int(torch.Size(shape).numel()) * torch.empty(0, dtype=dtype).element_size()
        out.append((name, flat[at:at + n].view(dtype).reshape(shape)))
        at += n
    return out


class ServerArgs:
    def __init__(self, custom_weight_loader: Optional[List[str]] = None,
                 enable_weights_cpu_backup: bool = False) -> None:
        self.custom_weight_loader = custom_weight_loader or []
        self.enable_weights_cpu_backup = enable_weights_cpu_backup


class ModelRunner:
    def __init__(self, model: Any, tp_rank: int, device: Any = "cpu",
                 server_args: Optional[ServerArgs] = None, tp_size: int = 1,
                 pp_rank: int = 0, pp_size: int = 1, dp_rank: Optional[int] = None) -> None:
        # The parallel attributes ModelRunner.__init__ keeps (model_runner.py: tp_rank,
        # tp_size, dp_rank, pp_rank, pp_size from its arguments).
        self.model = model
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.pp_rank = pp_rank
        self.pp_size = pp_size
        self.dp_rank = dp_rank
        self.device = torch.device(device)
        self.server_args = server_args or ServerArgs()
        self._model_update_group: Dict[str, Any] = {}

    def init_weights_update_group(self, master_address: str, master_port: int,
                                  rank_offset: int, world_size: int, group_name: str,
                                  backend: str = "nccl") -> Tuple[bool, str]:
        assert dist.is_initialized(), "Default torch process group must be initialized"
        assert group_name != "", "Group name cannot be empty"
        try:
            self._model_update_group[group_name] = GROUPS[f"{master_address}:{master_port}"]
            return True, "Succeeded to initialize custom process group."
        except Exception as e:
            return False, f"Failed to initialize custom process group: {e}."

    def update_weights_from_distributed(self, names: List[str], dtypes: List[Any],
                                        shapes: List[List[int]], group_name: str,
                                        load_format: Optional[str] = None) -> Tuple[bool, str]:
        assert group_name in self._model_update_group, (
            f"Group {group_name} not in {list(self._model_update_group.keys())}. "
            "Please call `init_weights_update_group` first.")
        group = self._model_update_group[group_name]
        src = dist.get_global_rank(group, 0)
        try:
            dts = [d if isinstance(d, torch.dtype) else getattr(torch, d) for d in dtypes]
            if load_format == "flattened_bucket":
                total = sum(int(torch.Size(s).numel()) * torch.empty(0, dtype=d).element_size()
                            for d, s in zip(dts, shapes))
                flat = torch.empty(total, dtype=torch.uint8, device=self.device)
                dist.broadcast(flat, src=src, group=group)
                self.model.load_weights(_flat_split(flat, names, dts, shapes))
                return True, "Succeeded to update parameter online."
            weights, handles = [], []
            for name, dtype, shape in zip(names, dts, shapes):
                weight = torch.empty(shape, dtype=dtype, device=self.device)
                handles.append(dist.broadcast(weight.view(torch.uint8), src=src, group=group,
                                              async_op=True))  # gloo: bytes
                weights.append((name, weight))
            for handle in handles:
                handle.wait()
            self.model.load_weights(weights)
            return True, "Succeeded to update parameter online."
        except Exception as e:
            return False, (f"Failed to update parameter online: {e}. The full weights of the "
                           "ModelRunner are partially updated. Please discard the whole "
                           "weights.")

    def update_weights_from_tensor(self, named_tensors: Any,
                                   load_format: Optional[str] = None) -> Tuple[bool, str]:
        if load_format == "flattened_bucket":
            flat, meta = named_tensors["flattened_tensor"], named_tensors["metadata"]
            self.model.load_weights(_flat_split(flat, [m[0] for m in meta],
                                                [m[2] for m in meta], [m[1] for m in meta]))
            return True, "Success"
        named_tensors = [(name, _unwrap_tensor(t, tp_rank=self.tp_rank, device=self.device))
                         for name, t in named_tensors]
        if load_format == "direct":
            params = dict(self.model.named_parameters())
            for name, t in named_tensors:
                params[name].data.copy_(t)
        elif load_format in self.server_args.custom_weight_loader:
            custom_loader = dynamic_import(load_format)
            custom_loader(self.model, named_tensors)
        elif load_format is None:
            self.model.load_weights(named_tensors)
        else:
            raise NotImplementedError(f"Unknown load_format={load_format}")
        return True, "Success"

    def check_weights(self, action: str) -> Any:  # 3574-3575 (the weight checker's actions)
        raise ValueError(f"Unsupported check_weights action: {action}")

    def update_weights_from_disk(self, model_path: str, load_format: str,
                                 weight_name_filter: Optional[Callable[[str], bool]] = None,
                                 recapture_cuda_graph: bool = False) -> Tuple[bool, str]:
        return False, f"Failed to get weights iterator: no checkpoint at {model_path}."
