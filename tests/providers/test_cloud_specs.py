"""The fake Vultr and DigitalOcean APIs held to the clouds' published OpenAPI definitions, and the
defects that holding them there exposed: firewall ports, GPU droplets missing from the listing,
Vultr's listing filter and power field, and DigitalOcean's rate-limit reset."""

from __future__ import annotations

import importlib.util
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from cloud_helpers import launch_args, make_target, new_run_id

from bakeoff.cleanup import reaper
from bakeoff.providers import ProviderError
from bakeoff.providers.base import PartialListing
from bakeoff.providers.digitalocean import OUTBOUND_RULES, DigitalOceanProvider, firewall_name
from bakeoff.providers.tags import LABELS
from bakeoff.providers.vultr import VultrProvider
from bakeoff_sandbox.spec_check import Spec, unknown_fields

AUTH = {"Authorization": "Bearer sandbox-token"}


def _call(fake_clouds, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, f"{fake_clouds.url}{path}", headers=AUTH, timeout=10, **kw)


# --- the validation can fail ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,path,kw,status,needle",
    [
        # a planted wrong field: an enum the definition does not allow
        (
            "POST",
            "/do/v2/firewalls",
            {"json": {"name": "x1", "outbound_rules": [{"protocol": "tcpx", "ports": "1", "destinations": {}}]}},
            422,
            "tcpx",
        ),
        ("POST", "/do/v2/tags", {"json": {"name": "no spaces allowed"}}, 422, "does not match"),
        ("GET", "/do/v2/droplets", {"params": {"per_page": 500}}, 422, "maximum of 200"),
        ("GET", "/do/v2/droplets", {"params": {"tag_name": "bakeoff", "type": "gpus"}}, 422, "can not be combined"),
        ("GET", "/do/v2/droplets", {"params": {"type": "all"}}, 422, "'all' is not one of"),
        ("GET", "/do/v2/droplets/abc", {}, 422, "not an integer"),
        # a planted wrong type, and a parameter the listing does not take
        ("POST", "/vultr/v2/bare-metals", {"json": {"region": "ewr", "plan": "p", "enable_ipv6": "yes"}}, 400, "yes"),
        ("GET", "/vultr/v2/bare-metals", {"params": {"tag": "bakeoff"}}, 400, "it takes: cursor, per_page"),
    ],
)
def test_a_request_the_definition_refuses_gets_the_real_apis_refusal(
    fake_clouds, rest_creds, method, path, kw, status, needle
):
    r = _call(fake_clouds, method, path, **kw)
    assert r.status_code == status and needle in r.text
    body = r.json()
    if status == 422:
        assert body["id"] == "unprocessable_entity" and needle in body["message"]
    else:
        assert body["status"] == 400 and needle in body["error"]


def test_an_answer_with_a_field_the_definition_lacks_is_caught():
    """A fake that invents a field (Vultr's power_status) is caught by the answer check."""
    spec = Spec("vultr", "/vultr/v2")
    node = {"id": "n1", "status": "active", "tags": [], "main_ip": "203.0.113.9"}
    assert spec.check_answer("GET", "/vultr/v2/bare-metals/n1", 200, {}, {"bare_metal": node}) == []
    planted = {"bare_metal": {**node, "power_status": "stopped"}}
    problems = spec.check_answer("GET", "/vultr/v2/bare-metals/n1", 200, {}, planted)
    assert problems == ["answer: field bare_metal.power_status is not in the definition"]
    do = Spec("digitalocean", "/do")
    problems = do.check_answer("GET", "/do/v2/droplets/1", 200, {}, {"droplet": {"id": 1}})
    assert any("header ratelimit-reset missing" in p for p in problems)
    assert any("'name' is a required property" in p for p in problems)
    assert unknown_fields({"type": "object", "properties": {"a": {}}}, {"a": 1, "b": 2}) == ["b"]


def test_the_fakes_answers_fit_the_definitions(fake_clouds, rest_creds):
    """A whole lifecycle on both clouds, every answer checked (the fixture fails the test otherwise)."""
    for name, cls in (("vultr", VultrProvider), ("digitalocean", DigitalOceanProvider)):
        t, rid = make_target(name), new_run_id()
        p = cls(rest_creds(name))
        inst = p.create(t, rid, **launch_args(rid, t))
        assert p.wait_ready(inst, 10).state == "running"
        assert [i.id for i in p.list_tagged(rid)] == [inst.id]
        assert p.terminate(inst.id)
    assert fake_clouds.do.refused == [] and fake_clouds.vultr.refused == []
    assert fake_clouds.do.answer_problems == [] and fake_clouds.vultr.answer_problems == []


