"""The per-node check behind a cloud's ``emulated_nodes`` claim: a node that serves the model but that the
provider has no record of launching emulator-backed (a real engine behind a claiming connection, whatever
its /version says) is refused, naming its role and index, before the emulated router may front it. Real
HTTP against stand-in nodes; the local provider (whose nodes it starts itself) and a claiming AWS
connection with no sandbox registry to ask."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bakeoff.clusters import cluster
from bakeoff.core.instance import Instance
from bakeoff.plan import Target
from bakeoff.providers.aws import AwsProvider
from bakeoff.providers.base import ProviderError
from bakeoff.providers.local import LocalProvider

TARGET = Target(name="pd", provider="local", recipe="dsr1-fp4-mi355x-sglang-disagg", recipe_arm=0)


def _node(version: dict) -> ThreadingHTTPServer:
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


@pytest.fixture
def nodes() -> Iterator[tuple[ThreadingHTTPServer, ThreadingHTTPServer]]:
    emulated, real = _node({"emulated": True}), _node({"version": "0.11.0"})  # a real engine says no such thing
    yield emulated, real
    for s in (emulated, real):
        s.shutdown()


def _result(*servers: ThreadingHTTPServer) -> cluster.ClusterResult:
    out = []
    for i, (role, s) in enumerate(zip(("prefill", "decode"), servers, strict=True)):
        inst = Instance("oci", f"node-{i}", "pd", "r", "running", "127.0.0.1", s.server_address[1])
        out.append(cluster.ClusterNode(i, role, f"pd--n{i}", instance=inst))
    return cluster.ClusterResult("pd", out, 60.0)


def test_a_node_the_provider_did_not_launch_emulated_is_refused_naming_it(nodes):
    emulated, real = nodes
    claiming = AwsProvider({"aws_access_key_id": "t", "aws_secret_access_key": "t", "emulated_nodes": True})
    with pytest.raises(ProviderError, match=r"prefill node 0 is not one aws launched emulator-backed"):
        cluster.check_emulated(claiming, _result(emulated, emulated), TARGET, None, timeout_s=5)
    ok = _result(emulated, real)  # the local provider started every node itself: its record, not /version
    cluster.check_emulated(LocalProvider(), ok, TARGET, None, timeout_s=5)
    assert all(n.instance and n.instance.emulated for n in ok.nodes)
