"""Double of vllm/distributed/weight_transfer/clients.py (vllm-project/vllm 81ea9e9d; the
latest protocol's finish_weight_update(weight_version=None)): HTTPVLLMWeightSyncClient posts
each call to the API server's route and raises on an error status (requests'
raise_for_status; urllib here)."""

import json
import urllib.error
import urllib.request
from typing import Any, Dict, Optional


class HTTPError(RuntimeError):
    def __init__(self, status: int, body: Any, url: str) -> None:
        super().__init__(f"{status} Server Error for url: {url}: {body}")
        self.status = status
        self.body = body


def post(base_url: str, path: str, body: Optional[Dict[str, Any]] = None,
         timeout: float = 300) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base_url}/{path}", data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raise HTTPError(e.code, json.loads(e.read() or b"null"), req.full_url) from None


def get(base_url: str, path: str, timeout: float = 300) -> Any:
    try:
        with urllib.request.urlopen(f"{base_url}/{path}", timeout=timeout) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raise HTTPError(e.code, json.loads(e.read() or b"null"), f"{base_url}/{path}") from None


class HTTPVLLMWeightSyncClient:
    def __init__(self, base_url: str, timeout: float = 300) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _post(self, path: str, json_body: Optional[Dict[str, Any]] = None) -> Any:
        return post(self.base_url, path, json_body, self.timeout)

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        self._post("init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self._post("start_weight_update")

    def update_weights(self, update_info: Any) -> None:
        self._post("update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        self._post("finish_weight_update",
                   None if weight_version is None else {"weight_version": weight_version})
