"""DigitalOcean cloud firewalls against the fake API: made before the droplet with exactly the plan's
ports and CIDR, made once, deleted with the droplet, orphans removed (only bakeoff's, only orphans),
lists paged, 429 retried, refusals explained."""

from __future__ import annotations

import json
import re

import httpx
import pytest
import respx
from cloud_helpers import launch_args, make_target, new_run_id

from bakeoff.cleanup import reaper
from bakeoff.core.launch import AGENT_PORT
from bakeoff.providers import CapacityError, ProviderError
from bakeoff.providers.digitalocean import DigitalOceanProvider, firewall_name, firewall_owner, firewall_tag
from bakeoff.providers.tags import LABELS
from bakeoff_sandbox.clouds import TOKEN

CIDR = "198.51.100.7/32"
LONG_AGO = "2020-01-01T00:00:00Z"


def _target(i: int | None = None, **opts):
    t = make_target("digitalocean", ingress_cidr=CIDR, **opts)
    return t if i is None else t.model_copy(update={"name": f"{t.name}-{i}"})


def _provider(rest_creds) -> DigitalOceanProvider:
    return DigitalOceanProvider(rest_creds("digitalocean"))


def _run_firewalls(fake_clouds, run_id: str) -> list[dict]:
    """Ground truth: the fake's firewalls named for this run."""
    return [
        fw for fw in fake_clouds.do.firewalls.values() if (firewall_owner(fw["name"]) or ("",))[0] == LABELS.run(run_id)
    ]


def _intercept(provider, fake):
    """Route the provider's API calls through ``fake(method, path, real, kw)``; returns the (method, path) log."""
    calls, real = [], provider.api.request

    def request(method, path, **kw):
        calls.append((method, path))
        return fake(method, path, real, kw)

    provider.api.request = request
    return calls


def _passthrough(method, path, real, kw):
    return real(method, path, **kw)


def test_firewall_names_fit_the_api_and_name_their_run():
    rid = "manual__2026-11-29T21:00:00.123456+00:00"
    name = firewall_name(rid, "mi300x-vllm")
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", name)  # DigitalOcean's firewall name alphabet
    assert firewall_owner(name) == (LABELS.run(rid), "mi300x-vllm")
    assert firewall_owner("web-prod") is None and firewall_owner("bakeoff-run-!!.x") is None
    assert re.fullmatch(r"[A-Za-z0-9:_-]{1,255}", firewall_tag(rid, "mi300x-vllm"))
    assert firewall_tag(rid, "a") != firewall_tag(rid, "b")


@pytest.mark.parametrize("keys,ssh", [([], False), (["4242"], True)])
def test_firewall_is_made_before_the_droplet_with_exactly_the_plans_ports_and_cidr(keys, ssh, rest_creds, fake_clouds):
    p, t, rid = _provider(rest_creds), _target(ssh_key_ids=keys), new_run_id()
    calls = _intercept(p, _passthrough)
    inst = p.create(t, rid, **launch_args(rid, t))
    [fw] = _run_firewalls(fake_clouds, rid)
    ports = [str(t.stack_spec.port), str(AGENT_PORT)] + (["22"] if ssh else [])
    assert fw["name"] == firewall_name(rid, t.slug)
    assert fw["inbound_rules"] == [
        {"protocol": "tcp", "ports": port, "sources": {"addresses": [CIDR]}} for port in ports
    ]
    assert sorted((r["protocol"], tuple(r["destinations"]["addresses"])) for r in fw["outbound_rules"]) == [
        (proto, ("0.0.0.0/0", "::/0")) for proto in ("icmp", "tcp", "udp")
    ]
    # applied by a tag the droplet is created with, and made before it: the droplet is never open
    assert fw["tags"] == [firewall_tag(rid, t.slug)] and fw["tags"][0] in fake_clouds.do.nodes[inst.id]["tags"]
    assert calls.index(("POST", "firewalls")) < calls.index(("POST", "droplets"))
    p.terminate(inst.id)


def test_a_retried_create_makes_no_second_firewall(rest_creds, fake_clouds):
    t, rid = _target(), new_run_id()
    a = _provider(rest_creds).create(t, rid, **launch_args(rid, t))
    b = _provider(rest_creds).create(t, rid, **launch_args(rid, t))
    assert a.id == b.id and len(_run_firewalls(fake_clouds, rid)) == 1
    _provider(rest_creds).terminate(a.id)


