"""Double of SGLang's TokenizerManager at v0.5.12.post1 (tokenizer_control_mixin.py stored at
369fa46b, byte-identical to the release's blob 05382e073ed; tokenizer_manager.py release blob
6375a1d8b7e through THUDM/slime's patch at d87391e3). The shared hops: tokenizer_base.
* check_weights (control mixin 763-774) returns THREE values (success, message, ranks): ranks
  is None unless a reply has a payload, then every reply's raw payload (one per DP rank);
* _update_weight_version_if_provided (884-889) writes server_args.weight_version, which
  GET /model_info reports."""

from types import SimpleNamespace
from typing import Any, List, Optional, Tuple

from sglang.srt.managers.tokenizer_base import TokenizerManagerBase


class TokenizerManager(TokenizerManagerBase):
    def __init__(self, send: Any) -> None:
        super().__init__(send)
        self.server_args = SimpleNamespace(weight_version="default")

    def _update_weight_version_if_provided(self, weight_version: Optional[str]) -> None:
        if weight_version is not None:
            self.server_args.weight_version = weight_version

    def model_info(self) -> dict:
        return {"weight_version": self.server_args.weight_version}

    async def check_weights(self, obj: Any,
                            request: Any = None) -> Tuple[bool, str, Optional[List[Any]]]:
        results = self._communicate(obj)
        success, message = self.merge_results(results)
        ranks = None
        if any(r.payload is not None for r in results):
            ranks = [r.payload for r in results]
        return success, message, ranks
