"""Double of vLLM's dev-mode RLHF routes (vllm/entrypoints/serve/dev/rlhf/api_router.py,
vllm-project/vllm 0100a212) and of the error handling around them (error_response.py
ba638200, handlers/http.py 0f17ee06), served by http.server in front of an engine client (the
AsyncLLM methods: collective_rpc to the workers, pause/resume/weight version on the engine
core).

Replies as vLLM's: 200 {"message": "Weight transfer initialized" | "Weight update started" |
"Weights updated" | "Weight update finished"}; 400 {"error": {"message": "Missing 'init_info'
in request body", ...}} for a missing body field; an exception below (a worker's error,
wrapped "Worker failed with error '...'" by the executor, then "Call to <m> method failed:" by
the engine core client) is 500 {"error": {"message", "type": "InternalServerError", "code":
500, "param": null}}. /pause, /resume, /is_paused, /weight_info as vLLM's."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Tuple


def _error(code: int, message: str, kind: str) -> Tuple[int, Dict[str, Any]]:
    return code, {"error": {"message": message, "type": kind, "code": code, "param": None}}


class RlhfRoutes:
    def __init__(self, engine_client: Any) -> None:
        self.client = engine_client
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, method: str, route: str, body: Any) -> Tuple[int, Any]:
        c = self.client
        try:
            if method == "GET" and route == "is_paused":
                return 200, {"is_paused": c.is_paused()}
            if method == "GET" and route == "weight_info":
                return 200, {"weight_version": c.get_weight_version()}
            if route == "pause":
                try:
                    c.pause_generation(mode=(body or {}).get("mode", "abort"))
                except ValueError as e:
                    return 400, {"error": str(e)}
                return 200, {"status": "paused"}
            if route == "resume":
                try:
                    c.resume_generation()
                except Exception as e:
                    return 500, {"error": f"Failed to resume generation: {e}"}
                return 200, {"status": "resumed"}
            if route == "init_weight_transfer_engine":
                if not isinstance(body, dict) or body.get("init_info") is None:
                    return _error(400, "Missing 'init_info' in request body", "Bad Request")
                c.init_weight_transfer_engine(body["init_info"])
                return 200, {"message": "Weight transfer initialized"}
            if route == "start_weight_update":
                c.start_weight_update()
                return 200, {"message": "Weight update started"}
            if route == "update_weights":
                if not isinstance(body, dict) or body.get("update_info") is None:
                    return _error(400, "Missing 'update_info' in request body", "Bad Request")
                c.update_weights(body["update_info"])
                return 200, {"message": "Weights updated"}
            if route == "finish_weight_update":
                c.finish_weight_update((body or {}).get("weight_version"))
                return 200, {"message": "Weight update finished"}
            return _error(404, "Not Found", "Not Found")
        except Exception as e:
            return _error(500, str(e), "InternalServerError")

    def _handler(self) -> Any:
        routes = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, code: int, answer: Any) -> None:
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply(*routes.handle("GET", self.path.strip("/"), None))

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    self._reply(*_error(400, "Invalid JSON format", "Bad Request"))
                    return
                self._reply(*routes.handle("POST", self.path.strip("/"), body))

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
