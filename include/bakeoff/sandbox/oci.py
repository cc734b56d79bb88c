"""A local fake of the Oracle Cloud (OCI) Core and Identity REST APIs, as far as the OCI provider uses them.

The provider's real ``oci`` SDK calls cross a socket and get what the service answers: camelCase
JSON under ``/20160918``, ``opc-next-page`` pagination, ``404 NotAuthorizedOrNotFound`` for unknown
OCIDs, ``500 InternalError "Out of host capacity."`` from availability domains set in ``denied``,
``opc-retry-token`` idempotency on creates, instances that go PROVISIONING -> RUNNING (with a public
IP on their VNIC) after ``boot_s``, and network security groups that cannot be deleted while a VNIC
is in them (``409 Conflict``). Requests must carry an Authorization header (the SDK signs each one);
the signature itself is not checked.

Each launched instance boots an emulator through the shared Backing from its decoded user_data;
terminating it kills the emulator. ``live()`` and ``nsgs`` are the ground truth rehearsals check.
"""
from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from bakeoff.sandbox.backing import Backing
from bakeoff.sandbox.clouds import take_fault
from bakeoff.sandbox.httpd import LoopbackServer

REGION, REGION_CODE = "us-ashburn-1", "iad"
ADS = [f"Uocm:US-ASHBURN-AD-{n}" for n in (1, 2, 3)]
_FREEFORM_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")   # conservative: OCI refuses spaces and '.'; ':' is avoided too


def fixed_ocid(kind: str, name: str, region_code: str = "") -> str:
    """A stable OCID (plans reference the sandbox's subnet and image by OCID, so they cannot be random)."""
    return f"ocid1.{kind}.oc1.{region_code}.aaaaaaaa{name.lower().ljust(52, '0')}"