def test_a_lost_firewall_answer_is_found_not_made_again():
    """The POST made the firewall but its answer was a 504: the provider must find it, not POST again."""
    t, rid = _target(), new_run_id()
    made: list[dict] = []

    def create_firewall(request):
        made.append({**json.loads(request.content), "id": f"fw-{len(made)}", "droplet_ids": []})
        return httpx.Response(504)

    def droplet(request):
        body = json.loads(request.content)
        return httpx.Response(
            202,
            json={
                "droplet": {
                    "id": 78,
                    "status": "new",
                    "tags": body["tags"],
                    "region": {"slug": body["region"]},
                    "networks": {"v4": []},
                }
            },
        )

    with respx.mock(base_url="https://do.test/v2") as mock:
        post = mock.post("/firewalls").mock(side_effect=create_firewall)
        mock.get("/firewalls").mock(
            side_effect=lambda request: httpx.Response(200, json={"firewalls": made, "links": {}})
        )
        mock.post("/tags").mock(return_value=httpx.Response(201, json={"tag": {"name": "t"}}))
        mock.get("/droplets").mock(return_value=httpx.Response(200, json={"droplets": [], "links": {"pages": {}}}))
        mock.post("/droplets").mock(side_effect=droplet)
        p = DigitalOceanProvider({"token": "t", "base_url": "https://do.test/v2", "backoff_s": 0.001})
        inst = p.create(t, rid, **launch_args(rid, t))
    assert post.call_count == 1 and [fw["name"] for fw in made] == [firewall_name(rid, t.slug)] and inst.id == "78"


def test_429_on_the_firewall_api_is_retried(rest_creds, fake_clouds):
    p, t, rid = _provider(rest_creds), _target(), new_run_id()
    fake_clouds.do.fail_queue[:] = ["GET:429"]  # the first call lists firewalls
    posts = []

    def throttled(method, path, real, kw):
        if (method, path) == ("POST", "firewalls"):
            posts.append(path)
            if len(posts) == 1:
                return httpx.Response(
                    429,
                    headers={"Retry-After": "0"},
                    json={"id": "too_many_requests", "message": "API Rate limit exceeded."},
                )
        return real(method, path, **kw)

    _intercept(p, throttled)
    inst = p.create(t, rid, **launch_args(rid, t))
    assert fake_clouds.do.fail_queue == [] and len(posts) == 2 and len(_run_firewalls(fake_clouds, rid)) == 1
    p.terminate(inst.id)


@pytest.mark.parametrize(
    "status,message,fix",
    [
        (403, "You are not authorized to perform this operation", "firewall (create, read, delete)"),
        (422, "invalid address", "provider_options.ingress_cidr"),
        (422, "firewall limit reached", "raise the account limit"),
    ],
)
def test_a_refused_firewall_is_explained_and_starts_no_droplet(status, message, fix, rest_creds, fake_clouds):
    p, t, rid = _provider(rest_creds), _target(), new_run_id()

    def refuse(method, path, real, kw):
        if (method, path) == ("POST", "firewalls"):
            return httpx.Response(status, json={"id": "refused", "message": message})
        return real(method, path, **kw)

    calls = _intercept(p, refuse)
    with pytest.raises(ProviderError) as e:
        p.create(t, rid, **launch_args(rid, t))
    assert fix in str(e.value) and message in str(e.value) and TOKEN not in str(e.value)
    assert calls.count(("POST", "firewalls")) == 1 and ("POST", "droplets") not in calls
    assert _run_firewalls(fake_clouds, rid) == []


def test_terminate_deletes_the_targets_firewall_and_keeps_its_siblings(rest_creds, fake_clouds):
    p, rid = _provider(rest_creds), new_run_id()
    a, b = _target(0), _target(1)
    ia, ib = p.create(a, rid, **launch_args(rid, a)), p.create(b, rid, **launch_args(rid, b))
    assert len(_run_firewalls(fake_clouds, rid)) == 2
    assert p.terminate(ia.id) is True
    assert [fw["name"] for fw in _run_firewalls(fake_clouds, rid)] == [firewall_name(rid, b.slug)]
    assert p.terminate(ia.id) is False
    p.terminate(ib.id)
    assert _run_firewalls(fake_clouds, rid) == []


def test_a_create_that_starts_no_droplet_leaves_no_firewall(rest_creds, fake_clouds):
    p, t, rid = _provider(rest_creds), _target(), new_run_id()
    fake_clouds.do.denied = set(t.provider_options.regions)
    with pytest.raises(CapacityError):
        p.create(t, rid, **launch_args(rid, t))
    assert _run_firewalls(fake_clouds, rid) == [] and p.list_tagged(rid) == []


