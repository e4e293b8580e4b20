"""Double of sglang/srt/torch_memory_saver_adapter.py over torch_memory_saver: pause(tag)
releases the physical memory behind the tensors allocated under `tag` (their virtual addresses
stay; their content is undefined until resume), resume(tag) maps memory back: the old content
only with `enable_weights_cpu_backup` (torch_memory_saver's cpu backup), else whatever the new
pages hold. Here the weights are the model's parameters; "undefined" is written as a fixed
garbage pattern, so a test sees what an engine that skipped the backup would serve."""

from typing import Any, Dict, Optional

import torch


class TorchMemorySaverAdapter:
    def __init__(self, model: Any, enable_weights_cpu_backup: bool = False) -> None:
        self.model = model
        self.enable_weights_cpu_backup = enable_weights_cpu_backup
        self._backup: Optional[Dict[str, torch.Tensor]] = None
        self.paused = set()

    def pause(self, tag: str) -> None:
        self.paused.add(tag)
        if tag != "weights":
            return
        params = dict(self.model.named_parameters())
        if self.enable_weights_cpu_backup:
            self._backup = {n: p.detach().clone() for n, p in params.items()}
        with torch.no_grad():
            for p in params.values():
                p.data.view(torch.uint8).fill_(0x5A)

    def resume(self, tag: str) -> None:
        self.paused.discard(tag)
        if tag != "weights" or self._backup is None:
            return
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.copy_(self._backup[n])
        self._backup = None
