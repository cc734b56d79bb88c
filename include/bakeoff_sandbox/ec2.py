"""EC2, SSM and S3 as moto in server mode, so the provider's real boto3 calls cross a socket.

A thin WSGI gate in front of moto adds what moto leaves out and the rehearsal needs:
- capacity refusals (``InsufficientInstanceCapacity``) for chosen regions/zones or instance types
  (``denied``), or once a region/zone has used up its ``stock`` of hosts,
- ``ClientToken`` idempotency on RunInstances (moto ignores the token; EC2 honours it): a repeat with
  the same parameters gets the first answer, one with other parameters ``IdempotentParameterMismatch``,
- the EC2 Service Quotas bakeoff reads (``GetServiceQuota``; moto has only VPC's), from ``quotas``,
- booting an emulator from each instance's user-data, and stopping it on TerminateInstances,
- console output = the emulator's log, as an EC2 console shows the boot script's output,
- billing as EC2 bills (``meter``): from launch to termination, not while stopped; a node's own
  power-off (its kill switch) terminates it when it was launched with
  ``InstanceInitiatedShutdownBehavior=terminate`` and stops it otherwise.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from moto.server import DomainDispatcherApplication, create_backend_app

from bakeoff_sandbox.backing import Backing
from bakeoff_sandbox.billing import Clock, Meter
from bakeoff_sandbox.httpd import LoopbackServer

if TYPE_CHECKING:
    from bakeoff_sandbox.fakes import Parts

ACCOUNT_ID = "123456789012"
AWS_REGIONS = ["us-east-1", "us-east-2", "us-west-2"]
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
_REGION_RE = re.compile(r"Credential=[^/]+/[^/]+/([^/]+)/")


# EC2 vCPU quotas per instance family (Service Quotas codes as AWS lists them); the sandbox grants
# enough for one 8-GPU node of each family
QUOTA_NAMES = {
    "L-417A185B": "Running On-Demand P instances",
    "L-1216C47A": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
}
DEFAULT_QUOTAS = {"L-417A185B": 384.0, "L-1216C47A": 640.0}


def _params_digest(params: dict[str, str]) -> str:
    """What EC2 compares when a ClientToken comes again: every parameter of the request but the token."""
    kept = sorted((k, v) for k, v in params.items() if k != "ClientToken")
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()


def _error(code: str, message: str, status: str = "400 Bad Request") -> tuple[str, bytes]:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return status, body.encode()


class Ec2Gate:
    def __init__(self, app: Callable, backing: Backing | None, meter: Meter | None = None):
        self.app, self.backing = app, backing
        self.meter = meter or Meter(backing.clock if backing else Clock())
        self.denied: set[str] = set()  # regions, zones or instance types refusing capacity
        self.stock: dict[str, int] = {}  # region or zone -> launches it still has hosts for (then refused)
        self.fail_regions: set[str] = set()  # regions whose every call is refused (not enabled for the account)
        self.unauthorized: set[str] = set()  # EC2 actions the credentials' policy denies (UnauthorizedOperation)
        self.requests = 0  # API calls seen (the budget guard must make none)
        self._tokens: dict[tuple[str, str], tuple[str, str, list, bytes]] = {}
        # applied vCPU quotas by quota code (Service Quotas), e.g. L-417A185B: Running On-Demand P instances
        self.quotas: dict[str, float] = dict(DEFAULT_QUOTAS)
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable):
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(size) if size else b""
        environ["wsgi.input"] = io.BytesIO(body)
        self.requests += 1
        params = (
            {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}
            if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded")
            else {}
        )
        m = _REGION_RE.search(environ.get("HTTP_AUTHORIZATION", ""))
        region = m.group(1) if m else "us-east-1"
        action = params.get("Action")
        if region in self.fail_regions:
            status, out = _error(
                "AuthFailure", f"sandbox: {region} is not enabled for this account", "401 Unauthorized"
            )
            start_response(status, [("Content-Type", "text/xml")])
            return [out]
        if action in self.unauthorized:
            status, out = _error(
                "UnauthorizedOperation", "You are not authorized to perform this operation.", "403 Forbidden"
            )
            start_response(status, [("Content-Type", "text/xml")])
            return [out]
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith("ServiceQuotasV20190624."):
            return self._service_quotas(start_response, target.split(".", 1)[1], body)
        if action == "RunInstances" and params.get("DryRun", "").lower() != "true":
            return self._run_instances(environ, start_response, params, region)
        if action in ("TerminateInstances", "StopInstances"):
            for k, v in params.items():
                if k.startswith("InstanceId."):
                    if self.backing:
                        self.backing.kill("aws", f"{region}/{v}")
                    (self.meter.deleted if action == "TerminateInstances" else self.meter.stopped)(
                        "aws", f"{region}/{v}"
                    )
        if action == "GetConsoleOutput":
            iid = params.get("InstanceId", "")
            text = self.backing.log_text("aws", f"{region}/{iid}") if self.backing else ""
            if text:
                out = base64.b64encode(text[-60000:].encode()).decode()
                xml = (
                    f'<?xml version="1.0" encoding="UTF-8"?><GetConsoleOutputResponse><requestId>{uuid.uuid4()}'
                    f"</requestId><instanceId>{iid}</instanceId><output>{out}</output></GetConsoleOutputResponse>"
                )
                start_response("200 OK", [("Content-Type", "text/xml")])
                return [xml.encode()]
        return self.app(environ, start_response)

    def _run_instances(self, environ, start_response, params: dict[str, str], region: str):
        zone = params.get("Placement.AvailabilityZone")
        where = zone if zone in self.stock else region
        out_of_stock = self.stock.get(where, 1) <= 0
        if (
            out_of_stock
            or region in self.denied
            or (zone and zone in self.denied)
            or params.get("InstanceType") in self.denied
        ):
            status, body = _error(
                "InsufficientInstanceCapacity",
                f"We currently do not have sufficient {params.get('InstanceType')} capacity in "
                f"{zone or region}. (sandbox)",
            )
            start_response(status, [("Content-Type", "text/xml")])
            return [body]
        token = params.get("ClientToken")
        digest = _params_digest(params)
        with self._lock:
            if token and (region, token) in self._tokens:
                first, status, headers, cached = self._tokens[(region, token)]
                if first != digest:
                    status, cached = _error(
                        "IdempotentParameterMismatch",
                        "Arguments on this idempotent request are inconsistent with arguments used in previous "
                        "request(s).",
                    )
                    headers = [("Content-Type", "text/xml")]
                start_response(status, headers)
                return [cached]
            captured: dict[str, Any] = {}

            def capture(status, headers, exc_info=None):
                captured.update(status=status, headers=headers)
                return lambda data: None

            out = b"".join(self.app(environ, capture))
            if captured["status"].startswith("200"):
                if where in self.stock:
                    self.stock[where] -= 1
                if token:
                    self._tokens[(region, token)] = (digest, captured["status"], captured["headers"], out)
                script = (
                    base64.b64decode(params.get("UserData", "")).decode(errors="replace")
                    if params.get("UserData")
                    else ""
                )
                for iid in re.findall(rb"<instanceId>(i-[0-9a-f]+)</instanceId>", out):
                    self.meter.launch("aws", f"{region}/{iid.decode()}", stop_ends_billing=True)
                    if self.backing:
                        self.backing.boot("aws", f"{region}/{iid.decode()}", script)
        start_response(captured["status"], captured["headers"])
        return [out]

    def _service_quotas(self, start_response, operation: str, body: bytes):
        """GetServiceQuota for EC2 from ``quotas`` (the applied value), NoSuchResourceException otherwise."""
        req = json.loads(body or b"{}")
        code = req.get("QuotaCode", "")
        if operation != "GetServiceQuota" or req.get("ServiceCode") != "ec2" or code not in self.quotas:
            start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.1")])
            err = {"__type": "NoSuchResourceException", "message": f"sandbox: no quota {code} for {operation}"}
            return [json.dumps(err).encode()]
        quota = {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaCode": code,
            "QuotaName": QUOTA_NAMES.get(code, code),
            "Value": self.quotas[code],
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }
        start_response("200 OK", [("Content-Type", "application/x-amz-json-1.1")])
        return [json.dumps({"Quota": quota}).encode()]

    def power_off(self, key: str) -> str:
        """The node ran ``shutdown``: EC2 applies the instance's InstanceInitiatedShutdownBehavior."""
        from moto.ec2.models import ec2_backends  # noqa: PLC0415

        region, iid = key.split("/", 1)
        backend = ec2_backends[ACCOUNT_ID][region]
        if backend.get_instance(iid).instance_initiated_shutdown_behavior == "terminate":
            backend.terminate_instances([iid])
            self.meter.deleted("aws", key)
            return "terminated"
        backend.stop_instances([iid])
        self.meter.stopped("aws", key)
        return "stopped"


