"""The fake clouds refuse what the published definitions refuse, pre-flight reads included: undefined
and readOnly body fields, the rules the definitions state only in prose (``spec_rules``, each quoting
its sentence), declared formats, and the Vultr ``plans_metal`` erratum held on the fake's answer."""

from __future__ import annotations

import base64
import json
import re

import httpx
import pytest

from bakeoff_sandbox.spec_check import SPECS, Spec
from bakeoff_sandbox.spec_rules import RULES

AUTH = {"Authorization": "Bearer sandbox-token"}
SCRIPT = "#!/bin/bash\necho hello\n"
DROPLET = {"name": "d1", "region": "atl1", "size": "gpu-mi300x8-1536gb", "image": "gpu-amd-base"}
BARE_METAL = {"region": "ewr", "plan": "vbm-256c-2048gb-8-mi300x-gpu", "os_id": 2284}
RULE_OUT = {"protocol": "tcp", "ports": "1-65535", "destinations": {"addresses": ["0.0.0.0/0"]}}


def _call(fake_clouds, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, f"{fake_clouds.url}{path}", headers=AUTH, timeout=10, **kw)


def _message(r: httpx.Response) -> str:
    body = r.json()
    return body["message"] if "message" in body else body["error"]


@pytest.mark.parametrize(
    "method,path,kw,needles",
    [
        # the pre-flight's reads are checked before they are answered
        ("GET", "/do/v2/sizes", {"params": {"per_page": 999}}, ["maximum of 200"]),
        ("GET", "/do/v2/sizes", {"params": {"bogus": 1}}, ["'bogus' is not defined"]),
        ("GET", "/vultr/v2/plans-metal", {"params": {"per_page": 501}}, ["vultr_per_page_max_500"]),
        ("GET", "/vultr/v2/os", {"params": {"bogus": 1}}, ["'bogus' is not defined"]),
        ("GET", "/vultr/v2/bare-metals", {"params": {"per_page": 501}}, ["vultr_per_page_max_500"]),
        # undefined and readOnly body fields
        (
            "POST",
            "/do/v2/droplets",
            {"json": {**DROPLET, "bogus": 1, "user_data": "#" * 70_000}},
            ["field bogus is not in the definition", "do_user_data_plain_text_64kib", "64 KiB"],
        ),
        ("POST", "/do/v2/tags", {"json": {"name": "t1", "resources": {"count": 0}}}, ["field resources is readOnly"]),
        (
            "POST",
            "/do/v2/firewalls",
            {"json": {"name": "fw1", "id": "x", "status": "succeeded", "outbound_rules": [RULE_OUT]}},
            ["field id is readOnly", "field status is readOnly"],
        ),
        # prose rules
        ("POST", "/do/v2/droplets", {"json": {**DROPLET, "user_data": "a\x00b"}}, ["must be plain text"]),
        ("POST", "/do/v2/droplets", {"json": {**DROPLET, "tags": ["has space"]}}, ["do_tag_names"]),
        ("POST", "/do/v2/droplets", {"json": {**DROPLET, "tags": ["t" * 256]}}, ["do_tag_names", "limit is 255"]),
        ("GET", "/do/v2/droplets", {"params": {"tag_name": "t" * 256}}, ["do_tag_names"]),
        (
            "POST",
            "/do/v2/firewalls",
            {"json": {"name": "fw1", "outbound_rules": [{**RULE_OUT, "ports": "all"}]}},
            ["do_firewall_ports", "'all'"],
        ),
        (
            "POST",
            "/do/v2/firewalls",
            {"json": {"name": "fw1", "outbound_rules": [{**RULE_OUT, "ports": "1-70000"}]}},
            ["do_firewall_ports"],
        ),
        (
            "POST",
            "/vultr/v2/bare-metals",
            {"json": {**BARE_METAL, "image_id": "img-1"}},
            ["vultr_choose_one_image", "given: os_id, image_id"],
        ),
        ("POST", "/vultr/v2/bare-metals", {"json": {**BARE_METAL, "os_id": None}}, ["vultr_choose_one_image"]),
        ("POST", "/vultr/v2/bare-metals", {"json": {**BARE_METAL, "user_data": SCRIPT}}, ["vultr_user_data_base64"]),
        ("POST", "/vultr/v2/bare-metals", {"json": {**BARE_METAL, "mdisk_mode": "raid1"}}, ["field mdisk_mode"]),
    ],
)
def test_each_planted_request_is_refused_naming_why(fake_clouds, rest_creds, method, path, kw, needles):
    r = _call(fake_clouds, method, path, **kw)
    assert r.status_code == (422 if path.startswith("/do/") else 400), r.text
    assert all(n in _message(r) for n in needles), _message(r)
    cloud = fake_clouds.do if path.startswith("/do/") else fake_clouds.vultr
    assert cloud.refused and not cloud.nodes


