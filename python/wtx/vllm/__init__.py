"""wtx for vLLM: a weight-transfer backend and a worker extension (docs/vllm.md).

* `WtxWeightTransferEngine`, registered under the name "wtx" by `register()`: vLLM's pluggable
  weight transfer (`--weight-transfer-config '{"backend": "wtx"}'`) with every update a wtx
  transaction over the TP group, wrapping an inner transport ("nccl", "ipc", "sparse_nccl" or
  any registered name) that moves the bytes.
* `WtxWorkerExtension` (`--worker-extension-cls wtx.vllm.WtxWorkerExtension`): the same
  transactions under the extension's own call names.
* `TorchBroadcastEngine` ("torch_broadcast"): an inner transport over torch.distributed
  broadcast (gloo or NCCL), dense tensors and sparse patches, usable without vLLM.
* `manifest_from_module`: a rank's manifest from a live module with vLLM's fused layout.

Importing this package does not import vLLM: without it the classes work against any object
with the same shape (the tests' doubles).
"""

from ._broadcast import TorchBroadcastEngine
from ._broadcast import update_info as broadcast_update_info
from ._engine import (EXPECTED_VERSION_NAME, WtxInitInfo, WtxUpdateInfo, expected_version_tensor,
                      WtxWeightTransferEngine, register, register_inner, trainer_update_info)
from ._extension import LLAMA_STACKED_PARAMS_MAPPING, WtxWorkerExtension, manifest_from_module

__all__ = ["EXPECTED_VERSION_NAME", "LLAMA_STACKED_PARAMS_MAPPING", "TorchBroadcastEngine",
           "WtxInitInfo", "broadcast_update_info", "expected_version_tensor",
           "WtxUpdateInfo", "WtxWeightTransferEngine", "WtxWorkerExtension",
           "manifest_from_module", "register", "register_inner", "trainer_update_info"]
