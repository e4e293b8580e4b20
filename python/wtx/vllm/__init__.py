"""wtx for vLLM: a weight-transfer backend, its trainer engine and a worker extension
(docs/vllm.md).

* `register()`, the `vllm.general_plugins` entry point (declared in the package metadata, so
  vLLM loads it in every process it starts): registers the "wtx" worker engine and trainer
  engine with vLLM's factories and hooks the serving gate into vLLM's worker and engine core.
* `WtxWeightTransferEngine` ("wtx"): `--weight-transfer-config '{"backend": "wtx"}'`, every
  update a wtx transaction over the TP group, wrapping an inner transport ("nccl", "ipc",
  "sparse_nccl", "torch_broadcast" or any registered name) that moves the bytes.
* `WtxTrainerWeightTransferEngine` / `WtxTrainerInitInfo` ("wtx" trainer engine): wraps the
  inner transport's own trainer engine and computes the expected version beside the send.
* `WtxWorkerExtension` (`--worker-extension-cls wtx.vllm.WtxWorkerExtension`): the same
  transactions under the extension's own call names (vLLM releases without weight transfer).
* `TorchBroadcastEngine` ("torch_broadcast"): an inner transport over torch.distributed
  broadcast (gloo or NCCL), dense tensors and sparse patches, usable without vLLM.
* `manifest_from_module`: a rank's manifest from a live module with vLLM's fused layout.

Importing this package does not import vLLM: without it the classes work against any object
with the same shape (the tests' doubles).
"""

from ._broadcast import TorchBroadcastEngine
from ._broadcast import update_info as broadcast_update_info
from ._engine import (EXPECTED_VERSION_NAME, InvalidInfo, WtxInitInfo, WtxUpdateInfo,
                      WtxWeightTransferEngine, expected_version_tensor, holds, register_inner,
                      trainer_update_info)
from ._extension import LLAMA_STACKED_PARAMS_MAPPING, WtxWorkerExtension, manifest_from_module
from ._plugin import check_contract, install_hooks, register
from ._trainer import WtxTrainerInitInfo, WtxTrainerWeightTransferEngine

__all__ = ["EXPECTED_VERSION_NAME", "InvalidInfo", "LLAMA_STACKED_PARAMS_MAPPING",
           "TorchBroadcastEngine", "WtxInitInfo", "WtxTrainerInitInfo",
           "WtxTrainerWeightTransferEngine", "WtxUpdateInfo", "WtxWeightTransferEngine",
           "WtxWorkerExtension", "broadcast_update_info", "check_contract",
           "expected_version_tensor", "holds", "install_hooks", "manifest_from_module",
           "register", "register_inner", "trainer_update_info"]