# --- DigitalOcean -------------------------------------------------------------------------------------


def test_outbound_firewall_ports_are_a_range_the_api_accepts(fake_clouds, rest_creds):
    assert {r["ports"] for r in OUTBOUND_RULES if r["protocol"] != "icmp"} == {"1-65535"}
    r = _call(
        fake_clouds,
        "POST",
        "/do/v2/firewalls",
        json={"name": "x2", "outbound_rules": [{"protocol": "tcp", "ports": "all", "destinations": {}}]},
    )
    assert r.status_code == 422 and "invalid ports 'all'" in r.json()["message"]


def test_gpu_and_other_droplets_are_both_listed(rest_creds, fake_clouds):
    """The default listing holds no GPU droplet: the duplicate guard, sweep and reaper must still see
    it, and a non-GPU droplet carrying the run's tags as well."""
    t, rid = make_target("digitalocean"), new_run_id()
    p = DigitalOceanProvider(rest_creds("digitalocean"))
    inst = p.create(t, rid, **launch_args(rid, t))
    assert t.instance_type.startswith("gpu-") and [i.id for i in p.list_tagged(rid)] == [inst.id]
    assert p.create(t, rid, **launch_args(rid, t)).id == inst.id  # the duplicate guard finds it
    tags = LABELS.encode({"bakeoff:run_id": rid, "bakeoff:target": "cpu-side"})
    body = {"name": "cpu-side", "region": "atl1", "size": "s-2vcpu-4gb", "image": "ubuntu-24-04-x64", "tags": tags}
    cpu = _call(fake_clouds, "POST", "/do/v2/droplets", json=body).json()["droplet"]
    assert {i.id for i in p.list_tagged(rid)} == {inst.id, str(cpu["id"])}
    assert {inst.id, str(cpu["id"])} <= {i.id for i in p.list_tagged(None)}
    assert p.terminate(inst.id) and p.terminate(str(cpu["id"]))


def _age_firewalls(fake_clouds, run_id: str) -> None:
    for fw in fake_clouds.do.firewalls.values():
        if fw["name"].startswith(firewall_name(run_id, "")):
            fw["created_at"] = datetime.fromtimestamp(time.time() - 7200, UTC).isoformat().replace("+00:00", "Z")


def test_cleanup_never_removes_the_firewall_of_a_live_gpu_droplet(rest_creds, fake_clouds):
    t, rid = make_target("digitalocean"), new_run_id()
    p = DigitalOceanProvider(rest_creds("digitalocean"))
    inst = p.create(t, rid, **launch_args(rid, t))
    _age_firewalls(fake_clouds, rid)  # past the grace an empty firewall gets
    mine = {fw["id"] for fw in p.firewalls(rid)}
    assert mine and p.cleanup() == [] and mine <= set(fake_clouds.do.firewalls)
    # a listing that failed for one kind of droplet deletes nothing
    fake_clouds.do.fail_queue.extend(["GET /do/v2/droplets:503"] * 6)
    with pytest.raises(PartialListing):
        p.cleanup(lambda tags: True)
    assert mine <= set(fake_clouds.do.firewalls)
    assert p.terminate(inst.id) and not mine & set(fake_clouds.do.firewalls)


def test_a_reaper_pass_that_could_not_list_every_kind_does_not_report_success(rest_creds, fake_clouds, capsys):
    t, rid = make_target("digitalocean"), new_run_id()
    p = DigitalOceanProvider(rest_creds("digitalocean"))
    args = launch_args(rid, t)
    args["tags"]["bakeoff:expires_at"] = str(int(time.time()) - 5)
    inst = p.create(t, rid, **args)
    fake_clouds.do.fail_queue.extend(["GET /do/v2/droplets:503"] * 6)  # one of the two listings fails
    out = reaper.reap(provider_names=["digitalocean"], credentials_fn=lambda name: rest_creds(name))
    assert out["errors"] and any(k.startswith("digitalocean:") for k in out["errors"])
    assert inst.id in {r["id"] for r in out["terminated"]}  # the expired GPU droplet it could see goes
    assert reaper._print_reap(out) == 1


@pytest.mark.slow
def test_a_rate_limit_is_waited_out_to_its_reset_and_teardown_does_not_give_up(rest_creds, fake_clouds):
    t, rid = make_target("digitalocean"), new_run_id()
    p = DigitalOceanProvider(rest_creds("digitalocean"))
    inst = p.create(t, rid, **launch_args(rid, t))
    fake_clouds.do.rate_limited_until = time.time() + 2.0  # a 429 storm: remaining 0 until the reset
    before, start = fake_clouds.do.requests, time.monotonic()
    assert p.terminate(inst.id)
    assert time.monotonic() - start >= 1.5 and str(inst.id) not in fake_clouds.do.nodes
    assert fake_clouds.do.requests - before <= 12  # it waited for the reset instead of hammering


