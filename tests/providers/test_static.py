"""Static targets: an existing endpoint, nothing provisioned or terminated; its URL and key come from
a static_endpoint_* connection (here, the CLI's environment form of it), never from the plan."""

from __future__ import annotations

import copy

import pytest

from bakeoff import secrets
from bakeoff.core.instance import Instance
from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.providers import ProviderError, get_provider
from bakeoff.providers.static import StaticProvider, static_api_key
from tests.plan_fixtures import without_deployment
from tests.providers.cloud_helpers import described


@pytest.fixture(autouse=True)
def env_connections(monkeypatch):
    """The CLI's resolver (BAKEOFF_CONN_<ID>_*), whatever an earlier test installed."""
    monkeypatch.setattr(secrets, "_resolve_connection", secrets.env_connection)


def static_target(**opts):
    raw = load_plan("local-demo").model_dump(mode="json")
    t = without_deployment(copy.deepcopy(raw["targets"][0]))
    t.update(provider="static", provider_options=opts, price={"usd_per_hour": 40.0, "market": "reserved"})
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def test_static_endpoint_comes_from_its_connection(monkeypatch):
    t = static_target(endpoint_connection="static_endpoint_pool")
    monkeypatch.setenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_HOST", "https://gpu-pool.internal:8443")
    monkeypatch.setenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_PASSWORD", "secret-from-conn")
    p = get_provider("static")
    inst = p.create(t, "r1", tags={}, spec={})
    assert inst.host == "gpu-pool.internal" and inst.port == 8443 and inst.url == "https://gpu-pool.internal:8443"
    assert "secret-from-conn" not in repr(inst.to_dict())
    assert p.wait_ready(inst, 1) is inst and p.terminate(inst.id) is False and p.list_tagged("r1") == []
    assert t.usd_per_hour == 40.0
    assert static_api_key(t) == "secret-from-conn"
    monkeypatch.delenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_PASSWORD")
    assert static_api_key(t) is None  # a connection without a password: no auth
    monkeypatch.delenv("BAKEOFF_CONN_STATIC_ENDPOINT_POOL_HOST")
    with pytest.raises(ProviderError, match="static_endpoint_pool.*BAKEOFF_CONN_STATIC_ENDPOINT_POOL_HOST"):
        p.create(t, "r1", tags={}, spec={})


def test_keyless_endpoint_by_url():
    t = static_target(base_url="http://10.0.0.5:8000")
    inst = get_provider("static").create(t, "r1", tags={}, spec={})
    assert inst.url == "http://10.0.0.5:8000" and static_api_key(t) is None


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


def test_static_target_describes_its_hardware_instead_of_a_catalog_instance():
    import math

    from bakeoff import cost
    from bakeoff.spend import budget

    plan = described()
    t = plan.targets[0]
    assert t.instance_type is None and t.served_model_id == "my-llama" and t.instance.gpus == 8
    assert t.gpu.name == "RTX 6000 Ada" and math.isnan(t.gpu.all_in_kw)  # not in the catalog: no figure invented
    assert cost.node_spec(t) == "8x RTX 6000 Ada (described in the plan; on-prem rack 3)"
    assert t.usd_per_hour == 12.0 and budget.guard_usd_per_hour(t) == 12.0  # its own price; no list floor to apply
    row = budget.estimate(plan)["targets"][0]
    assert row["spends"] is False and row["usd_per_hour"] == 12.0
    inst = get_provider("static").create(t, "r1", tags={}, spec={})
    assert inst.url == "http://10.0.0.5:8000"
    # a catalog GPU name brings the catalog's figures for that chip, and only those
    b200 = described(hardware={"gpu": "B200", "gpus": 8}).targets[0]
    assert b200.gpu.all_in_kw > 0 and cost.node_spec(b200).startswith("8x B200 180 GB")
    # ... its memory among them: the model's weights do not fit 8 x H100, described or not
    with pytest.raises(PlanError, match=r"does not fit: .* over the 576 GB the engine takes on 8 x h100"):
        described(hardware={"gpu": "H100", "gpus": 8})


@pytest.mark.parametrize(
    "over, field",
    [
        ({"price": None}, "price.usd_per_hour"),
        ({"instance_type": "BM.GPU.B200.8"}, "not both"),
        ({"hardware": None}, "instance_type: required"),
        ({"provider": "local", "provider_options": {}}, "hardware: only a static target"),
        ({"image": "vllm/vllm-openai:v0.25.0"}, "image / engine_args / env"),
        ({"engine_args": ["--max-model-len", "8192"]}, "image / engine_args / env"),
        ({"served_model": "two words"}, "served_model"),
        ({"hardware": {"gpu": "H100", "gpus": 0}}, "gpus"),
    ],
)
def test_static_only_fields_are_checked_with_the_fix(over, field):
    with pytest.raises(PlanError, match=field):
        described(**over)


def test_served_model_is_for_static_targets_only():
    raw = load_plan("local-demo").model_dump(mode="json")
    raw["targets"][0]["served_model"] = "my-llama"
    with pytest.raises(PlanError, match="served_model: only a static target"):
        plan_from_dict(raw)


def test_check_ready_is_the_endpoint_itself():
    """A static endpoint is up (or not) on its own: whether it serves is the serving check's question."""
    inst = Instance(provider="static", id="static:x", target="x", run_id="r", state="running", host="h", port=1)
    assert StaticProvider().check_ready(inst) is inst
