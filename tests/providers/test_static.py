"""Static targets: an existing endpoint, nothing provisioned or terminated, key from the environment."""
from __future__ import annotations

import copy

import pytest

from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.providers import ProviderError, get_provider
from bakeoff.providers.static import static_api_key


def static_target(**opts):
    raw = load_plan("local-demo").model_dump(mode="json")
    t = copy.deepcopy(raw["targets"][0])
    t.update(provider="static", provider_options=opts, price={"usd_per_hour": 40.0, "market": "reserved"})
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def test_static_endpoint_is_used_as_is(monkeypatch):
    t = static_target(base_url="https://gpu-pool.internal:8443", api_key_env="POOL_KEY")
    p = get_provider("static")
    inst = p.create(t, "r1", tags={}, spec={})
    assert inst.host == "gpu-pool.internal" and inst.port == 8443 and inst.details["base_url"] == "https://gpu-pool.internal:8443"
    assert p.wait_ready(inst, 1) is inst and p.terminate(inst.id) is False and p.list_tagged("r1") == []
    assert t.usd_per_hour == 40.0
    monkeypatch.setenv("POOL_KEY", "secret-from-env")
    assert static_api_key(t) == "secret-from-env"
    monkeypatch.delenv("POOL_KEY")
    with pytest.raises(ProviderError, match="POOL_KEY"):
        static_api_key(t)


def test_static_needs_a_url_and_rejects_a_bad_one():
    with pytest.raises(ProviderError, match="provider_options.base_url"):
        get_provider("static").create(static_target(), "r1", tags={}, spec={})
    with pytest.raises(PlanError, match="base_url"):
        static_target(base_url="http://host:80/; rm -rf /")
