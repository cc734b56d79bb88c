"""The address map: where a sandbox node's serving and agent ports are reached from this host, and
whether the sandbox booted it as an emulator (its own record, never the node's answer). Every cloud's
provider asks it (``address_map_url``), so it is served apart from any one cloud's fake."""

from __future__ import annotations

import json

from werkzeug.wrappers import Request, Response

from bakeoff_sandbox.backing import Backing
from bakeoff_sandbox.httpd import LoopbackServer

PREFIX = "/address/"


def answer(backing: Backing | None, provider: str, nid: str) -> Response:
    """``GET /address/<provider>/<node id>``: the node's host and ports, or 404 until it serves."""
    addr = backing.address(provider, nid) if backing else None
    if backing is None or addr is None:
        return Response(json.dumps({"error": "not serving yet"}), status=404, mimetype="application/json")
    found = {
        "host": addr[0],
        "port": addr[1],
        "agent_port": backing.agent_port(provider, nid),
        "emulated": backing.emulated(provider, nid),  # the sandbox's record, not the node's answer
    }
    return Response(json.dumps(found), mimetype="application/json")


class AddressMap(LoopbackServer):
    def __init__(self, backing: Backing):
        self.backing = backing
        self._serve(self, "sandbox-address-map")

    def __call__(self, environ, start_response):
        path = Request(environ).path
        provider, _, nid = path[len(PREFIX) :].partition("/") if path.startswith(PREFIX) else ("", "", "")
        if not (provider and nid):
            return Response(json.dumps({"error": "not found"}), status=404)(environ, start_response)
        return answer(self.backing, provider, nid)(environ, start_response)
