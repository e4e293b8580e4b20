"""Double of SGLang's TokenizerManager on main (tokenizer_control_mixin.py at 00a2ca2e,
tokenizer_manager.py at 001067ff). The shared hops: tokenizer_base.
* check_weights (control mixin 979-999) returns FOUR values (success, message, ranks,
  per_engine_checksum): each reply's payload is a list of ChecksumInfo (one per TP rank);
  ranks flattens them as plain dicts (msgspec_to_builtins), per_engine_checksum is a sha256
  over their per_gpu_checksum in order;
* _update_weight_version_if_provided (1104-1110) records the version in the runtime context
  (record_config_updates("tokenizer.weight_version", ...), tokenizer_manager 2031-2038);
  server_args.weight_version is no longer written; GET /model_info reports
  config_value("weight_version") (http_server 769-771)."""

import dataclasses
import hashlib
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

from sglang.srt.managers.tokenizer_base import TokenizerManagerBase


class TokenizerManager(TokenizerManagerBase):
    def __init__(self, send: Any) -> None:
        super().__init__(send)
        self.server_args = SimpleNamespace(weight_version="default")
        self._context: Dict[str, Any] = {"weight_version": "default"}

    def record_config_updates(self, source: str, **fields: Any) -> None:
        self._context.update(fields)

    def config_value(self, name: str) -> Any:
        return self._context[name]

    def _update_weight_version_if_provided(self, weight_version: Optional[str]) -> None:
        if weight_version is not None:
            self.record_config_updates("tokenizer.weight_version", weight_version=weight_version)

    def model_info(self) -> dict:
        return {"weight_version": self.config_value("weight_version")}

    async def check_weights(self, obj: Any, request: Any = None
                            ) -> Tuple[bool, str, Optional[List[Dict]], Optional[str]]:
        results = self._communicate(obj)
        success, message = self.merge_results(results)
        ranks, per_engine_checksum = None, None
        if any(r.payload is not None for r in results):
            infos = [info for r in results if r.payload is not None for info in r.payload]
            h = hashlib.sha256()
            for info in infos:
                h.update(info.per_gpu_checksum.encode())
            per_engine_checksum = h.hexdigest()
            ranks = [dataclasses.asdict(info) for info in infos]
        return success, message, ranks, per_engine_checksum
