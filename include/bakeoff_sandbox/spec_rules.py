"""Rules the clouds' API definitions state in prose, not in a schema, held as named checks.

Each rule quotes the sentence it comes from and names where that sentence stands in the vendored
definition (``specs/``), so a reader can see the fake refuses only what the cloud itself says it
refuses. ``spec_check.Spec.check_request`` applies the rules of its cloud after the schema checks.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Query = dict[str, list[str]]


@dataclass(frozen=True)
class Rule:
    name: str
    cloud: str
    operations: tuple[str, ...]  # "METHOD /template" as the definition spells it
    sentence: str  # the definition's own words
    where: str  # where the sentence stands in the vendored definition
    check: Callable[[Query, Any], list[str]]  # (query, JSON body) -> why the request breaks the rule


DO_USER_DATA_MAX = 64 * 1024
DO_TAG_MAX = 255
_DO_TAG = re.compile(r"[A-Za-z0-9:_-]+")
# firewall_rule.yml: "a single port, a range (e.g. "8000-9000"), or "0" when all ports are open"
_FW_PORTS = re.compile(r"0|([0-9]{1,5})(-([0-9]{1,5}))?")
VULTR_IMAGE_FIELDS = ("os_id", "snapshot_id", "app_id", "image_id")
VULTR_PER_PAGE_MAX = 500


def _body(body: Any) -> dict[str, Any]:
    return body if isinstance(body, dict) else {}


def _do_user_data(query: Query, body: Any) -> list[str]:
    data = _body(body).get("user_data")
    if not isinstance(data, str):
        return []
    out = []
    if len(data.encode()) > DO_USER_DATA_MAX:
        out.append(f"user_data is {len(data.encode())} bytes; it may not exceed 64 KiB ({DO_USER_DATA_MAX} bytes)")
    if any(ord(c) < 32 and c not in "\t\n\r" for c in data):
        out.append("user_data must be plain text (it holds control characters)")
    return out


def tag_name_problem(name: str) -> str | None:
    """Why DigitalOcean refuses ``name`` as a tag, or None."""
    if len(name) > DO_TAG_MAX:
        return f"tag {name[:40]!r}... is {len(name)} characters; the limit is {DO_TAG_MAX}"
    if not _DO_TAG.fullmatch(name):
        return f"tag {name!r} may contain only letters, numbers, colons, dashes and underscores"
    return None


def _do_tags(query: Query, body: Any) -> list[str]:
    b = _body(body)
    names = list(b.get("tags") or [])
    for rules in (b.get("inbound_rules") or [], b.get("outbound_rules") or []):
        for rule in rules:
            for side in ("sources", "destinations"):
                names += (rule.get(side) or {}).get("tags") or []
    names += query.get("tag_name", [])
    return [p for n in names if isinstance(n, str) and (p := tag_name_problem(n))]


def ports_problem(ports: str) -> str | None:
    """Why a firewall rule's ``ports`` breaks the definition's sentence, or None."""
    m = _FW_PORTS.fullmatch(ports)
    if m and all(not g or 1 <= int(g) <= 65535 for g in (m.group(1), m.group(3))):
        return None
    return f"invalid ports {ports!r}: a port, a range such as 8000-9000, or 0"


def _do_firewall_ports(query: Query, body: Any) -> list[str]:
    b = _body(body)
    rules = [*(b.get("inbound_rules") or []), *(b.get("outbound_rules") or [])]
    return [
        p
        for r in rules
        if isinstance(r, dict) and r.get("protocol") != "icmp" and (p := ports_problem(str(r.get("ports", ""))))
    ]


def _vultr_user_data(query: Query, body: Any) -> list[str]:
    data = _body(body).get("user_data")
    if not isinstance(data, str):
        return []
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return ["user_data must be base64 encoded"]
    return []


def _vultr_one_image(query: Query, body: Any) -> list[str]:
    given = [f for f in VULTR_IMAGE_FIELDS if _body(body).get(f) not in (None, "", 0)]
    if len(given) == 1:
        return []
    return [
        f"choose one of {', '.join(VULTR_IMAGE_FIELDS)} to deploy the instance (given: {', '.join(given) or 'none'})"
    ]


def _vultr_per_page(query: Query, body: Any) -> list[str]:
    out = []
    for v in query.get("per_page", []):
        if not v.isdigit() or not 1 <= int(v) <= VULTR_PER_PAGE_MAX:
            out.append(f"query parameter 'per_page': {v!r} is not a count from 1 to {VULTR_PER_PAGE_MAX}")
    return out


RULES: tuple[Rule, ...] = (
    Rule(
        "do_user_data_plain_text_64kib",
        "digitalocean",
        ("POST /v2/droplets",),
        "It must be plain text and may not exceed 64 KiB in size.",
        "POST /v2/droplets requestBody: user_data",
        _do_user_data,
    ),
    Rule(
        "do_tag_names",
        "digitalocean",
        ("POST /v2/droplets", "POST /v2/firewalls", "GET /v2/droplets"),
        "Tags may contain letters, numbers, colons, dashes, and underscores. "
        "There is a limit of 255 characters per tag.",
        "POST /v2/tags requestBody: name (its schema holds the tag it creates; the rule, every tag a droplet, "
        "firewall or listing names)",
        _do_tags,
    ),
    Rule(
        "do_firewall_ports",
        "digitalocean",
        ("POST /v2/firewalls",),
        "The ports on which traffic will be allowed specified as a string containing a single port, a range "
        '(e.g. "8000-9000"), or "0" when all ports are open for a protocol.',
        "POST /v2/firewalls requestBody: inbound_rules[].ports, outbound_rules[].ports",
        _do_firewall_ports,
    ),
    Rule(
        "vultr_user_data_base64",
        "vultr",
        ("POST /bare-metals",),
        "The user-supplied, base64 encoded user data for this Instance.",
        "POST /bare-metals requestBody: user_data",
        _vultr_user_data,
    ),
    Rule(
        "vultr_choose_one_image",
        "vultr",
        ("POST /bare-metals",),
        "Choose one of the following to deploy the instance: os_id, snapshot_id, app_id, image_id",
        "POST /bare-metals description",
        _vultr_one_image,
    ),
    Rule(
        "vultr_per_page_max_500",
        "vultr",
        ("GET /bare-metals", "GET /plans-metal", "GET /os", "GET /regions"),
        "Number of items requested per page. Default is 100 and Max is 500.",
        "parameters: per_page of GET /bare-metals, /plans-metal, /os and /regions",
        _vultr_per_page,
    ),
)


def rule_problems(cloud: str, method: str, template: str, query: Query, body: Any) -> list[str]:
    """Why the request breaks a rule its cloud states in prose, each named (empty: none)."""
    op = f"{method.upper()} {template}"
    return [f"{r.name}: {p}" for r in RULES if r.cloud == cloud and op in r.operations for p in r.check(query, body)]
