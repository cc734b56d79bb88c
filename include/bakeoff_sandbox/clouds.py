"""Local fakes of the Vultr and DigitalOcean control planes, held to the clouds' own API definitions.

Only what the providers use, but as the real APIs behave: Bearer auth, asynchronous creation
(pending/new until the node has booted), cursor (Vultr) and page (DigitalOcean) pagination, 404 for
unknown ids, capacity refusals per region, and injectable 429/5xx answers. Every request is checked
against the vendored OpenAPI definition (``spec_check``, ``specs/``) and refused in the real API's
shape when it does not fit (DigitalOcean 422 ``{"id": "unprocessable_entity", "message"}``, Vultr
400 ``{"error", "status"}``); every answer is checked too, and what does not fit is recorded in
``cloud.answer_problems`` (the tests require it empty). Behaviours the definitions state are kept:
a DigitalOcean listing returns only non-GPU droplets unless ``type=gpus``, and ``tag_name`` cannot be
combined with ``type`` or ``name``; firewall ports are a port, a range or "0"; every DigitalOcean
answer carries ``ratelimit-limit/remaining/reset`` and a rate-limited one is a 429 until the reset
(no Retry-After); Vultr's bare-metal listing takes only ``per_page`` and ``cursor``, and a bare-metal
node has no power field, so a halted node still reads ``active``.
Each created node is backed by an emulator booted from its user-data. The DigitalOcean fake also
keeps tags and cloud firewalls (``clouds.do.firewalls`` is the ground truth) and refuses, as the
real API does, a firewall naming a tag that does not exist yet.

Billing is as the real clouds': a node bills from creation until it is deleted, powered off or not
(``meter``); a node whose kill switch fired is powered off (DigitalOcean ``status: off``; on Vultr
nothing shows it) and bills on until something deletes it.

The same server publishes the address map (where a node's serving port is reached from here) and
a small control surface (``POST /_control``) so out-of-process rehearsals can inject faults.
"""

from __future__ import annotations

import base64
import ipaddress
import itertools
import json
import math
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from bakeoff_sandbox import address_map
from bakeoff_sandbox.backing import Backing
from bakeoff_sandbox.billing import Clock, Meter
from bakeoff_sandbox.httpd import LoopbackServer
from bakeoff_sandbox.rest_catalog import RestCatalog
from bakeoff_sandbox.spec_check import Spec

if TYPE_CHECKING:
    from bakeoff_sandbox.fakes import Parts

TOKEN = "sandbox-token"
_FW_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")
DO_RATE_LIMIT = 5000  # requests per hour (shared/headers.yml ratelimit-limit; 250 per minute as well)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class FakeCloud:
    """State and fault knobs of one fake cloud."""

    def __init__(
        self,
        name: str,
        backing: Backing | None,
        boot_s: float,
        meter: Meter | None = None,
        catalog: RestCatalog | None = None,
    ):
        self.name, self.backing, self.boot_s = name, backing, boot_s
        self.meter = meter or Meter(backing.clock if backing else Clock())
        self.clock = self.meter.clock
        self.nodes: dict[str, dict[str, Any]] = {}
        self.firewalls: dict[str, dict[str, Any]] = {}  # DigitalOcean cloud firewalls by id
        self.tags: set[str] = set()  # DigitalOcean tags that exist
        self.denied: set[str] = set()
        self.fail_queue: list[int | str] = []  # next answers to fail: 503 (any request) or "POST:503"
        self.requests = 0
        self.refused: list[str] = []  # requests the API definition refuses, with why
        self.answer_problems: list[str] = []  # answers of this fake that depart from the definition
        self.rate_limited_until = 0.0  # wall-clock epoch: every request is a 429 until then
        self.sent: list[float] = []  # wall-clock times of recent requests (DigitalOcean's hourly window)
        self.lock = threading.Lock()
        self._ids = itertools.count(400000001)
        self.base_url = ""  # its API root on the server, once served
        self.catalog = catalog or RestCatalog()  # what the account is offered (read-only endpoints)

    # as the sandbox drives it (fakes.CloudFake) ----------------------------------------------
    def credentials(self, address_map_url: str) -> dict[str, Any]:
        return {
            "token": TOKEN,
            "address_map_url": address_map_url,
            "poll_s": 0.1,
            "backoff_s": 0.02,
            "base_url": self.base_url,
        }

    def connection(self, address_map_url: str) -> dict[str, Any]:
        return {
            "conn_type": "http",
            "host": self.base_url,
            "password": TOKEN,
            "extra": {"bakeoff_address_map_url": address_map_url, "poll_s": 0.1},
        }

    def kill_switch(self, node: str, action: str) -> None:
        self.power_off(node)

    def deny_capacity(self, places: list[str]) -> None:
        self.denied = set(places)

    def live(self) -> list[str]:
        with self.lock:
            return sorted(self.nodes)

    def _booted(self, node: dict[str, Any]) -> bool:
        return self.clock.now() >= node["_created"] + self.boot_s

    def power_off(self, nid: str) -> bool:
        """What the node's own ``shutdown`` does: it stops, and (on these clouds) keeps billing."""
        with self.lock:
            node = self.nodes.get(nid)
            if node is None:
                return False
            node["_off"] = True
        self.meter.stopped(self.name, nid)
        return True

    def created(self, nid: str, node: dict[str, Any]) -> None:
        with self.lock:
            self.nodes[nid] = node
        self.meter.launch(self.name, nid)

    def deleted(self, nid: str) -> dict[str, Any] | None:
        with self.lock:
            node = self.nodes.pop(nid, None)
        if node is not None:
            self.meter.deleted(self.name, nid)
        return node


