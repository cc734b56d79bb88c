"""The sandbox's fake APIs are WSGI apps served on the node address (127.0.0.1 unless
$BAKEOFF_NODE_ADDRESS names a private address of this host), on a free port, in a daemon thread."""

from __future__ import annotations

import threading

from werkzeug.serving import WSGIRequestHandler, make_server

from bakeoff.providers.address import node_address, url_host


class QuietHandler(WSGIRequestHandler):
    """The fakes' request lines would drown the run's own log."""

    def log_request(self, *args, **kwargs) -> None:
        pass


class LoopbackServer:
    """Serve ``app`` on the node address (loopback by default); ``url`` is known before start()."""

    def _serve(self, app, name: str) -> None:
        host = node_address()
        self._server = make_server(host, 0, app, threaded=True, request_handler=QuietHandler)
        self.url = f"http://{url_host(host)}:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name=name)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