def test_the_same_requests_made_right_are_accepted(fake_clouds, rest_creds):
    """The rules refuse only what breaks them: each planted case's valid twin is answered."""
    ok = [
        ("GET", "/do/v2/sizes", {"params": {"per_page": 200}}),
        ("GET", "/vultr/v2/plans-metal", {"params": {"per_page": 500}}),
        ("POST", "/do/v2/tags", {"json": {"name": "bakeoff-fw-abc"}}),
        ("POST", "/do/v2/droplets", {"json": {**DROPLET, "user_data": "#" * 65_536, "tags": ["bakeoff-fw-abc"]}}),
        ("POST", "/vultr/v2/bare-metals", {"json": {**BARE_METAL, "user_data": base64.b64encode(b"x").decode()}}),
    ]
    for method, path, kw in ok:
        r = _call(fake_clouds, method, path, **kw)
        assert r.status_code in (200, 201, 202), (path, r.text)
    assert fake_clouds.do.refused == [] and fake_clouds.vultr.refused == []
    for nid in fake_clouds.do.live():
        _call(fake_clouds, "DELETE", f"/do/v2/droplets/{nid}")
    for nid in fake_clouds.vultr.live():
        _call(fake_clouds, "DELETE", f"/vultr/v2/bare-metals/{nid}")


def test_every_prose_rule_quotes_a_sentence_of_its_vendored_definition():
    def words(s: str) -> str:
        return re.sub(r"\s+", " ", re.sub(r"\[([^]]+)\]\([^)]*\)", r"\1", s)).strip()

    text = {c: words(json.dumps(json.loads((SPECS / f"{c}.json").read_text()))) for c in ("digitalocean", "vultr")}
    text = {c: words(t.encode().decode("unicode_escape")) for c, t in text.items()}
    for rule in RULES:
        quoted = words(rule.sentence.split(": os_id")[0])  # the "choose one of" list is bullets there
        assert quoted in text[rule.cloud], f"{rule.name}: {quoted!r} is not in {rule.cloud}.json"
        spec = Spec(rule.cloud, "")
        for op in rule.operations:
            method, path = op.split(" ", 1)
            assert spec.operation(method, path) is not None, f"{rule.name}: {op} is not a vendored operation"


def test_declared_formats_are_checked_in_answers():
    do = Spec("digitalocean", "/do")
    headers = {"ratelimit-limit": "1", "ratelimit-remaining": "1", "ratelimit-reset": "1"}
    fw = {
        "id": "8c7f2e34-1a1b-4c4f-9bbd-7e1c6f1d6a21",
        "name": "fw1",
        "status": "succeeded",
        "created_at": "2026-11-29T21:00:00Z",
        "inbound_rules": [],
        "outbound_rules": [],
        "droplet_ids": [],
        "tags": [],
        "pending_changes": [],
    }
    assert do.check_answer("GET", "/do/v2/firewalls/x", 200, headers, {"firewall": fw}) == []
    bad = do.check_answer("GET", "/do/v2/firewalls/x", 200, headers, {"firewall": {**fw, "created_at": "yesterday"}})
    assert any("created_at" in p and "date-time" in p for p in bad), bad
    v4 = {"ip_address": "203.0.113.400", "netmask": "255.255.255.0", "gateway": "203.0.113.1", "type": "public"}
    problems = do.check_answer("GET", "/do/v2/droplets/1", 200, headers, {"droplet": {"networks": {"v4": [v4]}}})
    assert any("ip_address" in p and "ipv4" in p for p in problems), problems


def test_the_plans_metal_erratum_is_recorded_and_the_fakes_answer_held_to_it(fake_clouds, rest_creds, monkeypatch):
    source = (SPECS / "vultr.SOURCE").read_text()
    assert "erratum: GET /plans-metal 200: answer key plans -> plans_metal" in source
    vultr = Spec("vultr", "/vultr/v2")
    meta = {"total": 0, "links": {"next": "", "prev": ""}}
    assert vultr.check_answer("GET", "/vultr/v2/plans-metal", 200, {}, {"plans_metal": [], "meta": meta}) == []
    assert vultr.check_answer("GET", "/vultr/v2/plans-metal", 200, {}, {"plans": [], "meta": meta})
    # the fake's own answer is checked: one in the schema's spelling is caught
    r = _call(fake_clouds, "GET", "/vultr/v2/plans-metal")
    assert r.status_code == 200 and "plans_metal" in r.json() and fake_clouds.vultr.answer_problems == []
    original = fake_clouds.catalog._vultr_plans

    def schema_spelling(req):
        resp = original(req)
        body = json.loads(resp.get_data())
        resp.set_data(json.dumps({"plans": body.pop("plans_metal"), **body}))
        return resp

    monkeypatch.setattr(fake_clouds.catalog, "_vultr_plans", schema_spelling)
    _call(fake_clouds, "GET", "/vultr/v2/plans-metal")
    assert any("field plans is not in the definition" in p for p in fake_clouds.vultr.answer_problems)
    fake_clouds.vultr.answer_problems = []  # the fixture holds every other answer to the definition