class Clouds(LoopbackServer):
    def __init__(self, backing: Backing | None = None, boot_s: float = 0.3, meter: Meter | None = None):
        """``backing=None``: control plane only, no emulator behind the nodes (provider tests)."""
        self.backing = backing
        meter = meter or Meter(backing.clock if backing else Clock())
        self.catalog = RestCatalog()  # what the accounts are offered (read-only endpoints)
        self.vultr = FakeCloud("vultr", backing, boot_s, meter, self.catalog)
        self.do = FakeCloud("digitalocean", backing, boot_s, meter, self.catalog)
        self.url_map = Map(
            [
                Rule("/vultr/v2/bare-metals", endpoint="v_list", methods=["GET"]),
                Rule("/vultr/v2/bare-metals", endpoint="v_create", methods=["POST"]),
                Rule("/vultr/v2/bare-metals/<nid>", endpoint="v_get", methods=["GET"]),
                Rule("/vultr/v2/bare-metals/<nid>", endpoint="v_delete", methods=["DELETE"]),
                Rule("/do/v2/droplets", endpoint="d_list", methods=["GET"]),
                Rule("/do/v2/droplets", endpoint="d_create", methods=["POST"]),
                Rule("/do/v2/droplets/<nid>", endpoint="d_get", methods=["GET"]),
                Rule("/do/v2/droplets/<nid>", endpoint="d_delete", methods=["DELETE"]),
                Rule("/do/v2/firewalls", endpoint="d_fw_list", methods=["GET"]),
                Rule("/do/v2/firewalls", endpoint="d_fw_create", methods=["POST"]),
                Rule("/do/v2/firewalls/<fid>", endpoint="d_fw_get", methods=["GET"]),
                Rule("/do/v2/firewalls/<fid>", endpoint="d_fw_delete", methods=["DELETE"]),
                Rule("/do/v2/tags", endpoint="d_tag_create", methods=["POST"]),
                Rule("/do/v2/tags/<name>", endpoint="d_tag_get", methods=["GET"]),
                Rule("/address/<provider>/<path:nid>", endpoint="address", methods=["GET"]),
                Rule("/_control", endpoint="control", methods=["POST"]),
            ]
        )
        self.specs = {"vultr": Spec("vultr", "/vultr/v2"), "digitalocean": Spec("digitalocean", "/do")}
        self._serve(self, "sandbox-clouds")
        self.vultr.base_url, self.do.base_url = f"{self.url}/vultr/v2", f"{self.url}/do/v2"

    def cloud(self, provider: str) -> FakeCloud:
        return {"vultr": self.vultr, "digitalocean": self.do}[provider]

    # WSGI ---------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        req = Request(environ)
        endpoint, args = "", {}
        if self.catalog.serves(req):  # the pre-flight's reads (sizes, plans, images, account), held alike
            endpoint = "catalog"
        else:
            try:
                endpoint, args = self.url_map.bind_to_environ(environ).match()
            except Exception:  # noqa: BLE001 - werkzeug raises HTTPException subclasses for 404/405
                return _json({"error": "not found"}, 404)(environ, start_response)
        if endpoint in ("address", "control"):
            return getattr(self, endpoint)(req, **args)(environ, start_response)
        cloud = self.vultr if req.path.startswith("/vultr/") else self.do
        resp = self._answer(req, cloud, endpoint, args)
        if cloud is self.do:
            self._rate_headers(cloud, resp)
        body = json.loads(resp.get_data()) if resp.mimetype == "application/json" and resp.get_data() else None
        spec = self.specs[cloud.name]
        problems = spec.check_answer(req.method, req.path, resp.status_code, dict(resp.headers), body)
        if problems:
            with cloud.lock:
                cloud.answer_problems += [f"{req.method} {req.path} {resp.status_code}: {p}" for p in problems]
        return resp(environ, start_response)

    def _answer(self, req: Request, cloud: FakeCloud, endpoint: str, args: dict[str, Any]) -> Response:
        if req.headers.get("Authorization") != f"Bearer {TOKEN}":
            if cloud is self.do:
                return _json({"id": "unauthorized", "message": "Unable to authenticate you."}, 401)
            return _json({"error": "Invalid API token.", "status": 401}, 401)
        now = time.time()
        with cloud.lock:
            cloud.requests += 1
            cloud.sent = [t for t in cloud.sent if t > now - 3600] + [now]
            limited = now < cloud.rate_limited_until
            injected = None if limited else take_fault(cloud.fail_queue, req.method, req.path)
        if limited or injected == 429:
            if cloud is self.do:  # the rate-limit headers say when to come back; no Retry-After
                return _json({"id": "too_many_requests", "message": "API rate limit exceeded."}, 429)
            return _json({"error": "Rate limit reached, please try your request again later.", "status": 429}, 429)
        if injected:
            if cloud is self.do:
                return _json({"id": "server_error", "message": "sandbox: injected failure"}, injected)
            return _json({"error": "sandbox: injected failure", "status": injected}, injected)
        body = req.get_json(silent=True) if req.data else None
        problems = self.specs[cloud.name].check_request(req.method, req.path, req.args.to_dict(flat=False), body)
        if problems:
            with cloud.lock:
                cloud.refused += [f"{req.method} {req.path}: {p}" for p in problems]
            return _refusal(cloud, "; ".join(problems))
        if endpoint == "catalog":
            return self.catalog.answer(req)
        return getattr(self, endpoint)(req, cloud, **args)

    def _rate_headers(self, cloud: FakeCloud, resp: Response) -> None:
        """DigitalOcean's rate-limit headers on every answer: reset is when the oldest counted request
        expires (epoch seconds); while rate-limited, nothing remains until ``rate_limited_until``."""
        now = time.time()
        with cloud.lock:
            limited = now < cloud.rate_limited_until
            remaining = 0 if limited else max(0, DO_RATE_LIMIT - len(cloud.sent))
            reset = cloud.rate_limited_until if limited else (cloud.sent[0] + 3600 if cloud.sent else now)
        resp.headers["ratelimit-limit"] = str(DO_RATE_LIMIT)
        resp.headers["ratelimit-remaining"] = str(remaining)
        resp.headers["ratelimit-reset"] = str(math.ceil(reset))

    # Vultr ----------------------------------------------------------------------------
    def _vultr_view(self, cloud: FakeCloud, n: dict[str, Any]) -> dict[str, Any]:
        booted = cloud._booted(n)
        return {
            **{k: v for k, v in n.items() if not k.startswith("_")},
            "status": "active" if booted else "pending",  # halted or not: bare metal has no power field
            "main_ip": n["_ip"] if booted else "",
            "os": "Ubuntu 24.04 LTS x64",
            "ram": "3145728 MB",
            "disk": "8x 3.84TB NVMe",
            "cpu_count": 256,
            "netmask_v4": "255.255.254.0" if booted else "",
            "gateway_v4": "203.0.113.1" if booted else "",
            "v6_network": "",
            "v6_main_ip": "",
            "v6_network_size": 0,
            "mac_address": 2199756823533,
            "app_id": 0,
            "image_id": n.get("_image_id", ""),
        }

    def v_create(self, req: Request, cloud: FakeCloud) -> Response:
        body = req.get_json(silent=True) or {}  # held to the definition and its prose rules already
        if body["region"] in cloud.denied or body["plan"] in cloud.denied:
            return _json(
                {"error": "Plan is not available in the selected region (sandbox: out of stock)", "status": 400}, 400
            )
        nid = str(uuid.uuid4())
        script = base64.b64decode(body.get("user_data", "")).decode(errors="replace")
        node = {
            "id": nid,
            "region": body["region"],
            "plan": body["plan"],
            "label": body.get("label", ""),
            "tags": list(body.get("tags") or []),
            "os_id": body.get("os_id") or 0,
            "_image_id": body.get("image_id") or "",
            "date_created": _now_iso(),
            "_created": cloud.clock.now(),
            "_ip": f"203.0.113.{len(cloud.nodes) % 250 + 1}",
        }
        cloud.created(nid, node)
        if cloud.backing:
            cloud.backing.boot("vultr", nid, script)
        return _json({"bare_metal": self._vultr_view(cloud, node)}, 202)

    def v_get(self, req: Request, cloud: FakeCloud, nid: str) -> Response:
        node = cloud.nodes.get(nid)
        if node is None:
            return _json({"error": "Bare Metal not found.", "status": 404}, 404)
        return _json({"bare_metal": self._vultr_view(cloud, node)})

    def v_list(self, req: Request, cloud: FakeCloud) -> Response:
        """Every bare-metal node of the account: the listing takes only per_page (max 500) and cursor."""
        per_page = min(int(req.args.get("per_page", 100)), 500)
        with cloud.lock:
            nodes = list(cloud.nodes.values())
        start = int(base64.b64decode(req.args["cursor"]).decode()) if req.args.get("cursor") else 0
        page = nodes[start : start + per_page]
        nxt = base64.b64encode(str(start + per_page).encode()).decode() if start + per_page < len(nodes) else ""
        return _json(
            {
                "bare_metals": [self._vultr_view(cloud, n) for n in page],
                "meta": {"total": len(nodes), "links": {"next": nxt, "prev": ""}},
            }
        )

    def v_delete(self, req: Request, cloud: FakeCloud, nid: str) -> Response:
        node = cloud.deleted(nid)
        if node is None:
            return _json({"error": "Bare Metal not found.", "status": 404}, 404)
        if cloud.backing:
            cloud.backing.kill("vultr", nid)
        return Response(status=204)

    # DigitalOcean -----------------------------------------------------------------------
    def _do_view(self, cloud: FakeCloud, n: dict[str, Any]) -> dict[str, Any]:
        booted = cloud._booted(n)
        v4 = [{"ip_address": n["_ip"], "type": "public", "netmask": "255.255.255.0"}] if booted else []
        status = ("off" if n.get("_off") else "active") if booted else "new"
        slug, region = n["size_slug"], n["region"]["slug"]
        gpu = {"gpu_info": {"count": 8, "model": slug.split("-")[1], "vram": {"amount": 192, "unit": "gib"}}}
        return {
            **{k: v for k, v in n.items() if not k.startswith("_")},
            "status": status,
            "networks": {"v4": v4, "v6": []},
            "memory": 2048 * 1024,
            "vcpus": 160,
            "disk": 720,
            "locked": False,
            "features": ["monitoring"],
            "backup_ids": [],
            "next_backup_window": None,
            "snapshot_ids": [],
            "volume_ids": [],
            "image": {"id": 7000001, "name": n["_image"], "slug": n["_image"], "type": "base", "public": True},
            "size": {
                "slug": slug,
                "available": True,
                "disk": 720,
                "memory": 2048 * 1024,
                "vcpus": 160,
                "price_hourly": 0.0,
                "price_monthly": 0.0,
                "regions": [region],
                "transfer": 15.0,
                "description": "GPU droplet" if _is_gpu(slug) else "Droplet",
                **(gpu if _is_gpu(slug) else {}),
            },
            "region": {"slug": region, "name": region, "available": True, "features": [], "sizes": [slug]},
            **(gpu if _is_gpu(slug) else {}),
        }

    def d_create(self, req: Request, cloud: FakeCloud) -> Response:
        body = req.get_json(silent=True) or {}
        missing = [f for f in ("name", "region", "size", "image") if not body.get(f)]
        if missing:
            return _json({"id": "unprocessable_entity", "message": f"missing {', '.join(missing)}"}, 422)
        if body["region"] in cloud.denied or body.get("size") in cloud.denied:
            return _json({"id": "unprocessable_entity", "message": "Size is not available in this region."}, 422)
        nid = next(cloud._ids)
        node = {
            "id": nid,
            "name": body["name"],
            "region": {"slug": body["region"]},
            "size_slug": body["size"],
            "tags": list(body.get("tags") or []),
            "created_at": _now_iso(),
            "_image": str(body["image"]),
            "_created": cloud.clock.now(),
            "_ip": f"198.51.100.{len(cloud.nodes) % 250 + 1}",
        }
        cloud.created(str(nid), node)
        with cloud.lock:
            cloud.tags.update(node["tags"])
        if cloud.backing:
            cloud.backing.boot("digitalocean", str(nid), body.get("user_data") or "")
        return _json(
            {
                "droplet": self._do_view(cloud, node),
                "links": {"actions": [{"id": nid + 7, "rel": "create", "href": f"{self.url}/do/v2/actions/{nid + 7}"}]},
            },
            202,
        )

    def d_get(self, req: Request, cloud: FakeCloud, nid: str) -> Response:
        node = cloud.nodes.get(nid)
        if node is None:
            return _json({"id": "not_found", "message": "The resource you were accessing could not be found."}, 404)
        return _json({"droplet": self._do_view(cloud, node)})

    def d_list(self, req: Request, cloud: FakeCloud) -> Response:
        """droplets_list.yml: only non-GPU droplets unless ``type=gpus`` (then only GPU droplets);
        ``tag_name`` filters and cannot be combined with ``name`` or ``type``."""
        tag, kind, name = req.args.get("tag_name"), req.args.get("type"), req.args.get("name")
        if tag is not None and (kind is not None or name is not None):
            return _refusal(cloud, "tag_name can not be combined with name or type")
        gpus = kind == "gpus"
        with cloud.lock:
            nodes = [
                n
                for n in cloud.nodes.values()
                if _is_gpu(n["size_slug"]) == gpus
                and (tag is None or tag in n["tags"])
                and (name is None or n["name"].lower() == name.lower())
            ]
        return self._do_page(req, "droplets", [self._do_view(cloud, n) for n in nodes])

    def _do_page(self, req: Request, key: str, items: list[dict[str, Any]]) -> Response:
        """One page of a DigitalOcean list; links.pages.next repeats the other query parameters."""
        per_page = min(int(req.args.get("per_page", 20)), 200)
        page_no = int(req.args.get("page", 1))
        pages: dict[str, str] = {}
        if page_no * per_page < len(items):
            q = {k: v for k, v in req.args.items() if k != "page"}
            pages["next"] = f"{self.url}{req.path}?{urlencode({**q, 'page': page_no + 1})}"
        return _json(
            {
                key: items[(page_no - 1) * per_page : page_no * per_page],
                "links": {"pages": pages},
                "meta": {"total": len(items)},
            }
        )

    def d_delete(self, req: Request, cloud: FakeCloud, nid: str) -> Response:
        node = cloud.deleted(nid)
        if node is None:
            return _json({"id": "not_found", "message": "The resource you were accessing could not be found."}, 404)
        if cloud.backing:
            cloud.backing.kill("digitalocean", nid)
        return Response(status=204)

    # DigitalOcean cloud firewalls and tags ----------------------------------------------------
    def _fw_view(self, cloud: FakeCloud, fw: dict[str, Any]) -> dict[str, Any]:
        """As the API lists it: a deleted droplet drops out of droplet_ids."""
        return {**fw, "droplet_ids": [d for d in fw["droplet_ids"] if str(d) in cloud.nodes]}

    def d_fw_create(self, req: Request, cloud: FakeCloud) -> Response:
        body = req.get_json(silent=True) or {}
        with cloud.lock:
            problem = _firewall_problem(body, cloud)
            if problem:
                return _json({"id": "unprocessable_entity", "message": problem}, 422)
            fid = str(uuid.uuid4())
            cloud.firewalls[fid] = {
                "id": fid,
                "name": body["name"],
                "status": "succeeded",
                "created_at": _now_iso(),
                "inbound_rules": list(body.get("inbound_rules") or []),
                "outbound_rules": list(body.get("outbound_rules") or []),
                "droplet_ids": [int(d) for d in body.get("droplet_ids") or []],
                "tags": list(body.get("tags") or []),
                "pending_changes": [],
            }
            return _json({"firewall": self._fw_view(cloud, cloud.firewalls[fid])}, 202)

    def d_fw_list(self, req: Request, cloud: FakeCloud) -> Response:
        with cloud.lock:
            fws = [self._fw_view(cloud, fw) for fw in cloud.firewalls.values()]
        return self._do_page(req, "firewalls", fws)

    def d_fw_get(self, req: Request, cloud: FakeCloud, fid: str) -> Response:
        fw = cloud.firewalls.get(fid)
        if fw is None:
            return _json({"id": "not_found", "message": "The resource you were accessing could not be found."}, 404)
        return _json({"firewall": self._fw_view(cloud, fw)})

    def d_fw_delete(self, req: Request, cloud: FakeCloud, fid: str) -> Response:
        with cloud.lock:
            fw = cloud.firewalls.pop(fid, None)
        if fw is None:
            return _json({"id": "not_found", "message": "The resource you were accessing could not be found."}, 404)
        return Response(status=204)

    def d_tag_create(self, req: Request, cloud: FakeCloud) -> Response:
        """Creating a tag that exists answers as creating it did."""
        name = str((req.get_json(silent=True) or {})["name"])  # its pattern and length checked by the definition
        with cloud.lock:
            cloud.tags.add(name)
        return _json({"tag": {"name": name, "resources": {"count": 0}}}, 201)

    def d_tag_get(self, req: Request, cloud: FakeCloud, name: str) -> Response:
        if name not in cloud.tags:
            return _json({"id": "not_found", "message": "The resource you were accessing could not be found."}, 404)
        return _json({"tag": {"name": name, "resources": {"count": 0}}})

    # address map and control -------------------------------------------------------------
    def address(self, req: Request, provider: str, nid: str) -> Response:
        return address_map.answer(self.backing, provider, nid)

    def control(self, req: Request) -> Response:
        """For rehearsals in other processes: {"provider": "vultr", "deny_regions": [...], "fail_next": [429, 503],
        "rate_limit_s": 5}."""
        body = req.get_json(silent=True) or {}
        cloud = self.cloud(body["provider"])
        with cloud.lock:
            if "deny_regions" in body:
                cloud.denied = set(body["deny_regions"])
            if "rate_limit_s" in body:  # a 429 storm: every request refused until then
                cloud.rate_limited_until = time.time() + float(body["rate_limit_s"])
            cloud.fail_queue.extend(body.get("fail_next", []))
        return _json({"ok": True})


