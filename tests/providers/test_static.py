"""Static targets: an existing endpoint, nothing provisioned or terminated; its URL and key come from
a static_endpoint_* connection (here, the CLI's environment form of it), never from the plan."""
from __future__ import annotations

import copy

import pytest

from bakeoff import secrets
from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.providers import ProviderError, get_provider
from bakeoff.providers.static import static_api_key


@pytest.fixture(autouse=True)
def env_connections(monkeypatch):
    """The CLI's resolver (BAKEOFF_CONN_<ID>_*), whatever an earlier test installed."""
    monkeypatch.setattr(secrets, "_resolve_connection", secrets.env_connection)


def static_target(**opts):
    raw = load_plan("local-demo").model_dump(mode="json")
    t = copy.deepcopy(raw["targets"][0])
    t.update(provider="static", provider_options=opts, price={"usd_per_hour": 40.0, "market": "reserved"})
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def test_static_endpoint_comes_from_its_connection(monkeypatch):
    t = static_target(endpoint_connection="static_endpoint_pool")
    monkeypatch.setenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_HOST", "https://gpu-pool.internal:8443")
    monkeypatch.setenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_PASSWORD", "secret-from-conn")
    p = get_provider("static")
    inst = p.create(t, "r1", tags={}, spec={})
    assert inst.host == "gpu-pool.internal" and inst.port == 8443 and inst.details["base_url"] == "https://gpu-pool.internal:8443"
    assert "secret-from-conn" not in repr(inst.to_dict())
    assert p.wait_ready(inst, 1) is inst and p.terminate(inst.id) is False and p.list_tagged("r1") == []
    assert t.usd_per_hour == 40.0
    assert static_api_key(t) == "secret-from-conn"
    monkeypatch.delenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_PASSWORD")
    assert static_api_key(t) is None          # a connection without a password: no auth
    monkeypatch.delenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_HOST")
    with pytest.raises(ProviderError, match="static_endpoint_pool.*BAKEOFF_CONN_STATIC_ENDPOINT_POOL_HOST"):
        p.create(t, "r1", tags={}, spec={})


def test_keyless_endpoint_by_url():
    t = static_target(base_url="http://10.0.0.5:8000")
    inst = get_provider("static").create(t, "r1", tags={}, spec={})
    assert inst.details["base_url"] == "http://10.0.0.5:8000" and static_api_key(t) is None


def test_static_needs_an_endpoint_and_rejects_a_bad_one():
    with pytest.raises(PlanError, match="provider_options.endpoint_connection"):
        static_target()
    with pytest.raises(PlanError, match="base_url"):
        static_target(base_url="http://host:80/; rm -rf /")
    with pytest.raises(PlanError, match="not both"):
        static_target(base_url="http://host:80", endpoint_connection="static_endpoint_pool")


def test_connection_host_must_be_a_plain_url(monkeypatch):
    t = static_target(endpoint_connection="static_endpoint_pool")
    monkeypatch.setenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_HOST", "ftp://user:pw@host")
    with pytest.raises(ProviderError, match="http\\(s\\) URL"):
        get_provider("static").create(t, "r1", tags={}, spec={})
