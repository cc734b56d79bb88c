"""A cluster's nodes count as emulated only on the launching layer's own record (L11): a node whose
/version says ``emulated: true`` (any custom image can) but which the sandbox did not boot as an
emulator is refused before the emulated router fronts it. Real HTTP: the sandbox's cloud server and
its address map, a real AWS provider whose connection claims emulated nodes, stand-in nodes."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from bakeoff.clusters import cluster
from bakeoff.core.instance import Instance
from bakeoff.providers.aws import AwsProvider
from bakeoff.providers.base import ProviderError
from bakeoff_sandbox.backing import Backing
from bakeoff_sandbox.clouds import Clouds
from tests.emulator.stand_in_nodes import TARGET, stand_in_node


@pytest.fixture
def registry(tmp_path) -> Iterator[Clouds]:
    clouds = Clouds(Backing(tmp_path), boot_s=0.05).start()
    yield clouds
    clouds.stop()


@pytest.fixture
def forger() -> Iterator[ThreadingHTTPServer]:
    s = stand_in_node({"emulated": True, "version": "emulator"})  # exactly what the emulator answers
    yield s
    s.shutdown()


def _result(server: ThreadingHTTPServer) -> cluster.ClusterResult:
    port = server.server_address[1]
    inst = [Instance("aws", f"us-east-1:i-{i}", "pd", "r", "running", "127.0.0.1", port) for i in (0, 1)]
    nodes = [
        cluster.ClusterNode(i, role, f"pd--n{i}", instance=inst[i]) for i, role in enumerate(("prefill", "decode"))
    ]
    return cluster.ClusterResult("pd", nodes, 60.0)


def _aws(**creds) -> AwsProvider:
    return AwsProvider(
        {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1", **creds}
    )


def test_a_node_that_says_it_is_emulated_but_was_not_booted_as_one_is_refused(registry, forger):
    provider = _aws(emulated_nodes=True, address_map_url=f"{registry.url}/address")
    assert provider.emulated_nodes  # the connection claims it: each node must still be proved
    res = _result(forger)
    with pytest.raises(ProviderError, match=r"prefill node 0 is not one aws launched emulator-backed"):
        cluster.check_emulated(provider, res, TARGET, None, timeout_s=5)
    assert not any(n.instance is not None and n.instance.emulated for n in res.nodes)
    assert not provider.launched_emulated("us-east-1:i-0")


def test_without_the_launching_layers_record_no_node_is_emulated(forger):
    """A real account whose connection wrongly claims emulated nodes has no sandbox registry to ask."""
    with pytest.raises(ProviderError, match=r"prefill node 0 is not one aws launched emulator-backed"):
        cluster.check_emulated(_aws(emulated_nodes=True), _result(forger), TARGET, None, timeout_s=5)
    registry_says_yes = _aws(emulated_nodes=False, address_map_url="http://127.0.0.1:9/address")
    assert not registry_says_yes.launched_emulated("us-east-1:i-0")  # no claim: nothing is emulated


def test_the_registry_answers_for_the_nodes_the_sandbox_booted_only(registry, forger):
    """The address map says ``emulated`` from the sandbox's own record, keyed by instance id: a node
    it booted the emulator for, and no other."""
    backing = registry.backing
    assert backing is not None
    with backing._lock:  # the record boot() writes when it starts a node's emulator
        backing._ports[("aws", "us-east-1:i-1")] = forger.server_address[1]
    provider = _aws(emulated_nodes=True, address_map_url=f"{registry.url}/address")
    assert provider.launched_emulated("us-east-1:i-1") and not provider.launched_emulated("us-east-1:i-0")
    res = _result(forger)
    with pytest.raises(ProviderError, match=r"prefill node 0 is not one aws launched"):
        cluster.check_emulated(provider, res, TARGET, None, timeout_s=5)