class MotoServer(LoopbackServer):
    """moto's backend app behind the gate, on the node address and a free port, in a daemon thread."""

    def __init__(self, backing: Backing | None = None, meter: Meter | None = None):
        self.gate = Ec2Gate(DomainDispatcherApplication(create_backend_app), backing, meter)
        self._serve(self.gate, "sandbox-moto")


def publish_dlami(regions: list[str], ami_id: str) -> None:
    """Publish the Deep Learning AMI public parameter in moto's SSM, as AWS publishes it in every region
    (moto refuses /aws/ names through the API, so this writes the backend directly)."""
    import datetime  # noqa: PLC0415

    from moto.ssm.models import Parameter, ssm_backends  # noqa: PLC0415

    for region in regions:
        backend = ssm_backends[ACCOUNT_ID][region]
        backend._parameters[DLAMI_PARAMETER].append(
            Parameter(
                account_id=ACCOUNT_ID,
                name=DLAMI_PARAMETER,
                value=ami_id,
                parameter_type="String",
                description=None,
                allowed_pattern=None,
                keyid=None,
                last_modified_date=datetime.datetime.now(datetime.UTC),
                version=1,
                data_type="text",
            )
        )


@dataclass
class Ec2Fake:
    """EC2 as the sandbox drives it: moto behind its gate, every node emulator-backed (so cluster
    targets may run here), the Deep Learning AMI parameter published in every region."""

    moto: MotoServer

    @property
    def requests(self) -> int:
        return self.moto.gate.requests

    def credentials(self, address_map_url: str) -> dict[str, Any]:
        return {
            **CREDS,
            "region_name": AWS_REGIONS[0],
            "endpoint_url": self.moto.url,
            "address_map_url": address_map_url,
            "regions": AWS_REGIONS,
            "emulated_nodes": True,
        }

    def connection(self, address_map_url: str) -> dict[str, Any]:
        return {
            "conn_type": "aws",
            "login": CREDS["aws_access_key_id"],
            "password": CREDS["aws_secret_access_key"],
            "extra": {
                "region_name": AWS_REGIONS[0],
                "endpoint_url": self.moto.url,
                "bakeoff_address_map_url": address_map_url,
                "bakeoff_regions": AWS_REGIONS,
                "bakeoff_emulated_nodes": True,
            },
        }

    def live(self) -> list[str]:
        import boto3  # noqa: PLC0415

        out = []
        for region in AWS_REGIONS:
            ec2 = boto3.client("ec2", region_name=region, endpoint_url=self.moto.url, **CREDS)
            for r in ec2.describe_instances(
                Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
            )["Reservations"]:
                out += [f"{region}/{i['InstanceId']}" for i in r["Instances"]]
        return sorted(out)

    def kill_switch(self, node: str, action: str) -> None:
        self.moto.gate.power_off(node)

    def deny_capacity(self, places: list[str]) -> None:
        self.moto.gate.denied = set(places)

    def publish_dlami(self) -> None:
        import boto3  # noqa: PLC0415

        ec2 = boto3.client("ec2", region_name=AWS_REGIONS[0], endpoint_url=self.moto.url, **CREDS)
        publish_dlami(AWS_REGIONS, ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


def fake(name: str, parts: Parts) -> Ec2Fake:
    """The sandbox's EC2 (registry ``fake``), on the sandbox's own moto."""
    made = Ec2Fake(parts.moto)
    parts.after_start.append(made.publish_dlami)
    return made
