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

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.providers.credentials import CREDENTIALS_ENV, json_credentials
from bakeoff_sandbox.address_map import AddressMap
from bakeoff_sandbox.backing import Backing
from bakeoff_sandbox.billing import Clock, Meter
from bakeoff_sandbox.ec2 import CREDS, MotoServer
from bakeoff_sandbox.fakes import CloudFake, Parts, every_fake

log = logging.getLogger(__name__)
ENV = CREDENTIALS_ENV  # JSON credentials per provider, for processes the sandbox did not start
CLIENT_BUCKET = "bakeoff-sandbox-client"  # moto S3: where the client bundle is staged for the nodes


class Sandbox:
    def __init__(self, boot_s: float = 0.3):
        self.workdir = Path(tempfile.mkdtemp(prefix="bakeoff-sandbox-"))
        self.clock = Clock()
        self.meter = Meter(self.clock)
        self.backing = Backing(self.workdir, self.clock)
        self.backing.kill_switch_handler = self._kill_switch
        self.clock.on_advance(self.backing.fire_due, self.backing.next_due)
        self.moto = MotoServer(self.backing, meter=self.meter)  # EC2's fake, and the client bundle's S3
        self.address_map = AddressMap(self.backing)
        self.parts = Parts(self.backing, self.meter, boot_s, self.moto)
        # each cloud's fake, from the module its registry entry names: the sandbox names no cloud
        self.fakes: dict[str, CloudFake] = every_fake(self.parts)
        self._ticking = threading.Event()

    def start(self) -> Sandbox:
        threading.Thread(target=self._tick, daemon=True, name="sandbox-kill-switches").start()
        self.moto.start()
        self.address_map.start()
        for server in self.parts.servers.values():
            server.start()
        for step in self.parts.after_start:
            step()
        import boto3  # noqa: PLC0415

        boto3.client("s3", region_name="us-east-1", endpoint_url=self.moto.url, **CREDS).create_bucket(
            Bucket=CLIENT_BUCKET
        )
        log.info("sandbox: moto at %s, fakes of %s", self.moto.url, ", ".join(self.fakes))
        return self

    def stop(self) -> None:
        self._ticking.set()
        self.backing.close()
        for server in self.parts.servers.values():
            server.stop()
        self.address_map.stop()
        self.moto.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # what providers are given ---------------------------------------------------------------
    def all_credentials(self) -> dict[str, dict[str, Any]]:
        amap = f"{self.address_map.url}/address"
        bundle = {**CREDS, "region_name": "us-east-1", "endpoint_url": self.moto.url, "bucket": CLIENT_BUCKET}
        return {**{name: f.credentials(amap) for name, f in self.fakes.items()}, "client_bundle": bundle}

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
        amap = f"{self.address_map.url}/address"
        conns = {
            f"AIRFLOW_CONN_{str(PROVIDERS[name].conn_id).upper()}": f.connection(amap) for name, f in self.fakes.items()
        }
        return {
            ENV: json.dumps(self.all_credentials()),
            "AIRFLOW_VAR_BAKEOFF_CLIENT_BUCKET": CLIENT_BUCKET,
            **{k: json.dumps(v) for k, v in conns.items()},
        }

    # ground truth for rehearsals -------------------------------------------------------------
    def live(self) -> dict[str, list[str]]:
        """Nodes each fake cloud still has (not via the providers: this is what they are checked against)."""
        return {name: f.live() for name, f in self.fakes.items()}

    def billed_minutes(self, provider: str, since: float, until: float | None = None) -> float:
        """Node-minutes this cloud bills between two sandbox-clock times (ground truth, from the fakes)."""
        return self.meter.billed_minutes(provider, since, until)

    def _tick(self) -> None:
        """Kill switches also fall due in plain real time (a long rehearsal with no clock jumps)."""
        while not self._ticking.wait(1.0):
            self.backing.fire_due(self.clock.now())

    def _kill_switch(self, provider: str, node: str, action: str) -> None:
        """What a node's kill-switch section does to its cloud once it fires."""
        fake = self.fakes.get(provider)
        try:
            if fake is not None:
                fake.kill_switch(node, action)
        except Exception:  # logged, not raised: a node that fails to act is what the reaper is for
            log.exception("sandbox: %s node %s kill switch could not act on its cloud", provider, node)

    def api_calls(self) -> int:
        """Control-plane calls the fake clouds have answered so far."""
        return sum(f.requests for f in self.fakes.values())

    def deny_capacity(self, provider: str, places: list[str]) -> None:
        """Refuse capacity in these regions, zones or availability domains, or for these instance types,
        plans, sizes or shapes wherever they are asked for."""
        self.fakes[provider].deny_capacity(places)


# Credentials resolver for a process started with a sandbox's ``env()`` (empty if none).
credentials_from_env = json_credentials