def take_fault(queue: list[int | str], method: str, path: str = "") -> int | None:
    """Pop the first injected failure that applies to this request: ``503`` (any), ``"POST:503"`` (a
    method) or ``"GET /vultr/v2/bare-metals:503"`` (a method on one exact path, e.g. only the listing)."""
    for i, f in enumerate(queue):
        m, _, status = str(f).rpartition(":")
        meth, _, where = m.partition(" ")
        if (not meth or meth == method) and (not where or where == path):
            del queue[i]
            return int(status)
    return None


def _firewall_problem(body: dict[str, Any], cloud: FakeCloud) -> str | None:
    """Why the real API would refuse this firewall with a 422, or None."""
    if not _FW_NAME.fullmatch(str(body.get("name", ""))):
        return "name must start with a letter or digit and hold only letters, digits, '.' and '-'"
    rules = [(r, "sources") for r in body.get("inbound_rules") or []]
    rules += [(r, "destinations") for r in body.get("outbound_rules") or []]
    if not rules:
        return "a firewall needs at least one inbound or outbound rule"
    for rule, where in rules:
        if rule.get("protocol") not in ("tcp", "udp", "icmp"):
            return f"invalid protocol {rule.get('protocol')!r}"
        if not rule.get(where):
            return f"a rule needs {where}"
        for addr in rule[where].get("addresses") or []:
            try:
                ipaddress.ip_network(addr, strict=False)
            except ValueError:
                return f"invalid address {addr!r}"
    missing = [t for t in body.get("tags") or [] if t not in cloud.tags]
    if missing:
        return f"tag not found: {', '.join(missing)}"
    unknown = [d for d in body.get("droplet_ids") or [] if str(d) not in cloud.nodes]
    return f"droplet not found: {unknown}" if unknown else None


def _is_gpu(size_slug: str) -> bool:
    """DigitalOcean names every GPU droplet size ``gpu-...`` (gpu-h100x1-80gb, gpu-mi300x8-1536gb)."""
    return size_slug.startswith("gpu-")


def _refusal(cloud: FakeCloud, message: str) -> Response:
    """A request the real API refuses, in its shape: DigitalOcean 422, Vultr 400."""
    if cloud.name == "digitalocean":
        return _json({"id": "unprocessable_entity", "message": message[:1000]}, 422)
    return _json({"error": message[:1000], "status": 400}, 400)


def _json(obj: Any, status: int = 200) -> Response:
    return Response(json.dumps(obj), status=status, mimetype="application/json")


def fake(name: str, parts: Parts) -> FakeCloud:
    """A REST cloud's fake (registry ``fake``), on the one server both share."""
    return parts.server(__name__, lambda: Clouds(parts.backing, boot_s=parts.boot_s, meter=parts.meter)).cloud(name)
