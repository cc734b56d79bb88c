"""Vultr and DigitalOcean providers against the local fake REST servers (and respx for a lost answer):
create/poll/list/delete, idempotent retry, 429/5xx retry, pagination, capacity failover."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest
import respx
from cloud_helpers import launch_args, make_target, new_run_id

from bakeoff.providers import CapacityError, ProviderError
from bakeoff.providers.digitalocean import DigitalOceanProvider, firewall_name
from bakeoff.providers.tags import LABELS
from bakeoff.providers.vultr import VultrProvider

encode_tags, decode_tags = LABELS.encode, LABELS.decode

CLOUDS = [("vultr", VultrProvider), ("digitalocean", DigitalOceanProvider)]


def _cloud(fake_clouds, name):
    return fake_clouds.vultr if name == "vultr" else fake_clouds.do


def test_tag_codec_round_trips_airflow_run_ids():
    tags = {
        "bakeoff:run_id": "manual__2026-11-29T21:00:00.123+00:00",
        "bakeoff:target": "b200-vllm",
        "bakeoff:plan": "mi355x-vs-b200",
        "bakeoff:expires_at": "1795989497",
        "other": "dropped",
    }
    encoded = encode_tags(tags)
    assert all(all(c.isalnum() or c in ":-_" for c in t) for t in encoded)  # DigitalOcean's tag alphabet
    assert decode_tags(encoded) == {k: v for k, v in tags.items() if k != "other"}


@pytest.mark.parametrize("name,cls", CLOUDS)
def test_lifecycle_tags_userdata_and_delete(name, cls, rest_creds, fake_clouds):
    p, t, rid = cls(rest_creds(name)), make_target(name), new_run_id()
    args = launch_args(rid, t)
    inst = p.create(t, rid, **args)
    assert inst.state == "pending" and inst.run_id == rid and inst.target == t.slug
    node = _cloud(fake_clouds, name).nodes[inst.id]
    assert decode_tags(node["tags"])["bakeoff:run_id"] == rid
    ready = p.wait_ready(inst, 5)
    assert ready.state == "running" and ready.host and ready.port == 8000
    assert [i.id for i in p.list_tagged(rid)] == [inst.id]
    assert p.terminate(inst.id) is True and p.terminate(inst.id) is False
    assert p.describe(inst.id) is None and p.list_tagged(rid) == []


def test_vultr_sends_base64_user_data_with_the_key_only_inside(rest_creds):
    seen = {}
    t, rid = make_target("vultr"), new_run_id()
    args = launch_args(rid, t)
    p = VultrProvider(rest_creds("vultr"))
    real = p.api.request

    def spy(method, path, **kw):
        if method == "POST":
            seen.update(kw["json"])
        return real(method, path, **kw)

    p.api.request = spy
    inst = p.create(t, rid, **args)
    script = base64.b64decode(seen["user_data"]).decode()
    assert seen["plan"] == "vbm-256c-3072gb-8-mi355x-gpu" and seen["region"] == "ewr"
    assert script.count(args["spec"]["api_key"]) == 1  # only in the root-only key file
    assert "iptables -I INPUT -p tcp --dport 8000 -s 127.0.0.1/32 -j ACCEPT" in script
    p.terminate(inst.id)


@pytest.mark.parametrize("name,cls", CLOUDS)
def test_retried_create_reuses_the_node(name, cls, rest_creds, fake_clouds):
    t, rid = make_target(name), new_run_id()
    a = cls(rest_creds(name)).create(t, rid, **launch_args(rid, t))
    b = cls(rest_creds(name)).create(t, rid, **launch_args(rid, t))
    assert a.id == b.id
    assert (
        sum(decode_tags(n["tags"]).get("bakeoff:run_id") == rid for n in _cloud(fake_clouds, name).nodes.values()) == 1
    )
    cls(rest_creds(name)).terminate(a.id)


@pytest.mark.parametrize("name,cls", CLOUDS)
def test_429_and_5xx_are_retried_without_a_second_node(name, cls, rest_creds, fake_clouds):
    cloud = _cloud(fake_clouds, name)
    t, rid = make_target(name), new_run_id()
    p = cls(rest_creds(name))
    cloud.fail_queue[:] = ["GET:429", "POST:503", "POST:429", "GET:502"]
    requests = cloud.requests
    inst = p.create(t, rid, **launch_args(rid, t))
    assert cloud.fail_queue == [] and cloud.requests - requests >= 7  # every failure was met and retried
    cloud.fail_queue[:] = [500, 429]
    assert [i.id for i in p.list_tagged(rid)] == [inst.id]
    assert sum(decode_tags(n["tags"]).get("bakeoff:run_id") == rid for n in cloud.nodes.values()) == 1
    p.terminate(inst.id)


@pytest.mark.parametrize("name,cls", CLOUDS)
def test_list_follows_pagination(name, cls, rest_creds):
    t, rid = make_target(name), new_run_id()
    p = cls(rest_creds(name))
    ids = []
    for i in range(5):
        tt = make_target(name)
        tt = tt.model_copy(update={"name": f"{tt.name}-{i}"})
        ids.append(p.create(tt, rid, **launch_args(rid, tt)).id)
    p.page_size = 2
    assert sorted(i.id for i in p.list_tagged(rid)) == sorted(ids)
    assert {i.target for i in p.list_tagged(rid)} == {f"{t.slug}-{i}" for i in range(5)}
    for i in ids:
        p.terminate(i)


@pytest.mark.parametrize("name,cls", CLOUDS)
def test_capacity_fails_over_regions_then_names_them(name, cls, rest_creds, fake_clouds):
    cloud = _cloud(fake_clouds, name)
    t, rid = make_target(name), new_run_id()
    first, second = list(t.provider_options.regions)[:2]
    p = cls(rest_creds(name))
    cloud.denied = {first}
    inst = p.create(t, rid, **launch_args(rid, t))
    assert inst.region == second
    p.terminate(inst.id)
    cloud.denied = set(t.provider_options.regions)
    with pytest.raises(CapacityError) as e:
        p.create(t, new_run_id(), **launch_args(rid, t))
    assert all(r in str(e.value) for r in t.provider_options.regions)


def test_lost_create_answer_is_reconciled_by_tag():
    """The POST created the droplet but its answer was a 504: the provider must find it, not create again."""
    t, rid = make_target("digitalocean"), new_run_id()
    created: list[dict] = []

    def create(request):
        body = json.loads(request.content)
        created.append(
            {
                "id": 77,
                "status": "new",
                "tags": body["tags"],
                "region": {"slug": body["region"]},
                "networks": {"v4": []},
                "size_slug": body["size"],
            }
        )
        return httpx.Response(504)

    def listing(request):
        return httpx.Response(200, json={"droplets": created, "links": {"pages": {}}, "meta": {"total": len(created)}})

    with respx.mock(base_url="https://do.test/v2", assert_all_called=False) as mock:
        post = mock.post("/droplets").mock(side_effect=create)
        mock.get("/droplets").mock(side_effect=listing)
        firewall = {"id": "fw-1", "name": firewall_name(rid, t.slug), "droplet_ids": []}  # made before the droplet
        mock.get("/firewalls").mock(return_value=httpx.Response(200, json={"firewalls": [firewall], "links": {}}))
        p = DigitalOceanProvider({"token": "t", "base_url": "https://do.test/v2", "backoff_s": 0.001})
        inst = p.create(t, rid, **launch_args(rid, t))
    assert inst.id == "77" and post.call_count == 1


def test_missing_token_and_missing_ingress_are_clear():
    with pytest.raises(ProviderError, match="vultr_default"):
        VultrProvider({"base_url": "http://127.0.0.1:9/v2"})
    t = make_target("vultr", ingress_cidr=None)
    with respx.mock(base_url="https://v.test/v2") as mock:
        p = VultrProvider({"token": "t", "base_url": "https://v.test/v2"})
        with pytest.raises(ProviderError, match="provider_options.ingress_cidr"):
            p.create(t, new_run_id(), **launch_args("r", t))
        assert mock.calls.call_count == 0


def test_a_429_is_retried_after_its_retry_after():
    """A throttled call waits what Retry-After says (not the tiny backoff), then succeeds."""
    with respx.mock(base_url="https://v.test/v2") as mock:
        route = mock.get("/bare-metals/9").mock(
            side_effect=[
                httpx.Response(429, headers={"Retry-After": "0.3"}, json={"error": "rate limit"}),
                httpx.Response(200, json={"bare_metal": {"id": "9", "status": "pending", "tags": ["bakeoff"]}}),
            ]
        )
        p = VultrProvider({"token": "t", "base_url": "https://v.test/v2", "backoff_s": 0.001})
        start = time.monotonic()
        inst = p.describe("9")
        waited = time.monotonic() - start
    assert inst is not None and inst.state == "pending" and route.call_count == 2
    assert waited >= 0.3 * 0.8  # Retry-After, less the jitter


def test_a_5xx_that_outlasts_the_retries_is_a_clear_error_naming_the_call():
    with respx.mock(base_url="https://v.test/v2") as mock:
        route = mock.get("/bare-metals/9").mock(return_value=httpx.Response(503, json={"error": "maintenance"}))
        p = VultrProvider({"token": "t", "base_url": "https://v.test/v2", "backoff_s": 0.001})
        with pytest.raises(ProviderError, match=r"vultr: GET bare-metals/9 answered 503: maintenance"):
            p.describe("9")
    assert route.call_count == p.api.retries + 1


def test_a_create_that_keeps_failing_is_never_re_sent_before_a_look_up_and_says_so():
    """Each failed POST is followed by a look-up by tag before it is sent again; when every try fails the
    error names the create, and it was sent exactly once per try."""
    t, rid = make_target("vultr"), new_run_id()
    calls: list[str] = []

    def log_call(request):
        calls.append(request.method)
        if request.method == "POST":
            return httpx.Response(502, json={"error": "bad gateway"})
        return httpx.Response(200, json={"bare_metals": [], "meta": {"links": {"next": ""}}})

    with respx.mock(base_url="https://v.test/v2") as mock:
        mock.post("/bare-metals").mock(side_effect=log_call)
        mock.get("/bare-metals").mock(side_effect=log_call)
        p = VultrProvider({"token": "t", "base_url": "https://v.test/v2", "backoff_s": 0.001})
        region = list(t.provider_options.regions)[0]
        with pytest.raises(ProviderError, match=rf"create {t.instance_type} in {region} .*kept failing \(502\)"):
            p.create(t, rid, **launch_args(rid, t))
    tries = p.api.retries + 1
    assert calls == ["GET"] + ["POST", "GET"] * tries  # reuse check, then each POST followed by its look-up


def test_a_connection_that_never_answers_is_a_provider_error():
    p = VultrProvider({"token": "t", "base_url": "http://127.0.0.1:9/v2", "backoff_s": 0.001})
    with pytest.raises(ProviderError, match=r"vultr: GET bare-metals/9 failed: ConnectError"):
        p.describe("9")