def test_the_wait_for_a_rate_limit_is_bounded(rest_creds, fake_clouds):
    p = DigitalOceanProvider({**rest_creds("digitalocean"), "rate_limit_wait_s": 0.5})
    fake_clouds.do.rate_limited_until = time.time() + 30
    start = time.monotonic()
    with pytest.raises(ProviderError, match="429"):
        p.api.json("GET", "droplets/1")
    assert time.monotonic() - start < 5


# --- Vultr ---------------------------------------------------------------------------------------------


def test_vultr_lists_every_page_by_cursor_and_filters_by_tag_itself(rest_creds, fake_clouds):
    rid = new_run_id()
    p = VultrProvider(rest_creds("vultr"))
    other = _call(fake_clouds, "POST", "/vultr/v2/bare-metals", json={"region": "ewr", "plan": "p", "os_id": 1})
    assert other.status_code == 202  # someone else's node on the account, untagged
    ids = []
    for i in range(3):
        tt = make_target("vultr")
        tt = tt.model_copy(update={"name": f"{tt.name}-{i}"})
        ids.append(p.create(tt, rid, **launch_args(rid, tt)).id)
    p.page_size = 1
    assert sorted(i.id for i in p.list_tagged(rid)) == sorted(ids)
    assert other.json()["bare_metal"]["id"] not in {i.id for i in p.list_tagged(None)}
    for i in ids:
        p.terminate(i)
    _call(fake_clouds, "DELETE", f"/vultr/v2/bare-metals/{other.json()['bare_metal']['id']}")


def test_a_halted_vultr_node_reads_running_so_only_its_expiry_can_delete_it(rest_creds, fake_clouds):
    t, rid = make_target("vultr"), new_run_id()
    p = VultrProvider(rest_creds("vultr"))
    inst = p.wait_ready(p.create(t, rid, **launch_args(rid, t)), 10)
    fake_clouds.vultr.power_off(inst.id)
    seen = p.describe(inst.id)
    assert seen is not None and seen.state == "running" and reaper.verdict(seen, time.time()) is None
    assert reaper.verdict(seen, float(seen.expires_at or 0) + 1).startswith("expired")
    assert p.terminate(inst.id)


# --- provisioning record ----------------------------------------------------------------------------


@pytest.mark.parametrize("name,cls", [("vultr", VultrProvider), ("digitalocean", DigitalOceanProvider)])
def test_a_create_says_how_many_attempts_and_which_refusals_it_took(name, cls, rest_creds, fake_clouds):
    t, rid = make_target(name), new_run_id()
    first = list(t.provider_options.regions)[0]
    (fake_clouds.vultr if name == "vultr" else fake_clouds.do).denied = {first}
    p = cls(rest_creds(name))
    inst = p.create(t, rid, **launch_args(rid, t))
    prov = inst.provisioning.model_dump(mode="json")
    assert prov["attempts"] == 2 and prov["refusals"] == {"capacity": 1} and prov["region"] == inst.region != first
    assert p.terminate(inst.id)


# --- the vendoring script ------------------------------------------------------------------------------


def test_the_vendoring_script_inlines_refs_across_files_and_keeps_off_a_string(tmp_path):
    script = Path(__file__).resolve().parents[2] / "scripts" / "vendor_cloud_specs.py"
    spec = importlib.util.spec_from_file_location("vendor_cloud_specs", script)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "models").mkdir()
    (tmp_path / "root.yaml").write_text("op:\n  schema:\n    $ref: 'models/droplet.yml'\n  x-codeSamples: [1]\n")
    (tmp_path / "models" / "droplet.yml").write_text(
        "type: object\nproperties:\n  status:\n    enum: [new, active, off]\n"
        "  again:\n    $ref: '#/properties/self'\n  self:\n    $ref: 'droplet.yml'\n"
    )
    src = mod.Source(tmp_path)
    got = mod.inline(src, src.load("root.yaml"), "root.yaml")
    schema = got["op"]["schema"]
    assert "x-codeSamples" not in got["op"] and schema["properties"]["status"]["enum"] == ["new", "active", "off"]
    assert schema["properties"]["self"] == {}  # a reference back into itself stays open
    with pytest.raises(SystemExit):
        mod.main([])
