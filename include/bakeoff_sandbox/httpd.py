"""The sandbox's fake APIs are WSGI apps served on 127.0.0.1, on a free port, in a daemon thread."""

from __future__ import annotations

import threading

from werkzeug.serving import WSGIRequestHandler, make_server


class QuietHandler(WSGIRequestHandler):
    """The fakes' request lines would drown the run's own log."""

    def log_request(self, *args, **kwargs) -> None:
        pass


class LoopbackServer:
    """Serve ``app`` on loopback; ``url`` is known before start()."""

    def _serve(self, app, name: str) -> None:
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=QuietHandler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name=name)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
