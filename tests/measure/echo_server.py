"""A local OpenAI-compatible server that echoes the request's headers back, as some proxies and
gateways do in their error bodies: every generation request is refused with a 400 whose body
quotes the Authorization header and the bare token, and /v1/models lists a second "model"
named after the header it saw. The rest of the surface the builder reads (/health, /version,
/metrics, /tokenize) answers like vLLM, so wait, gates, bench and the client script run."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

MODEL = "echo-model"
MAX_MODEL_LEN = 2048
METRICS = (
    '# TYPE vllm:cache_config_info gauge\n'
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="512"} 1.0\n'
    '# TYPE vllm:prefix_cache_hits counter\n'
    'vllm:prefix_cache_hits_total{model_name="echo-model"} 0.0\n'
)


class EchoServer:
    """Started on 127.0.0.1 at an unused port in a daemon thread; ``tokenize_status`` or
    ``models_status`` other than 200 makes /tokenize or /v1/models refuse with that status (and the echo)."""

    def __init__(self) -> None:
        self.tokenize_status = 200
        self.models_status = 200
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _echo(self, status: int) -> None:
                auth = self.headers.get("Authorization", "")
                token = auth.removeprefix("Bearer ")
                self._send(status, {"error": {
                    "message": f"rejected Authorization: {auth} (token {token}); request headers {dict(self.headers)}",
                    "type": "BadRequestError", "code": status,
                }})

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, "", "text/plain")
                elif self.path == "/v1/models" and outer.models_status != 200:
                    self._echo(outer.models_status)
                elif self.path == "/v1/models":
                    seen = f"gateway saw {self.headers.get('Authorization', 'no header')}"
                    self._send(200, {"object": "list", "data": [
                        {"id": MODEL, "object": "model", "max_model_len": MAX_MODEL_LEN},
                        {"id": seen, "object": "model", "max_model_len": MAX_MODEL_LEN},
                    ]})
                elif self.path == "/version":
                    self._send(200, {"version": "0.0.0-echo"})
                elif self.path == "/metrics":
                    self._send(200, METRICS, "text/plain; version=0.0.4")
                else:
                    self._echo(404)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                if self.path == "/tokenize" and outer.tokenize_status == 200:
                    text = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
                    count = len(str(text).split()) + 1
                    self._send(200, {"count": count, "tokens": list(range(count)), "max_model_len": MAX_MODEL_LEN})
                else:
                    self._echo(outer.tokenize_status if self.path == "/tokenize" else 400)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
