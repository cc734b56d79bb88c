"""Stand-in serving nodes for the per-node emulated check: real HTTP on loopback, answering as an emulator or
as a real engine would (tests/emulator and tests/security both start them)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bakeoff.plan import Target

TARGET = Target(name="pd", provider="local", recipe="dsr1-fp4-mi355x-sglang-disagg", recipe_arm=0)


def stand_in_node(version: dict) -> ThreadingHTTPServer:
    """A node answering /health, /v1/models (the target's model) and /version with ``version``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = {
                "/health": {},
                "/v1/models": {"data": [{"id": TARGET.served_model_id}]},
                "/version": version,
            }.get(self.path)
            raw = json.dumps(body).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