def _foreign_firewall(fake_clouds) -> str:
    """Someone else's firewall on the same account, with no droplets behind it."""
    r = httpx.post(
        f"{fake_clouds.url}/do/v2/firewalls",
        headers={"Authorization": f"Bearer {TOKEN}"},
        json={
            "name": "web-prod",
            "inbound_rules": [{"protocol": "tcp", "ports": "443", "sources": {"addresses": ["0.0.0.0/0"]}}],
        },
    )
    assert r.status_code == 202
    return r.json()["firewall"]["id"]


def test_cleanup_removes_only_orphaned_bakeoff_firewalls(rest_creds, fake_clouds):
    p, t = _provider(rest_creds), _target()
    live_run, lost_run, young_run = new_run_id(), new_run_id(), new_run_id()
    nodes = {r: p.create(t, r, **launch_args(r, t)) for r in (live_run, lost_run, young_run)}
    for r in (lost_run, young_run):
        fake_clouds.do.nodes.pop(nodes[r].id)  # the droplet went, its terminate was lost
    fw = {r: _run_firewalls(fake_clouds, r)[0]["id"] for r in nodes}
    foreign = _foreign_firewall(fake_clouds)
    for fid in (fw[live_run], fw[lost_run], foreign):
        fake_clouds.do.firewalls[fid]["created_at"] = LONG_AGO
    fake_clouds.do.fail_queue[:] = ["GET:429", "DELETE:503"]
    cleaned = p.cleanup()
    assert fw[lost_run] in cleaned and fw[lost_run] not in fake_clouds.do.firewalls
    # kept: a live droplet stands behind it / too young (its droplet may be about to start) / not bakeoff's
    assert {fw[live_run], fw[young_run], foreign} <= set(fake_clouds.do.firewalls)
    assert fake_clouds.do.fail_queue == []
    # the sweep picks its own run: no grace needed once the run is over
    assert p.cleanup(lambda tags: tags["bakeoff:run_id"] == young_run) == [fw[young_run]]
    p.terminate(nodes[live_run].id)
    assert fw[live_run] not in fake_clouds.do.firewalls
    fake_clouds.do.firewalls.pop(foreign)


def test_firewall_list_follows_pagination(rest_creds, fake_clouds):
    p, rid = _provider(rest_creds), new_run_id()
    targets = [_target(i) for i in range(5)]
    insts = [p.create(t, rid, **launch_args(rid, t)) for t in targets]
    p.page_size = 2
    calls = _intercept(p, _passthrough)
    assert sorted(fw["name"] for fw in p.firewalls(rid)) == sorted(firewall_name(rid, t.slug) for t in targets)
    assert calls.count(("GET", "firewalls")) >= 3
    for inst in insts:
        p.terminate(inst.id)
    assert _run_firewalls(fake_clouds, rid) == []


def test_the_reaper_removes_orphaned_firewalls_and_survives_a_failing_cleanup(
    rest_creds, fake_clouds, data_root, monkeypatch
):
    p, t, rid = _provider(rest_creds), _target(), new_run_id()
    inst = p.create(t, rid, **launch_args(rid, t))
    fake_clouds.do.nodes.pop(inst.id)
    [fw] = _run_firewalls(fake_clouds, rid)
    fw["created_at"] = LONG_AGO
    out = reaper.reap(provider_names=["digitalocean"], credentials_fn=lambda name: rest_creds(name))
    assert fw["id"] in out["cleaned"] and _run_firewalls(fake_clouds, rid) == []

    def refused(self, select=None):
        raise ProviderError("digitalocean: GET firewalls answered 403: forbidden")

    monkeypatch.setattr(DigitalOceanProvider, "cleanup", refused)
    out = reaper.reap(provider_names=["digitalocean", "vultr"], credentials_fn=lambda name: rest_creds(name))
    assert "403" in out["errors"]["digitalocean:cleanup"] and "vultr" not in out["errors"]


def test_without_ingress_cidr_nothing_is_made_and_the_plan_field_is_named():
    t = make_target("digitalocean", ingress_cidr=None)
    with respx.mock(base_url="https://do.test/v2") as mock:
        p = DigitalOceanProvider({"token": "t", "base_url": "https://do.test/v2"})
        with pytest.raises(ProviderError, match="provider_options.ingress_cidr"):
            p.create(t, new_run_id(), **launch_args("r", t))
        assert mock.calls.call_count == 0
