"""The per-node check behind a cloud's ``emulated_nodes`` claim: a node that serves the model but that the
provider has no record of launching emulator-backed (a real engine behind a claiming connection, whatever
its /version says) is refused, naming its role and index, before the emulated router may front it. Real
HTTP against stand-in nodes; the local provider (whose nodes it starts itself) and a claiming AWS
connection with no sandbox registry to ask."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from bakeoff.clusters import cluster
from bakeoff.core.instance import Instance
from bakeoff.providers.aws import AwsProvider
from bakeoff.providers.base import ProviderError
from bakeoff.providers.local import LocalProvider
from tests.emulator.stand_in_nodes import TARGET, stand_in_node


@pytest.fixture
def nodes() -> Iterator[tuple[ThreadingHTTPServer, ThreadingHTTPServer]]:
    emulated, real = (
        stand_in_node({"emulated": True}),
        stand_in_node({"version": "0.11.0"}),
    )  # a real engine says no such thing
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
