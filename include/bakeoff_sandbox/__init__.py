"""Sandbox: rehearse the real cloud code path on one machine. A separate package, not part of what
bakeoff ships: it needs the ``sandbox`` extra (werkzeug, moto's server), and bakeoff never imports it.

EC2/SSM/S3 are moto in server mode (the AWS provider's boto3 calls cross a socket); Vultr and
DigitalOcean are local fake REST servers; Oracle Cloud is a fake of its Core API that the real oci
SDK signs its requests to (with a throwaway key made at start). Every "instance" is backed by an
emulator process booted from the user-data the provider sent. Nothing leaves this host (its APIs and
nodes listen on 127.0.0.1, or the private node address $BAKEOFF_NODE_ADDRESS names) and every
figure is EMULATED.

Time and money: ``clock`` is real time plus an offset that ``clock.advance(s)`` moves, firing each
node's kill switch at its deadline (what the boot script's section would do on that cloud), and
``meter`` bills every node as its cloud would (``billed_minutes``), so "no node bills past its
budget, with or without Airflow" is checked in seconds.

Use it from Python (``with Sandbox() as sb, sb.exported():`` then any step's default credentials
resolve to its clouds), or run ``python -m bakeoff_sandbox`` and export the printed ``AIRFLOW_CONN_*``
variables so the DAG's own connections point the real plan at it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bakeoff.providers.credentials import CREDENTIALS_ENV, json_credentials
from bakeoff_sandbox import oci as fake_oci
from bakeoff_sandbox.backing import Backing
from bakeoff_sandbox.billing import Clock, Meter
from bakeoff_sandbox.clouds import TOKEN, Clouds
from bakeoff_sandbox.ec2 import MotoServer, publish_dlami

log = logging.getLogger(__name__)
ENV = CREDENTIALS_ENV  # JSON credentials per provider, for processes the sandbox did not start
AWS_REGIONS = ["us-east-1", "us-east-2", "us-west-2"]
CLIENT_BUCKET = "bakeoff-sandbox-client"  # moto S3: where the client bundle is staged for the nodes
_AWS_CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class Sandbox:
    def __init__(self, boot_s: float = 0.3):
        self.workdir = Path(tempfile.mkdtemp(prefix="bakeoff-sandbox-"))
        self.clock = Clock()
        self.meter = Meter(self.clock)
        self.backing = Backing(self.workdir, self.clock)
        self.backing.kill_switch_handler = self._kill_switch
        self.clock.on_advance(self.backing.fire_due, self.backing.next_due)
        self.clouds = Clouds(self.backing, boot_s=boot_s, meter=self.meter)
        self.moto = MotoServer(self.backing, meter=self.meter)
        self.oci = fake_oci.FakeOci(self.backing, boot_s=boot_s, meter=self.meter)
        self._ticking = threading.Event()
        self.oci_key_pem, self.oci_fingerprint = "", ""

    def start(self) -> Sandbox:
        threading.Thread(target=self._tick, daemon=True, name="sandbox-kill-switches").start()
        self.moto.start()
        self.clouds.start()
        self.oci.start()
        self.oci_key_pem, self.oci_fingerprint = throwaway_api_key()
        import boto3  # noqa: PLC0415

        ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=self.moto.url, **_AWS_CREDS)
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        publish_dlami(AWS_REGIONS, ami)
        boto3.client("s3", region_name="us-east-1", endpoint_url=self.moto.url, **_AWS_CREDS).create_bucket(
            Bucket=CLIENT_BUCKET
        )
        log.info("sandbox: moto at %s, clouds at %s, oci at %s", self.moto.url, self.clouds.url, self.oci.url)
        return self

    def stop(self) -> None:
        self._ticking.set()
        self.backing.close()
        self.clouds.stop()
        self.oci.stop()
        self.moto.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # what providers are given ---------------------------------------------------------------
    def all_credentials(self) -> dict[str, dict[str, Any]]:
        amap = f"{self.clouds.url}/address"
        rest = {"token": TOKEN, "address_map_url": amap, "poll_s": 0.1, "backoff_s": 0.02}
        return {
            "aws": {
                **_AWS_CREDS,
                "region_name": "us-east-1",
                "endpoint_url": self.moto.url,
                "address_map_url": amap,
                "regions": AWS_REGIONS,
                "emulated_nodes": True,  # each node boots the emulator (Backing): cluster targets may run here
            },
            "vultr": {**rest, "base_url": f"{self.clouds.url}/vultr/v2"},
            "digitalocean": {**rest, "base_url": f"{self.clouds.url}/do/v2"},
            "oci": {
                "user": fake_oci.USER,
                "tenancy": fake_oci.TENANCY,
                "fingerprint": self.oci_fingerprint,
                "region": fake_oci.REGION,
                "key_content": self.oci_key_pem,
                "compartment_id": fake_oci.COMPARTMENT,
                "service_endpoint": self.oci.endpoint,
                "address_map_url": amap,
                "poll_s": 0.1,
                "backoff_s": 0.02,
                "emulated_nodes": True,  # each node boots the emulator (Backing): cluster targets may run here
            },
            "client_bundle": {
                **_AWS_CREDS,
                "region_name": "us-east-1",
                "endpoint_url": self.moto.url,
                "bucket": CLIENT_BUCKET,
            },
        }

    def credentials(self, provider: str) -> dict[str, Any]:
        return dict(self.all_credentials().get(provider, {}))

    @contextlib.contextmanager
    def exported(self) -> Iterator[Sandbox]:
        """Inside, this process's ``credentials_from_env`` (every step's default) resolves to these clouds."""
        before = os.environ.get(ENV)
        os.environ[ENV] = json.dumps(self.all_credentials())
        try:
            yield self
        finally:
            if before is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = before

    def env(self) -> dict[str, str]:
        """Environment for other processes: the JSON credentials, and Airflow connections for the DAG."""
        c = self.all_credentials()
        amap = c["aws"]["address_map_url"]
        conns = {
            "AIRFLOW_CONN_AWS_DEFAULT": {
                "conn_type": "aws",
                "login": "testing",
                "password": "testing",
                "extra": {
                    "region_name": "us-east-1",
                    "endpoint_url": self.moto.url,
                    "bakeoff_address_map_url": amap,
                    "bakeoff_regions": AWS_REGIONS,
                    "bakeoff_emulated_nodes": True,
                },
            },
            "AIRFLOW_CONN_VULTR_DEFAULT": {
                "conn_type": "http",
                "host": c["vultr"]["base_url"],
                "password": TOKEN,
                "extra": {"bakeoff_address_map_url": amap, "poll_s": 0.1},
            },
            "AIRFLOW_CONN_DIGITALOCEAN_DEFAULT": {
                "conn_type": "http",
                "host": c["digitalocean"]["base_url"],
                "password": TOKEN,
                "extra": {"bakeoff_address_map_url": amap, "poll_s": 0.1},
            },
            "AIRFLOW_CONN_OCI_DEFAULT": {
                "conn_type": "generic",
                "login": fake_oci.USER,
                "password": self.oci_key_pem,
                "extra": {
                    "tenancy": fake_oci.TENANCY,
                    "fingerprint": self.oci_fingerprint,
                    "region": fake_oci.REGION,
                    "compartment_id": fake_oci.COMPARTMENT,
                    "service_endpoint": self.oci.endpoint,
                    "bakeoff_address_map_url": amap,
                    "poll_s": 0.1,
                    "bakeoff_emulated_nodes": True,
                },
            },
        }
        return {
            ENV: json.dumps(c),
            "AIRFLOW_VAR_BAKEOFF_CLIENT_BUCKET": CLIENT_BUCKET,
            **{k: json.dumps(v) for k, v in conns.items()},
        }

    # ground truth for rehearsals -------------------------------------------------------------
    def live(self) -> dict[str, list[str]]:
        """Nodes each fake cloud still has (not via the providers: this is what they are checked against)."""
        import boto3  # noqa: PLC0415

        aws = []
        for region in AWS_REGIONS:
            ec2 = boto3.client("ec2", region_name=region, endpoint_url=self.moto.url, **_AWS_CREDS)
            for r in ec2.describe_instances(
                Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
            )["Reservations"]:
                aws += [f"{region}/{i['InstanceId']}" for i in r["Instances"]]
        return {
            "aws": sorted(aws),
            "vultr": self.clouds.vultr.live(),
            "digitalocean": self.clouds.do.live(),
            "oci": self.oci.live(),
        }

    def billed_minutes(self, provider: str, since: float, until: float | None = None) -> float:
        """Node-minutes this cloud bills between two sandbox-clock times (ground truth, from the fakes)."""
        return self.meter.billed_minutes(provider, since, until)

    def _tick(self) -> None:
        """Kill switches also fall due in plain real time (a long rehearsal with no clock jumps)."""
        while not self._ticking.wait(1.0):
            self.backing.fire_due(self.clock.now())

    def _kill_switch(self, provider: str, node: str, action: str) -> None:
        """What a node's kill-switch section does to its cloud once it fires."""
        try:
            if provider == "aws":
                self.moto.gate.power_off(node)
            elif provider == "oci":
                if action != "self-delete" or not self._oci_self_delete(node):
                    self.oci.power_off(node)
            elif provider in ("vultr", "digitalocean"):
                self.clouds.cloud(provider).power_off(node)
        except Exception:  # logged, not raised: a node that fails to act is what the reaper is for
            log.exception("sandbox: %s node %s kill switch could not act on its cloud", provider, node)

    def _oci_self_delete(self, iid: str) -> bool:
        """TerminateInstance on itself, signed as its instance principal, at its region's endpoint."""
        import httpx  # noqa: PLC0415

        token = self.oci.instance_principal(iid)
        if not token:
            return False
        auth = f'Signature version="1",keyId="ST${token}",algorithm="rsa-sha256",headers="date",signature="sandbox"'
        resp = httpx.delete(
            f"{self.oci.instance_endpoint(iid)}/20160918/instances/{iid}", headers={"Authorization": auth}, timeout=10.0
        )
        if resp.status_code != 204:
            log.warning("sandbox: oci node %s self-delete refused: %s", iid, resp.status_code)
        return resp.status_code == 204

    def api_calls(self) -> int:
        """Control-plane calls the fake clouds have answered so far."""
        return self.moto.gate.requests + self.clouds.vultr.requests + self.clouds.do.requests + self.oci.requests

    def deny_capacity(self, provider: str, regions: list[str]) -> None:
        """Refuse capacity in these regions/zones (aws), regions (vultr, digitalocean) or availability domains
        (oci), or for these instance types / plans / sizes / shapes wherever they are asked for."""
        if provider == "aws":
            self.moto.gate.denied = set(regions)
        elif provider == "oci":
            self.oci.denied = set(regions)
        else:
            self.clouds.cloud(provider).denied = set(regions)


def throwaway_api_key() -> tuple[str, str]:
    """An RSA API signing key (PEM) and its OCI fingerprint (MD5 of the public key's DER, colon-separated)."""
    import hashlib  # noqa: PLC0415

    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.md5(der, usedforsecurity=False).hexdigest()
    return pem, ":".join(digest[i : i + 2] for i in range(0, 32, 2))


# Credentials resolver for a process started with a sandbox's ``env()`` (empty if none).
credentials_from_env = json_credentials