TENANCY = fixed_ocid("tenancy", "bakeoffsandboxtenancy")
USER = fixed_ocid("user", "bakeoffsandboxuser")
COMPARTMENT = fixed_ocid("compartment", "bakeoffsandboxcompartment")
VCN = fixed_ocid("vcn", "bakeoffsandboxvcn", REGION_CODE)
SUBNET = fixed_ocid("subnet", "bakeoffsandboxsubnet", REGION_CODE)
IMAGE = fixed_ocid("image", "bakeoffsandboxgpuimage", REGION_CODE)
OLD_IMAGE = fixed_ocid("image", "bakeoffsandboxoldgpuimage", REGION_CODE)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class OciError(Exception):
    """An answer in the service's error shape."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _not_found(what: str) -> OciError:
    return OciError(404, "NotAuthorizedOrNotFound", f"Authorization failed or requested resource not found ({what}).")


class FakeOci(LoopbackServer):
    def __init__(self, backing: Backing | None = None, boot_s: float = 0.3, terminate_s: float = 0.0):
        """``backing=None``: control plane only (provider tests). ``terminate_s``: how long TERMINATING lasts."""
        self.backing, self.boot_s, self.terminate_s = backing, boot_s, terminate_s
        self.instances: dict[str, dict[str, Any]] = {}
        self.vnics: dict[str, dict[str, Any]] = {}          # vnic id -> vnic (with _instance)
        self.nsgs: dict[str, dict[str, Any]] = {}           # ground truth: live network security groups
        self.rules: dict[str, list[dict[str, Any]]] = {}    # nsg id -> security rules
        self.subnets = {SUBNET: {"id": SUBNET, "vcnId": VCN, "compartmentId": COMPARTMENT, "displayName": "sandbox-public",
                                 "cidrBlock": "10.0.0.0/24", "lifecycleState": "AVAILABLE", "prohibitPublicIpOnVnic": False}}
        now = time.time()
        self.images = [_image(OLD_IMAGE, "Canonical-Ubuntu-22.04-Gen2-GPU-2025.01.01-0", now - 86400 * 90),
                       _image(IMAGE, "Canonical-Ubuntu-22.04-Gen2-GPU-2026.01.01-0", now - 86400)]
        self.denied: set[str] = set()               # availability domains out of host capacity
        self.fail_queue: list[int | str] = []       # injected answers: 503 (any request) or "POST:503"
        self.page_size = 50                         # the most items one list page holds
        self.requests = 0
        self.lock = threading.RLock()
        self._tokens: dict[tuple[str, str], tuple[int, Any]] = {}
        self._ips = itertools.count(1)
        base = "/20160918"
        self.url_map = Map([
            Rule(f"{base}/instances", endpoint="launch", methods=["POST"]),
            Rule(f"{base}/instances", endpoint="list_instances", methods=["GET"]),
            Rule(f"{base}/instances/<iid>", endpoint="get_instance", methods=["GET"]),
            Rule(f"{base}/instances/<iid>", endpoint="terminate", methods=["DELETE"]),
            Rule(f"{base}/images", endpoint="list_images", methods=["GET"]),
            Rule(f"{base}/vnicAttachments", endpoint="list_vnic_attachments", methods=["GET"]),
            Rule(f"{base}/vnics/<vid>", endpoint="get_vnic", methods=["GET"]),
            Rule(f"{base}/subnets/<sid>", endpoint="get_subnet", methods=["GET"]),
            Rule(f"{base}/networkSecurityGroups", endpoint="create_nsg", methods=["POST"]),
            Rule(f"{base}/networkSecurityGroups", endpoint="list_nsgs", methods=["GET"]),
            Rule(f"{base}/networkSecurityGroups/<nid>", endpoint="get_nsg", methods=["GET"]),
            Rule(f"{base}/networkSecurityGroups/<nid>", endpoint="delete_nsg", methods=["DELETE"]),
            Rule(f"{base}/networkSecurityGroups/<nid>/actions/addSecurityRules", endpoint="add_rules", methods=["POST"]),
            Rule(f"{base}/networkSecurityGroups/<nid>/securityRules", endpoint="list_rules", methods=["GET"]),
            Rule(f"{base}/networkSecurityGroups/<nid>/vnics", endpoint="nsg_vnics", methods=["GET"]),
            Rule(f"{base}/availabilityDomains", endpoint="list_ads", methods=["GET"]),
            Rule("/_control", endpoint="control", methods=["POST"]),
        ])
        self._serve(self, "sandbox-oci")

    # ground truth -------------------------------------------------------------------------
    def live(self) -> list[str]:
        """Instances that still exist and bill (not terminating or terminated)."""
        with self.lock:
            return sorted(i for i, n in self.instances.items() if self._state(n) not in ("TERMINATING", "TERMINATED"))

    # WSGI ---------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        req = Request(environ)
        try:
            endpoint, args = self.url_map.bind_to_environ(environ).match()
        except Exception:  # noqa: BLE001 - werkzeug raises HTTPException subclasses for 404/405
            return _error(OciError(404, "NotFound", f"no route {req.method} {req.path}"))(environ, start_response)
        if endpoint == "control":
            return self.control(req)(environ, start_response)
        if not req.headers.get("Authorization"):
            return _error(OciError(401, "NotAuthenticated", "The required information to complete authentication "
                                                            "was not provided."))(environ, start_response)
        with self.lock:
            self.requests += 1
            injected = take_fault(self.fail_queue, req.method)
        if injected:
            return _error(OciError(injected, "TooManyRequests" if injected == 429 else "InternalServerError",
                                   "sandbox: injected failure"))(environ, start_response)
        try:
            resp = self._idempotent(req, endpoint, args)
        except OciError as e:
            resp = _error(e)
        return resp(environ, start_response)

    def _idempotent(self, req: Request, endpoint: str, args: dict[str, str]) -> Response:
        """A POST repeated with the same opc-retry-token gets the first answer and changes nothing."""
        token = req.headers.get("opc-retry-token") if req.method == "POST" else None
        if token:
            with self.lock:
                seen = self._tokens.get((req.path, token))
            if seen:
                return _json(seen[1], seen[0])
        resp = getattr(self, endpoint)(req, **args)
        if token and resp.status_code < 300:
            with self.lock:
                self._tokens[(req.path, token)] = (resp.status_code, json.loads(resp.get_data()))
        return resp

    # instances ----------------------------------------------------------------------------
    def _state(self, n: dict[str, Any]) -> str:
        now = time.time()
        if n.get("_terminated") is not None:
            return "TERMINATING" if now < n["_terminated"] + self.terminate_s else "TERMINATED"
        return "RUNNING" if now >= n["_created"] + self.boot_s else "PROVISIONING"

    def _instance_view(self, n: dict[str, Any]) -> dict[str, Any]:
        return {**{k: v for k, v in n.items() if not k.startswith("_")}, "lifecycleState": self._state(n)}

    def launch(self, req: Request) -> Response:
        body = req.get_json(silent=True) or {}
        src = body.get("sourceDetails") or {}
        vnic = body.get("createVnicDetails") or {}
        missing = [f for f, v in (("availabilityDomain", body.get("availabilityDomain")),
                                  ("compartmentId", body.get("compartmentId")), ("shape", body.get("shape")),
                                  ("sourceDetails", src or body.get("imageId")),
                                  ("createVnicDetails.subnetId", vnic.get("subnetId") or body.get("subnetId"))) if not v]
        if missing:
            raise OciError(400, "MissingParameter", f"Missing required parameters: {', '.join(missing)}")
        ad, subnet_id = body["availabilityDomain"], vnic.get("subnetId") or body.get("subnetId")
        if ad not in ADS:
            raise OciError(400, "InvalidParameter", f"Invalid availabilityDomain {ad!r}")
        bad_tags = [k for k in body.get("freeformTags") or {} if not _FREEFORM_KEY.fullmatch(k)]
        if bad_tags:
            raise OciError(400, "InvalidParameter", f"freeformTags: invalid key(s) {bad_tags}")
        image_id = src.get("imageId") or body.get("imageId")
        if not any(i["id"] == image_id for i in self.images):
            raise _not_found(f"image {image_id}")
        with self.lock:
            subnet = self.subnets.get(subnet_id)
            if subnet is None:
                raise _not_found(f"subnet {subnet_id}")
            for nsg_id in vnic.get("nsgIds") or []:
                if self.nsgs.get(nsg_id, {}).get("vcnId") != subnet["vcnId"]:
                    raise OciError(400, "InvalidParameter", f"NSG {nsg_id} does not exist in the subnet's VCN")
        meta = dict(body.get("metadata") or {})
        try:
            script = base64.b64decode(meta.get("user_data", ""), validate=True).decode(errors="replace")
        except (binascii.Error, ValueError):
            raise OciError(400, "InvalidParameter", "metadata.user_data must be base64") from None
        if ad in self.denied:
            raise OciError(500, "InternalError", "Out of host capacity.")
        iid = _ocid("instance")
        now = time.time()
        node = {"id": iid, "availabilityDomain": ad, "compartmentId": body["compartmentId"], "region": REGION_CODE,
                "displayName": body.get("displayName") or f"instance{int(now)}", "shape": body["shape"],
                "freeformTags": dict(body.get("freeformTags") or {}), "definedTags": {}, "systemTags": {},
                "metadata": meta, "imageId": image_id, "timeCreated": _iso(now),
                "sourceDetails": {"sourceType": "image", "imageId": image_id,
                                  "bootVolumeSizeInGBs": src.get("bootVolumeSizeInGBs")},
                "_created": now, "_terminated": None}
        vid = _ocid("vnic")
        n = next(self._ips)
        with self.lock:
            self.instances[iid] = node
            self.vnics[vid] = {"id": vid, "compartmentId": body["compartmentId"], "availabilityDomain": ad,
                               "subnetId": subnet_id, "nsgIds": list(vnic.get("nsgIds") or []), "isPrimary": True,
                               "privateIp": f"10.0.0.{n % 250 + 2}", "_instance": iid, "_attachment": _ocid("vnicattachment"),
                               "_public": f"192.0.2.{n % 250 + 1}" if vnic.get("assignPublicIp", True) else None}
        if self.backing:
            self.backing.boot("oci", iid, script)
        return _json(self._instance_view(node))

    def get_instance(self, req: Request, iid: str) -> Response:
        with self.lock:
            node = self.instances.get(iid)
            if node is None:
                raise _not_found(f"instance {iid}")
            return _json(self._instance_view(node))

    def list_instances(self, req: Request) -> Response:
        comp = _required(req, "compartmentId")
        ad, name, state = req.args.get("availabilityDomain"), req.args.get("displayName"), req.args.get("lifecycleState")
        with self.lock:
            views = [self._instance_view(n) for n in self.instances.values() if n["compartmentId"] == comp]
        views = [v for v in views if (not ad or v["availabilityDomain"] == ad) and (not name or v["displayName"] == name)
                 and (not state or v["lifecycleState"] == state.upper())]
        return self._page(req, views)

    def terminate(self, req: Request, iid: str) -> Response:
        with self.lock:
            node = self.instances.get(iid)
            if node is None:
                raise _not_found(f"instance {iid}")
            if node["_terminated"] is None:
                node["_terminated"] = time.time()
        if self.backing:
            self.backing.kill("oci", iid)
        return Response(status=204)

    # images, VNICs, subnets, availability domains ----------------------------------------------
    def list_images(self, req: Request) -> Response:
        _required(req, "compartmentId")
        shape = req.args.get("shape")
        images = [i for i in self.images if not shape or shape.startswith("BM.GPU") or shape.startswith("VM.GPU")]
        images.sort(key=lambda i: i["timeCreated"], reverse=req.args.get("sortOrder", "DESC") == "DESC")
        return self._page(req, images)

    def _vnic_state(self, v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(attachment state, the instance behind it): attached once booted, detached once terminated."""
        node = self.instances[v["_instance"]]
        state = self._state(node)
        return {"PROVISIONING": "ATTACHING", "RUNNING": "ATTACHED", "TERMINATING": "DETACHING"}.get(state, "DETACHED"), node

    def list_vnic_attachments(self, req: Request) -> Response:
        comp, iid = _required(req, "compartmentId"), req.args.get("instanceId")
        out = []
        with self.lock:
            for v in self.vnics.values():
                state, node = self._vnic_state(v)
                if v["compartmentId"] == comp and (not iid or v["_instance"] == iid):
                    out.append({"id": v["_attachment"], "instanceId": v["_instance"], "vnicId": v["id"],
                                "availabilityDomain": v["availabilityDomain"], "compartmentId": comp,
                                "subnetId": v["subnetId"], "nicIndex": 0, "lifecycleState": state,
                                "timeCreated": node["timeCreated"]})
        return self._page(req, out)

    def get_vnic(self, req: Request, vid: str) -> Response:
        with self.lock:
            v = self.vnics.get(vid)
            if v is None:
                raise _not_found(f"vnic {vid}")
            state, _ = self._vnic_state(v)
            view = {k: val for k, val in v.items() if not k.startswith("_")}
        return _json({**view, "lifecycleState": "AVAILABLE" if state == "ATTACHED" else "PROVISIONING",
                      "publicIp": v["_public"] if state == "ATTACHED" else None})

    def get_subnet(self, req: Request, sid: str) -> Response:
        subnet = self.subnets.get(sid)
        if subnet is None:
            raise _not_found(f"subnet {sid}")
        return _json(subnet)

    def list_ads(self, req: Request) -> Response:
        comp = _required(req, "compartmentId")
        return _json([{"name": ad, "id": fixed_ocid("availabilitydomain", f"ad{i}", REGION_CODE), "compartmentId": comp}
                      for i, ad in enumerate(ADS, 1)])

    # network security groups -------------------------------------------------------------------
    def _nsg(self, nid: str) -> dict[str, Any]:
        nsg = self.nsgs.get(nid)
        if nsg is None:
            raise _not_found(f"network security group {nid}")
        return nsg

    def _nsg_vnics(self, nid: str) -> list[dict[str, Any]]:
        """VNICs in the group; a terminated instance's VNIC has left it."""
        return [v for v in self.vnics.values() if nid in v["nsgIds"] and self._vnic_state(v)[0] != "DETACHED"]

    def create_nsg(self, req: Request) -> Response:
        body = req.get_json(silent=True) or {}
        missing = [f for f in ("compartmentId", "vcnId") if not body.get(f)]
        if missing:
            raise OciError(400, "MissingParameter", f"Missing required parameters: {', '.join(missing)}")
        with self.lock:
            if body["vcnId"] not in {s["vcnId"] for s in self.subnets.values()}:
                raise _not_found(f"vcn {body['vcnId']}")
            nid = _ocid("networksecuritygroup")
            self.nsgs[nid] = {"id": nid, "compartmentId": body["compartmentId"], "vcnId": body["vcnId"],
                              "displayName": body.get("displayName") or nid[-12:], "lifecycleState": "AVAILABLE",
                              "freeformTags": dict(body.get("freeformTags") or {}), "definedTags": {},
                              "timeCreated": _iso(time.time())}
            self.rules[nid] = []
            return _json(self.nsgs[nid])

    def list_nsgs(self, req: Request) -> Response:
        comp, vcn, name = req.args.get("compartmentId"), req.args.get("vcnId"), req.args.get("displayName")
        if not comp and not vcn:
            raise OciError(400, "MissingParameter", "compartmentId or vcnId is required")
        with self.lock:
            out = [dict(g) for g in self.nsgs.values() if (not comp or g["compartmentId"] == comp)
                   and (not vcn or g["vcnId"] == vcn) and (not name or g["displayName"] == name)]
        return self._page(req, out)

    def get_nsg(self, req: Request, nid: str) -> Response:
        with self.lock:
            return _json(dict(self._nsg(nid)))

    def delete_nsg(self, req: Request, nid: str) -> Response:
        with self.lock:
            self._nsg(nid)
            if self._nsg_vnics(nid):
                raise OciError(409, "Conflict", f"Network security group {nid} still has VNICs in it")
            del self.nsgs[nid]
            self.rules.pop(nid, None)
        return Response(status=204)

    def add_rules(self, req: Request, nid: str) -> Response:
        rules = (req.get_json(silent=True) or {}).get("securityRules") or []
        for r in rules:
            if r.get("direction") not in ("INGRESS", "EGRESS") or not r.get("protocol"):
                raise OciError(400, "InvalidParameter", "a security rule needs direction and protocol")
            if r["direction"] == "INGRESS" and not r.get("source"):
                raise OciError(400, "InvalidParameter", "an INGRESS rule needs a source")
        with self.lock:
            self._nsg(nid)
            added = [{**r, "id": uuid.uuid4().hex[:6].upper(), "isValid": True, "timeCreated": _iso(time.time())}
                     for r in rules]
            self.rules[nid] += added
        return _json({"securityRules": added})

    def list_rules(self, req: Request, nid: str) -> Response:
        direction = req.args.get("direction")
        with self.lock:
            self._nsg(nid)
            out = [r for r in self.rules[nid] if not direction or r["direction"] == direction]
        return self._page(req, out)

    def nsg_vnics(self, req: Request, nid: str) -> Response:
        with self.lock:
            self._nsg(nid)
            out = [{"vnicId": v["id"], "resourceId": v["_instance"], "timeAssociated": self.instances[v["_instance"]]["timeCreated"]}
                   for v in self._nsg_vnics(nid)]
        return self._page(req, out)

    # pagination and control ---------------------------------------------------------------------
    def _page(self, req: Request, items: list[dict[str, Any]]) -> Response:
        """One page; ``opc-next-page`` is an opaque token for the rest (the SDK's paginator follows it)."""
        limit = min(int(req.args.get("limit") or self.page_size), self.page_size)
        start = int(base64.urlsafe_b64decode(req.args["page"]).decode()) if req.args.get("page") else 0
        resp = _json(items[start:start + limit])
        if start + limit < len(items):
            resp.headers["opc-next-page"] = base64.urlsafe_b64encode(str(start + limit).encode()).decode()
        return resp

    def control(self, req: Request) -> Response:
        """{"deny_ads": [...], "fail_next": [429, "POST:503"]} -- for rehearsals in other processes."""
        body = req.get_json(silent=True) or {}
        with self.lock:
            if "deny_ads" in body:
                self.denied = set(body["deny_ads"])
            self.fail_queue.extend(body.get("fail_next", []))
        return _json({"ok": True})


def _image(iid: str, name: str, created: float) -> dict[str, Any]:
    return {"id": iid, "displayName": name, "operatingSystem": "Canonical Ubuntu", "operatingSystemVersion": "22.04",
            "lifecycleState": "AVAILABLE", "timeCreated": _iso(created), "createImageAllowed": True,
            "compartmentId": None, "launchMode": "NATIVE"}


def _ocid(kind: str) -> str:
    return f"ocid1.{kind}.oc1.{REGION_CODE}.amaaaaaa{uuid.uuid4().hex}{uuid.uuid4().hex[:20]}"


def _required(req: Request, name: str) -> str:
    value = req.args.get(name)
    if not value:
        raise OciError(400, "MissingParameter", f"Missing required parameter {name}")
    return value


def _json(obj: Any, status: int = 200) -> Response:
    resp = Response(json.dumps(obj), status=status, mimetype="application/json")
    resp.headers["opc-request-id"] = uuid.uuid4().hex.upper()
    return resp


def _error(e: OciError) -> Response:
    return _json({"code": e.code, "message": e.message}, e.status)
