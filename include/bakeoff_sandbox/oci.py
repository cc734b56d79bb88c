"""A local fake of the Oracle Cloud (OCI) Core and Identity REST APIs, as far as the OCI provider uses them.

The provider's real ``oci`` SDK calls cross a socket and get what the service answers: camelCase
JSON under ``/20160918``, ``opc-next-page`` pagination, ``404 NotAuthorizedOrNotFound`` for unknown
OCIDs, ``500 InternalError "Out of host capacity."`` from availability domains set in ``denied``,
``opc-retry-token`` idempotency on creates as OCI documents it (a repeat within 24 hours gets the first
answer; the same token with a changed body is refused, ``409``), the shapes the tenancy may launch
(``shapes``) and its service limits (``limits``: GPU nodes per shape and availability domain, a launch
past one is ``400 LimitExceeded``), a Resource Search index that trails the instances by
``search_lag_s`` (eventually consistent, as OCI's is), the read-only calls a pre-flight makes (shapes,
an image, a compute capacity report, limit values and availability), instances that go
PROVISIONING -> RUNNING (with a public IP on their VNIC) after ``boot_s``, and network security
groups that cannot be deleted while a VNIC is in them (``409 Conflict``). Requests must carry an
Authorization header (the SDK signs each one); the signature itself is not checked.

Regions: a request to ``<url>/r/<region>/...`` is answered as that region's endpoint (the provider's
``service_endpoint`` template ``<url>/r/{region}``); a plain ``<url>/...`` is the home region. Instances
live in one region (their OCID's code): other regions' endpoints list none of them and answer 404 for
them, as OCI does. A second region (SECOND_REGION, with SUBNET_2) and any compartment OCID are
accepted, so a node can be put where the connection's compartment and region do not look. Resource
Search (``POST /20180409/resources``, structured queries on freeform tags) finds instances of the
region across every compartment; ``fail_regions`` makes a region's every call answer 503.

Each launched instance boots an emulator through the shared Backing from its decoded user_data;
terminating it kills the emulator. ``live()`` and ``nsgs`` are the ground truth rehearsals check.

Billing is OCI's: an instance bills from launch until it is terminated, STOPPED included (a GPU
shape's stopped instance still bills), on ``meter``. Each instance gets an instance-principal
credential (``instance_principal``, what the metadata and auth services hand a real node); a
request signed with it (``keyId="ST$<token>"``) is allowed what the documented dynamic-group policy
allows and nothing else: deleting a bakeoff-tagged instance in its own compartment.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import logging
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from bakeoff_sandbox.backing import Backing
from bakeoff_sandbox.billing import Clock, Meter
from bakeoff_sandbox.clouds import take_fault
from bakeoff_sandbox.httpd import LoopbackServer

if TYPE_CHECKING:
    from bakeoff_sandbox.fakes import Parts

log = logging.getLogger(__name__)

REGION, REGION_CODE = "us-ashburn-1", "iad"
ADS = [f"Uocm:US-ASHBURN-AD-{n}" for n in (1, 2, 3)]
SECOND_REGION, SECOND_REGION_CODE = "us-phoenix-1", "phx"
REGIONS = {REGION: REGION_CODE, SECOND_REGION: SECOND_REGION_CODE}
ADS_BY_REGION = {REGION: ADS, SECOND_REGION: [f"Uocm:PHX-AD-{n}" for n in (1, 2, 3)]}
_REGION_PREFIX = re.compile(r"^/r/([a-z0-9-]+)(/.*)$")
_SEARCH = re.compile(r"query\s+(\w+)\s+resources(?:\s+where\s+(.+))?", re.I | re.S)
_SEARCH_TERM = re.compile(r"freeformTags\.(key|value)\s*=\s*'([^'\\]*)'", re.I)
_FREEFORM_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")  # conservative: OCI refuses spaces and '.'; ':' is avoided too
# "The combined size of the metadata and extendedMetadata objects can be a maximum of 32,000 bytes."
# (LaunchInstanceDetails.metadata, oci SDK 2.189.0); counted here as keys plus values
METADATA_MAX_BYTES = 32000
RETRY_TOKEN_S = 24 * 3600  # "Retry tokens expire after 24 hours" (OCI API reference, opc-retry-token)
# the GPU shapes the sandbox tenancy is offered, and its service limit for each (nodes per availability
# domain); limit names follow OCI's "<shape family>-count" form but are the sandbox's own
SHAPES = {
    "BM.GPU.MI355X.8": {"gpus": 8, "limit": "gpu-mi355x-count"},
    "BM.GPU.MI300X.8": {"gpus": 8, "limit": "gpu-mi300x-count"},
    "BM.GPU.B200.8": {"gpus": 8, "limit": "gpu-b200-count"},
    "BM.GPU.B300.8": {"gpus": 8, "limit": "gpu-b300-count"},
    "BM.GPU.H200.8": {"gpus": 8, "limit": "gpu-h200-count"},
    "BM.GPU.GB200.4": {"gpus": 4, "limit": "gpu-gb200-count"},
    "BM.GPU.GB300.4": {"gpus": 4, "limit": "gpu-gb300-count"},
}
_KEY_ID = re.compile(r'keyId="(ocid1\.tenancy\.[^/"]+)/')  # an API signing key's keyId: tenancy/user/fingerprint
_PRINCIPAL = re.compile(r'keyId="ST\$([^"]+)"')  # a request signed with an instance principal's security token
RUN_TAG = "bakeoff_run_id"  # the freeform tag every bakeoff node carries


def fixed_ocid(kind: str, name: str, region_code: str = "") -> str:
    """A stable OCID (plans reference the sandbox's subnet and image by OCID, so they cannot be random)."""
    return f"ocid1.{kind}.oc1.{region_code}.aaaaaaaa{name.lower().ljust(52, '0')}"


TENANCY = fixed_ocid("tenancy", "bakeoffsandboxtenancy")
USER = fixed_ocid("user", "bakeoffsandboxuser")
COMPARTMENT = fixed_ocid("compartment", "bakeoffsandboxcompartment")
COMPARTMENT_2 = fixed_ocid("compartment", "bakeoffsandboxsecondcompartment")
VCN_2 = fixed_ocid("vcn", "bakeoffsandboxvcn2", SECOND_REGION_CODE)
SUBNET_2 = fixed_ocid("subnet", "bakeoffsandboxsubnet2", SECOND_REGION_CODE)
VCN = fixed_ocid("vcn", "bakeoffsandboxvcn", REGION_CODE)
SUBNET = fixed_ocid("subnet", "bakeoffsandboxsubnet", REGION_CODE)
IMAGE = fixed_ocid("image", "bakeoffsandboxgpuimage", REGION_CODE)
OLD_IMAGE = fixed_ocid("image", "bakeoffsandboxoldgpuimage", REGION_CODE)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class OciError(Exception):
    """An answer in the service's error shape."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _not_found(what: str) -> OciError:
    return OciError(404, "NotAuthorizedOrNotFound", f"Authorization failed or requested resource not found ({what}).")


class FakeOci(LoopbackServer):
    def __init__(
        self,
        backing: Backing | None = None,
        boot_s: float = 0.3,
        terminate_s: float = 0.0,
        meter: Meter | None = None,
        search_lag_s: float = 2.0,
    ):
        """``backing=None``: control plane only (provider tests). ``terminate_s``: how long TERMINATING lasts.
        ``search_lag_s``: how far the search index trails (a new node is not found, a changed state not
        seen, before it)."""
        self.backing, self.boot_s, self.terminate_s = backing, boot_s, terminate_s
        self.search_lag_s = search_lag_s
        self.shapes: set[str] = set(SHAPES)  # shapes the tenancy may launch (list_shapes answers these)
        self.limits: dict[str, int] = {v["limit"]: 64 for v in SHAPES.values()}  # nodes per AD, per limit
        self.meter = meter or Meter(backing.clock if backing else Clock())
        self.clock = self.meter.clock
        self.principals: dict[str, str] = {}  # instance-principal token -> its instance
        self.instances: dict[str, dict[str, Any]] = {}
        self.vnics: dict[str, dict[str, Any]] = {}  # vnic id -> vnic (with _instance)
        self.nsgs: dict[str, dict[str, Any]] = {}  # ground truth: live network security groups
        self.rules: dict[str, list[dict[str, Any]]] = {}  # nsg id -> security rules
        self.subnets = {
            SUBNET: {
                "id": SUBNET,
                "vcnId": VCN,
                "compartmentId": COMPARTMENT,
                "displayName": "sandbox-public",
                "cidrBlock": "10.0.0.0/24",
                "lifecycleState": "AVAILABLE",
                "prohibitPublicIpOnVnic": False,
            },
            SUBNET_2: {
                "id": SUBNET_2,
                "vcnId": VCN_2,
                "compartmentId": COMPARTMENT_2,
                "displayName": "sandbox-public-2",
                "cidrBlock": "10.1.0.0/24",
                "lifecycleState": "AVAILABLE",
                "prohibitPublicIpOnVnic": False,
            },
        }
        now = time.time()
        self.images = [
            _image(OLD_IMAGE, "Canonical-Ubuntu-22.04-Gen2-GPU-2025.01.01-0", now - 86400 * 90),
            _image(IMAGE, "Canonical-Ubuntu-22.04-Gen2-GPU-2026.01.01-0", now - 86400),
        ]
        self.denied: set[str] = set()  # availability domains (or shapes) out of host capacity
        self.fail_queue: list[int | str] = []  # injected answers: 503 (any request) or "POST:503"
        self.fail_regions: set[str] = set()  # regions whose every call answers 503 (an outage)
        self.page_size = 50  # the most items one list page holds
        self.requests = 0
        self.lock = threading.RLock()
        self._tokens: dict[tuple[str, str], tuple[float, str, int, Any]] = {}  # (when, body digest, answer)
        self._ips = itertools.count(1)
        base = "/20160918"
        self.url_map = Map(
            [
                Rule(f"{base}/instances", endpoint="launch", methods=["POST"]),
                Rule(f"{base}/instances", endpoint="list_instances", methods=["GET"]),
                Rule(f"{base}/instances/<iid>", endpoint="get_instance", methods=["GET"]),
                Rule(f"{base}/instances/<iid>", endpoint="terminate", methods=["DELETE"]),
                Rule(f"{base}/images", endpoint="list_images", methods=["GET"]),
                Rule(f"{base}/images/<image_id>", endpoint="get_image", methods=["GET"]),
                Rule(f"{base}/shapes", endpoint="list_shapes", methods=["GET"]),
                Rule(f"{base}/computeCapacityReports", endpoint="capacity_report", methods=["POST"]),
                Rule("/20190729/limitValues", endpoint="limit_values", methods=["GET"]),
                Rule("/20190729/limitDefinitions", endpoint="limit_definitions", methods=["GET"]),
                Rule(
                    "/20190729/services/<service>/limits/<name>/resourceAvailability",
                    endpoint="resource_availability",
                    methods=["GET"],
                ),
                Rule(f"{base}/vnicAttachments", endpoint="list_vnic_attachments", methods=["GET"]),
                Rule(f"{base}/vnics/<vid>", endpoint="get_vnic", methods=["GET"]),
                Rule(f"{base}/subnets/<sid>", endpoint="get_subnet", methods=["GET"]),
                Rule(f"{base}/networkSecurityGroups", endpoint="create_nsg", methods=["POST"]),
                Rule(f"{base}/networkSecurityGroups", endpoint="list_nsgs", methods=["GET"]),
                Rule(f"{base}/networkSecurityGroups/<nid>", endpoint="get_nsg", methods=["GET"]),
                Rule(f"{base}/networkSecurityGroups/<nid>", endpoint="delete_nsg", methods=["DELETE"]),
                Rule(
                    f"{base}/networkSecurityGroups/<nid>/actions/addSecurityRules",
                    endpoint="add_rules",
                    methods=["POST"],
                ),
                Rule(f"{base}/networkSecurityGroups/<nid>/securityRules", endpoint="list_rules", methods=["GET"]),
                Rule(f"{base}/networkSecurityGroups/<nid>/vnics", endpoint="nsg_vnics", methods=["GET"]),
                Rule(f"{base}/availabilityDomains", endpoint="list_ads", methods=["GET"]),
                Rule(f"{base}/tenancies/<tid>/regionSubscriptions", endpoint="region_subscriptions", methods=["GET"]),
                Rule("/20180409/resources", endpoint="search", methods=["POST"]),
                Rule("/_control", endpoint="control", methods=["POST"]),
            ]
        )
        self._serve(self, "sandbox-oci")

    @property
    def endpoint(self) -> str:
        """The provider's ``service_endpoint``: one endpoint per region, as OCI has."""
        return f"{self.url}/r/{{region}}"

    # ground truth -------------------------------------------------------------------------
    def live(self) -> list[str]:
        """Instances that still exist and bill (not terminating or terminated)."""
        with self.lock:
            return sorted(i for i, n in self.instances.items() if self._state(n) not in ("TERMINATING", "TERMINATED"))

    # WSGI ---------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        m = _REGION_PREFIX.match(environ.get("PATH_INFO", ""))
        if m:
            environ["PATH_INFO"] = m.group(2)
        environ["sandbox.region"] = m.group(1) if m else REGION
        req = Request(environ)
        try:
            endpoint, args = self.url_map.bind_to_environ(environ).match()
        except Exception:  # noqa: BLE001 - werkzeug raises HTTPException subclasses for 404/405
            return _error(OciError(404, "NotFound", f"no route {req.method} {req.path}"))(environ, start_response)
        if endpoint == "control":
            return self.control(req)(environ, start_response)
        if not req.headers.get("Authorization"):
            return _error(
                OciError(
                    401, "NotAuthenticated", "The required information to complete authentication was not provided."
                )
            )(environ, start_response)
        key = _KEY_ID.search(req.headers.get("Authorization", ""))
        if key and key.group(1) != TENANCY:  # a user key is named tenancy/user/fingerprint
            return _error(
                OciError(
                    401,
                    "NotAuthenticated",
                    "The required information to complete authentication was not provided or was incorrect.",
                )
            )(environ, start_response)
        if _region(req) not in REGIONS:
            return _error(OciError(404, "NotFound", f"sandbox: unknown region {_region(req)}"))(environ, start_response)
        with self.lock:
            self.requests += 1
            injected = 503 if _region(req) in self.fail_regions else take_fault(self.fail_queue, req.method, req.path)
        if injected:
            return _error(
                OciError(
                    injected,
                    "TooManyRequests" if injected == 429 else "InternalServerError",
                    "sandbox: injected failure",
                )
            )(environ, start_response)
        try:
            self._authorize_principal(req, endpoint, args)
            resp = self._idempotent(req, endpoint, args)
        except OciError as e:
            resp = _error(e)
        return resp(environ, start_response)

    def _idempotent(self, req: Request, endpoint: str, args: dict[str, str]) -> Response:
        """A POST repeated with the same opc-retry-token within 24 hours gets the first answer and changes
        nothing; the same token with a different body is refused (409), as OCI does; after 24 hours the
        token is forgotten and the request is a new one."""
        token = req.headers.get("opc-retry-token") if req.method == "POST" else None
        digest = hashlib.sha256(req.get_data()).hexdigest()
        if token:
            with self.lock:
                seen = self._tokens.get((req.path, token))
                if seen and self.clock.now() - seen[0] >= RETRY_TOKEN_S:
                    del self._tokens[(req.path, token)]
                    seen = None
            if seen and seen[1] != digest:
                raise OciError(
                    409,
                    "Conflict",
                    "The opc-retry-token was already used with a different request; use a new token "
                    "for a different request.",
                )
            if seen:
                return _json(seen[3], seen[2])
        resp = getattr(self, endpoint)(req, **args)
        if token and resp.status_code < 300:
            with self.lock:
                self._tokens[(req.path, token)] = (
                    self.clock.now(),
                    digest,
                    resp.status_code,
                    json.loads(resp.get_data()),
                )
        return resp

    # instance principals and power ------------------------------------------------------------
    def instance_principal(self, iid: str) -> str | None:
        """The security token a node obtains for itself (metadata service + auth service), while it exists."""
        with self.lock:
            return next((t for t, i in self.principals.items() if i == iid), None)

    def instance_endpoint(self, iid: str) -> str:
        """The Core API endpoint of the region the instance lives in (where its own calls go)."""
        code = self.instances[iid]["region"]
        return f"{self.url}/r/{next(r for r, c in REGIONS.items() if c == code)}"

    def _authorize_principal(self, req: Request, endpoint: str, args: dict[str, str]) -> None:
        """An instance principal may delete bakeoff instances of its compartment, and do nothing else: the
        documented policy (INSTANCE_DELETE in the compartment kept for bakeoff nodes)."""
        m = _PRINCIPAL.search(req.headers.get("Authorization", ""))
        if not m:
            return
        with self.lock:
            own = self.instances.get(self.principals.get(m.group(1), ""))
            if own is None or own.get("_terminated") is not None:
                raise OciError(401, "NotAuthenticated", "The instance principal's security token is not valid.")
            target = self.instances.get(args.get("iid", "")) if endpoint == "terminate" else None
            if (
                target is None
                or target["compartmentId"] != own["compartmentId"]
                or RUN_TAG not in target["freeformTags"]
            ):
                raise _not_found(f"{req.method} {req.path} for an instance principal")

    # as the sandbox drives it (fakes.CloudFake) ----------------------------------------------
    @cached_property
    def api_key(self) -> tuple[str, str]:
        """The sandbox connection's API signing key (PEM) and fingerprint, made when first asked."""
        return throwaway_api_key()

    def credentials(self, address_map_url: str) -> dict[str, Any]:
        pem, fingerprint = self.api_key
        return {
            "user": USER,
            "tenancy": TENANCY,
            "fingerprint": fingerprint,
            "region": REGION,
            "key_content": pem,
            "compartment_id": COMPARTMENT,
            "service_endpoint": self.endpoint,
            "address_map_url": address_map_url,
            "poll_s": 0.1,
            "backoff_s": 0.02,
            "emulated_nodes": True,  # each node boots the emulator (Backing): cluster targets may run here
        }

    def connection(self, address_map_url: str) -> dict[str, Any]:
        pem, fingerprint = self.api_key
        return {
            "conn_type": "generic",
            "login": USER,
            "password": pem,
            "extra": {
                "tenancy": TENANCY,
                "fingerprint": fingerprint,
                "region": REGION,
                "compartment_id": COMPARTMENT,
                "service_endpoint": self.endpoint,
                "bakeoff_address_map_url": address_map_url,
                "poll_s": 0.1,
                "bakeoff_emulated_nodes": True,
            },
        }

    def kill_switch(self, node: str, action: str) -> None:
        """A self-delete section deletes the node through its instance principal; else it powers off."""
        if action != "self-delete" or not self._self_delete(node):
            self.power_off(node)

    def deny_capacity(self, places: list[str]) -> None:
        self.denied = set(places)

    def _self_delete(self, iid: str) -> bool:
        """TerminateInstance on itself, signed as its instance principal, at its region's endpoint."""
        import httpx  # noqa: PLC0415

        token = self.instance_principal(iid)
        if not token:
            return False
        auth = f'Signature version="1",keyId="ST${token}",algorithm="rsa-sha256",headers="date",signature="sandbox"'
        resp = httpx.delete(
            f"{self.instance_endpoint(iid)}/20160918/instances/{iid}", headers={"Authorization": auth}, timeout=10.0
        )
        if resp.status_code != 204:
            log.warning("sandbox: oci node %s self-delete refused: %s", iid, resp.status_code)
        return resp.status_code == 204

    def power_off(self, iid: str) -> bool:
        """The node ran ``poweroff``: STOPPED, and still billed."""
        with self.lock:
            node = self.instances.get(iid)
            if node is None or node["_terminated"] is not None:
                return False
            node["_stopped"] = True
        self.meter.stopped("oci", iid)
        return True

    # instances ----------------------------------------------------------------------------
    def _state(self, n: dict[str, Any], at: float | None = None) -> str:
        now = self.clock.now() if at is None else at
        if n.get("_terminated") is not None and now >= n["_terminated"]:  # (the index may see an earlier moment)
            return "TERMINATING" if now < n["_terminated"] + self.terminate_s else "TERMINATED"
        if n.get("_stopped"):
            return "STOPPED"
        return "RUNNING" if now >= n["_created"] + self.boot_s else "PROVISIONING"

    def _instance_view(self, n: dict[str, Any]) -> dict[str, Any]:
        return {**{k: v for k, v in n.items() if not k.startswith("_")}, "lifecycleState": self._state(n)}

    def launch(self, req: Request) -> Response:
        body = req.get_json(silent=True) or {}
        src = body.get("sourceDetails") or {}
        vnic = body.get("createVnicDetails") or {}
        missing = [
            f
            for f, v in (
                ("availabilityDomain", body.get("availabilityDomain")),
                ("compartmentId", body.get("compartmentId")),
                ("shape", body.get("shape")),
                ("sourceDetails", src or body.get("imageId")),
                ("createVnicDetails.subnetId", vnic.get("subnetId") or body.get("subnetId")),
            )
            if not v
        ]
        if missing:
            raise OciError(400, "MissingParameter", f"Missing required parameters: {', '.join(missing)}")
        ad, subnet_id = body["availabilityDomain"], vnic.get("subnetId") or body.get("subnetId")
        region = _region(req)
        if ad not in ADS_BY_REGION[region]:
            raise OciError(400, "InvalidParameter", f"Invalid availabilityDomain {ad!r}")
        bad_tags = [k for k in body.get("freeformTags") or {} if not _FREEFORM_KEY.fullmatch(k)]
        if bad_tags:
            raise OciError(400, "InvalidParameter", f"freeformTags: invalid key(s) {bad_tags}")
        image_id = src.get("imageId") or body.get("imageId")
        if not any(i["id"] == image_id for i in self.images):
            raise _not_found(f"image {image_id}")
        with self.lock:
            subnet = self.subnets.get(subnet_id)
            if subnet is None or _code_of(subnet_id) not in ("", REGIONS[region]):
                raise _not_found(f"subnet {subnet_id}")
            for nsg_id in vnic.get("nsgIds") or []:
                if self.nsgs.get(nsg_id, {}).get("vcnId") != subnet["vcnId"]:
                    raise OciError(400, "InvalidParameter", f"NSG {nsg_id} does not exist in the subnet's VCN")
        meta = dict(body.get("metadata") or {})
        size = sum(len(k.encode()) + len(str(v).encode()) for k, v in meta.items())
        if size > METADATA_MAX_BYTES:
            raise OciError(400, "InvalidParameter", f"metadata is {size} bytes, over {METADATA_MAX_BYTES}")
        try:
            script = base64.b64decode(meta.get("user_data", ""), validate=True).decode(errors="replace")
        except (binascii.Error, ValueError):
            raise OciError(400, "InvalidParameter", "metadata.user_data must be base64") from None
        if body["shape"] not in self.shapes:
            raise OciError(400, "InvalidParameter", f"Shape {body['shape']} is not valid for this tenancy.")
        if ad in self.denied or body["shape"] in self.denied:
            raise OciError(500, "InternalError", "Out of host capacity.")
        limit = SHAPES.get(body["shape"], {}).get("limit")
        if limit and self._used(limit, ad) >= self.limits.get(limit, 0):
            raise OciError(
                400,
                "LimitExceeded",
                f"The following service limits were exceeded: {limit}. Request a service limit increase "
                "from the service limits page in the console.",
            )
        iid = _ocid("instance", REGIONS[region])
        now = self.clock.now()
        node = {
            "id": iid,
            "availabilityDomain": ad,
            "compartmentId": body["compartmentId"],
            "region": REGIONS[region],
            "displayName": body.get("displayName") or f"instance{int(now)}",
            "shape": body["shape"],
            "freeformTags": dict(body.get("freeformTags") or {}),
            "definedTags": {},
            "systemTags": {},
            "metadata": meta,
            "imageId": image_id,
            "timeCreated": _iso(now),
            "sourceDetails": {
                "sourceType": "image",
                "imageId": image_id,
                "bootVolumeSizeInGBs": src.get("bootVolumeSizeInGBs"),
            },
            "_created": now,
            "_terminated": None,
        }
        vid = _ocid("vnic")
        n = next(self._ips)
        with self.lock:
            self.instances[iid] = node
            self.principals[uuid.uuid4().hex] = iid
            self.vnics[vid] = {
                "id": vid,
                "compartmentId": body["compartmentId"],
                "availabilityDomain": ad,
                "subnetId": subnet_id,
                "nsgIds": list(vnic.get("nsgIds") or []),
                "isPrimary": True,
                "privateIp": f"10.0.0.{n % 250 + 2}",
                "_instance": iid,
                "_attachment": _ocid("vnicattachment"),
                "_public": f"192.0.2.{n % 250 + 1}" if vnic.get("assignPublicIp", True) else None,
            }
        self.meter.launch("oci", iid, at=now)
        if self.backing:
            self.backing.boot("oci", iid, script)
        return _json(self._instance_view(node))

    def _node_here(self, req: Request, iid: str) -> dict[str, Any] | None:
        """The instance if it lives in the region this request was sent to (another region's endpoint: 404)."""
        node = self.instances.get(iid)
        return node if node is not None and node["region"] == REGIONS[_region(req)] else None

    def get_instance(self, req: Request, iid: str) -> Response:
        with self.lock:
            node = self._node_here(req, iid)
            if node is None:
                raise _not_found(f"instance {iid}")
            return _json(self._instance_view(node))

    def list_instances(self, req: Request) -> Response:
        comp = _required(req, "compartmentId")
        ad, name, state = (
            req.args.get("availabilityDomain"),
            req.args.get("displayName"),
            req.args.get("lifecycleState"),
        )
        with self.lock:
            views = [
                self._instance_view(n)
                for n in self.instances.values()
                if n["compartmentId"] == comp and n["region"] == REGIONS[_region(req)]
            ]
        views = [
            v
            for v in views
            if (not ad or v["availabilityDomain"] == ad)
            and (not name or v["displayName"] == name)
            and (not state or v["lifecycleState"] == state.upper())
        ]
        return self._page(req, views)

    def terminate(self, req: Request, iid: str) -> Response:
        with self.lock:
            node = self._node_here(req, iid)
            if node is None:
                raise _not_found(f"instance {iid}")
            if node["_terminated"] is None:
                node["_terminated"] = self.clock.now()
        self.meter.deleted("oci", iid)
        if self.backing:
            self.backing.kill("oci", iid)
        return Response(status=204)

    # shapes, limits, capacity (what a pre-flight reads) -----------------------------------------
    def _used(self, limit: str, ad: str) -> int:
        """Nodes counting against a limit in an availability domain (every instance not yet terminated)."""
        with self.lock:
            return sum(
                1
                for n in self.instances.values()
                if n["availabilityDomain"] == ad
                and SHAPES.get(n["shape"], {}).get("limit") == limit
                and self._state(n) != "TERMINATED"
            )

    def list_shapes(self, req: Request) -> Response:
        _required(req, "compartmentId")
        ad = req.args.get("availabilityDomain")
        if ad and ad not in ADS_BY_REGION[_region(req)]:
            raise OciError(400, "InvalidParameter", f"Invalid availabilityDomain {ad!r}")
        shapes = [
            {"shape": name, "gpus": SHAPES[name]["gpus"], "isBilledForStoppedInstance": True}
            for name in sorted(self.shapes)
        ]
        return self._page(req, shapes)

    def get_image(self, req: Request, image_id: str) -> Response:
        image = next((i for i in self.images if i["id"] == image_id), None)
        if image is None:
            raise _not_found(f"image {image_id}")
        return _json(image)

    def capacity_report(self, req: Request) -> Response:
        """CreateComputeCapacityReport: per shape, whether the availability domain has hosts for it now."""
        body = req.get_json(silent=True) or {}
        ad, comp = body.get("availabilityDomain"), body.get("compartmentId")
        if not ad or not comp:
            raise OciError(400, "MissingParameter", "Missing required parameters: availabilityDomain, compartmentId")
        if ad not in ADS_BY_REGION[_region(req)]:
            raise OciError(400, "InvalidParameter", f"Invalid availabilityDomain {ad!r}")
        out = []
        for want in body.get("shapeAvailabilities") or []:
            shape = want.get("instanceShape")
            if shape not in self.shapes:
                status, count = "HARDWARE_NOT_SUPPORTED", 0
            elif ad in self.denied:
                status, count = "OUT_OF_HOST_CAPACITY", 0
            else:
                status, count = "AVAILABLE", 4
            out.append({"instanceShape": shape, "availabilityStatus": status, "availableCount": count})
        return _json(
            {
                "compartmentId": comp,
                "availabilityDomain": ad,
                "shapeAvailabilities": out,
                "timeCreated": _iso(self.clock.now()),
            }
        )

    def limit_values(self, req: Request) -> Response:
        """ListLimitValues for compute: each GPU limit per availability domain of this region."""
        if _required(req, "compartmentId") != TENANCY:
            raise OciError(400, "InvalidParameter", "compartmentId must be the tenancy OCID for limits")
        if _required(req, "serviceName") != "compute":
            return self._page(req, [])
        name = req.args.get("name")
        rows = [
            {"name": limit, "scopeType": "AD", "availabilityDomain": ad, "value": value}
            for limit, value in sorted(self.limits.items())
            if not name or limit == name
            for ad in ADS_BY_REGION[_region(req)]
        ]
        return self._page(req, rows)

    def limit_definitions(self, req: Request) -> Response:
        """ListLimitDefinitions for compute: one per GPU limit, its description naming the shape."""
        _required(req, "compartmentId")
        if req.args.get("serviceName", "compute") != "compute":
            return self._page(req, [])
        rows = [
            {
                "name": v["limit"],
                "serviceName": "compute",
                "description": f"{shape} nodes per availability domain",
                "scopeType": "AD",
                "areQuotasSupported": True,
                "isResourceAvailabilitySupported": True,
                "isDeprecated": False,
                "isEligibleForLimitIncrease": True,
                "isDynamic": False,
            }
            for shape, v in sorted(SHAPES.items())
        ]
        return self._page(req, rows)

    def resource_availability(self, req: Request, service: str, name: str) -> Response:
        _required(req, "compartmentId")
        ad = req.args.get("availabilityDomain")
        if service != "compute" or name not in self.limits:
            raise _not_found(f"limit {service}/{name}")
        if not ad:
            raise OciError(400, "MissingParameter", f"Missing required parameter availabilityDomain for {name}")
        used = self._used(name, ad)
        return _json({"used": used, "available": max(0, self.limits[name] - used), "effectiveQuotaValue": None})

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
        return {"PROVISIONING": "ATTACHING", "RUNNING": "ATTACHED", "TERMINATING": "DETACHING"}.get(
            state, "DETACHED"
        ), node

    def list_vnic_attachments(self, req: Request) -> Response:
        comp, iid = _required(req, "compartmentId"), req.args.get("instanceId")
        out = []
        with self.lock:
            for v in self.vnics.values():
                state, node = self._vnic_state(v)
                if v["compartmentId"] == comp and (not iid or v["_instance"] == iid):
                    out.append(
                        {
                            "id": v["_attachment"],
                            "instanceId": v["_instance"],
                            "vnicId": v["id"],
                            "availabilityDomain": v["availabilityDomain"],
                            "compartmentId": comp,
                            "subnetId": v["subnetId"],
                            "nicIndex": 0,
                            "lifecycleState": state,
                            "timeCreated": node["timeCreated"],
                        }
                    )
        return self._page(req, out)

    def get_vnic(self, req: Request, vid: str) -> Response:
        with self.lock:
            v = self.vnics.get(vid)
            if v is None:
                raise _not_found(f"vnic {vid}")
            state, _ = self._vnic_state(v)
            view = {k: val for k, val in v.items() if not k.startswith("_")}
        return _json(
            {
                **view,
                "lifecycleState": "AVAILABLE" if state == "ATTACHED" else "PROVISIONING",
                "publicIp": v["_public"] if state == "ATTACHED" else None,
            }
        )

    def get_subnet(self, req: Request, sid: str) -> Response:
        subnet = self.subnets.get(sid)
        if subnet is None:
            raise _not_found(f"subnet {sid}")
        return _json(subnet)

    def list_ads(self, req: Request) -> Response:
        comp = _required(req, "compartmentId")
        code = REGIONS[_region(req)]
        return _json(
            [
                {"name": ad, "id": fixed_ocid("availabilitydomain", f"ad{i}", code), "compartmentId": comp}
                for i, ad in enumerate(ADS_BY_REGION[_region(req)], 1)
            ]
        )

    def region_subscriptions(self, req: Request, tid: str) -> Response:
        if tid != TENANCY:
            raise _not_found(f"tenancy {tid}")
        return _json(
            [
                {"regionKey": code.upper(), "regionName": name, "status": "READY", "isHomeRegion": name == REGION}
                for name, code in REGIONS.items()
            ]
        )

    # resource search -----------------------------------------------------------------------------
    def search(self, req: Request) -> Response:
        """Structured search over this region's instances in every compartment of the tenancy, on
        freeform tag key/value terms joined by && (what the provider asks); anything else is refused."""
        body = req.get_json(silent=True) or {}
        if body.get("type") != "Structured":
            raise OciError(400, "InvalidParameter", "sandbox: only Structured searches are supported")
        m = _SEARCH.fullmatch(str(body.get("query", "")).strip())
        if not m or m.group(1).lower() not in ("instance", "all"):
            raise OciError(400, "InvalidParameter", f"sandbox: unsupported query {body.get('query')!r}")
        want: dict[str, str] = {}
        for clause in (m.group(2) or "").strip().strip("()").split("&&") if m.group(2) else []:
            t = _SEARCH_TERM.fullmatch(clause.strip())
            if not t:
                raise OciError(400, "InvalidParameter", f"sandbox: unsupported condition {clause.strip()!r}")
            want[t.group(1).lower()] = t.group(2)

        def matches(tags: dict[str, str]) -> bool:
            return (
                any(
                    ("key" not in want or k == want["key"]) and ("value" not in want or v == want["value"])
                    for k, v in tags.items()
                )
                if want
                else True
            )

        code, indexed = REGIONS[_region(req)], self.clock.now() - self.search_lag_s
        with self.lock:
            hits = [
                {
                    "resourceType": "Instance",
                    "identifier": n["id"],
                    "compartmentId": n["compartmentId"],
                    "timeCreated": n["timeCreated"],
                    "displayName": n["displayName"],
                    "availabilityDomain": n["availabilityDomain"],
                    "lifecycleState": self._state(n, at=indexed),
                    "freeformTags": dict(n["freeformTags"]),
                    "definedTags": {},
                    "systemTags": {},
                }
                for n in self.instances.values()
                if n["region"] == code and n["_created"] <= indexed and matches(n["freeformTags"])
            ]
        page = self._page(req, hits)
        items = json.loads(page.get_data())
        resp = _json({"items": items})
        if page.headers.get("opc-next-page"):
            resp.headers["opc-next-page"] = page.headers["opc-next-page"]
        return resp

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
            self.nsgs[nid] = {
                "id": nid,
                "compartmentId": body["compartmentId"],
                "vcnId": body["vcnId"],
                "displayName": body.get("displayName") or nid[-12:],
                "lifecycleState": "AVAILABLE",
                "freeformTags": dict(body.get("freeformTags") or {}),
                "definedTags": {},
                "timeCreated": _iso(time.time()),
            }
            self.rules[nid] = []
            return _json(self.nsgs[nid])

    def list_nsgs(self, req: Request) -> Response:
        comp, vcn, name = req.args.get("compartmentId"), req.args.get("vcnId"), req.args.get("displayName")
        if not comp and not vcn:
            raise OciError(400, "MissingParameter", "compartmentId or vcnId is required")
        with self.lock:
            out = [
                dict(g)
                for g in self.nsgs.values()
                if (not comp or g["compartmentId"] == comp)
                and (not vcn or g["vcnId"] == vcn)
                and (not name or g["displayName"] == name)
            ]
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
            added = [
                {**r, "id": uuid.uuid4().hex[:6].upper(), "isValid": True, "timeCreated": _iso(time.time())}
                for r in rules
            ]
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
            out = [
                {
                    "vnicId": v["id"],
                    "resourceId": v["_instance"],
                    "timeAssociated": self.instances[v["_instance"]]["timeCreated"],
                }
                for v in self._nsg_vnics(nid)
            ]
        return self._page(req, out)

    # pagination and control ---------------------------------------------------------------------
    def _page(self, req: Request, items: list[dict[str, Any]]) -> Response:
        """One page; ``opc-next-page`` is an opaque token for the rest (the SDK's paginator follows it)."""
        limit = min(int(req.args.get("limit") or self.page_size), self.page_size)
        start = int(base64.urlsafe_b64decode(req.args["page"]).decode()) if req.args.get("page") else 0
        resp = _json(items[start : start + limit])
        if start + limit < len(items):
            resp.headers["opc-next-page"] = base64.urlsafe_b64encode(str(start + limit).encode()).decode()
        return resp

    def control(self, req: Request) -> Response:
        """For rehearsals in other processes:
        {"deny_ads": [...], "fail_next": [429, "POST:503"], "fail_regions": [...]}."""
        body = req.get_json(silent=True) or {}
        with self.lock:
            if "deny_ads" in body:
                self.denied = set(body["deny_ads"])
            self.fail_queue.extend(body.get("fail_next", []))
            if "fail_regions" in body:
                self.fail_regions = set(body["fail_regions"])
        return _json({"ok": True})


def _image(iid: str, name: str, created: float) -> dict[str, Any]:
    return {
        "id": iid,
        "displayName": name,
        "operatingSystem": "Canonical Ubuntu",
        "operatingSystemVersion": "22.04",
        "lifecycleState": "AVAILABLE",
        "timeCreated": _iso(created),
        "createImageAllowed": True,
        "compartmentId": None,
        "launchMode": "NATIVE",
    }


def _ocid(kind: str, code: str = REGION_CODE) -> str:
    return f"ocid1.{kind}.oc1.{code}.amaaaaaa{uuid.uuid4().hex}{uuid.uuid4().hex[:20]}"


def _code_of(ocid: str) -> str:
    """The region code an OCID carries (empty for global resources)."""
    parts = ocid.split(".")
    return parts[3] if len(parts) >= 5 else ""


def _region(req: Request) -> str:
    return req.environ.get("sandbox.region", REGION)


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


def throwaway_api_key() -> tuple[str, str]:
    """An RSA API signing key (PEM) and its OCI fingerprint (MD5 of the public key's DER, colon-separated)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.md5(der, usedforsecurity=False).hexdigest()
    return pem, ":".join(digest[i : i + 2] for i in range(0, 32, 2))


def fake(name: str, parts: Parts) -> FakeOci:
    """OCI's fake (registry ``fake``)."""
    return parts.server(__name__, lambda: FakeOci(parts.backing, boot_s=parts.boot_s, meter=parts.meter))
