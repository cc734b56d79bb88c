"""The sandbox finds every cloud's fake through the provider registry: each entry's ``fake`` module
makes one, and the sandbox's credentials, connections, ground truth and call count cover exactly those."""

from __future__ import annotations

import json

import pytest

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.providers import get_provider
from bakeoff_sandbox import Sandbox

FAKED = {n for n, p in PROVIDERS.items() if p.fake}


@pytest.fixture(scope="module")
def sb():
    with Sandbox() as box:
        yield box


def test_every_faked_cloud_has_its_fake_and_nothing_else_does(sb):
    assert FAKED and set(sb.fakes) == FAKED
    assert set(sb.live()) == FAKED and all(nodes == [] for nodes in sb.live().values())
    assert set(sb.all_credentials()) == FAKED | {"client_bundle"}


def test_each_fake_has_its_registry_connection(sb):
    env = sb.env()
    for name in FAKED:
        conn = json.loads(env[f"AIRFLOW_CONN_{str(PROVIDERS[name].conn_id).upper()}"])
        assert conn["conn_type"] and conn["extra"], name
    assert json.loads(env["BAKEOFF_CREDENTIALS"]) == sb.all_credentials()


def test_each_fake_counts_the_calls_its_provider_makes(sb):
    """A provider's listing reaches its own cloud's fake and no other one."""
    for name in sorted(FAKED):
        before = {n: f.requests for n, f in sb.fakes.items()}
        assert get_provider(name, sb.credentials(name)).list_tagged(None) == []
        after = {n: f.requests for n, f in sb.fakes.items()}
        assert after[name] > before[name], name
        assert {n: c for n, c in after.items() if n != name} == {n: c for n, c in before.items() if n != name}
    assert sb.api_calls() == sum(f.requests for f in sb.fakes.values())
