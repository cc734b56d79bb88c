"""Attacks on the kill switch: a node's instance principal reaching past its own run, a forged or
stale principal, a powered-off node left billing while it has not expired, and the node-side
reaper loop given a bad interval."""

from __future__ import annotations

import base64
import dataclasses

import httpx
import pytest

from bakeoff.cleanup import reaper
from bakeoff.core.instance import Instance
from bakeoff_sandbox import oci as fake_oci

BASE = "/20160918"


@pytest.fixture
def fake():
    f = fake_oci.FakeOci(boot_s=0.0).start()
    yield f
    f.stop()


def launch(fake, run: str | None, compartment: str = fake_oci.COMPARTMENT) -> str:
    body = {
        "availabilityDomain": fake_oci.ADS[0],
        "compartmentId": compartment,
        "shape": "BM.GPU.MI300X.8",
        "sourceDetails": {"sourceType": "image", "imageId": fake_oci.IMAGE},
        "createVnicDetails": {"subnetId": fake_oci.SUBNET},
        "freeformTags": {"bakeoff_run_id": run} if run else {},
        "metadata": {"user_data": base64.b64encode(b"#!/bin/bash\n").decode()},
    }
    r = httpx.post(f"{fake.url}{BASE}/instances", json=body, headers={"Authorization": 'Signature keyId="api"'})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def as_principal(token: str) -> dict[str, str]:
    return {"Authorization": f'Signature version="1",keyId="ST${token}",algorithm="rsa-sha256",signature="x"'}


def state(fake, iid: str) -> str:
    return fake._state(fake.instances[iid])


def test_instance_principal_deletes_only_bakeoff_nodes_of_its_compartment(fake):
    mine, other = launch(fake, "run-a"), launch(fake, None)  # another workload's instance
    elsewhere = launch(fake, "run-b", fake_oci.COMPARTMENT_2)  # bakeoff, but another compartment
    token = fake.instance_principal(mine)
    h = as_principal(token)
    # what a compromised serving container on the node would try with the node's identity
    assert httpx.delete(f"{fake.url}{BASE}/instances/{other}", headers=h).status_code == 404
    assert httpx.delete(f"{fake.url}{BASE}/instances/{elsewhere}", headers=h).status_code == 404
    assert (
        httpx.get(f"{fake.url}{BASE}/instances", params={"compartmentId": fake_oci.COMPARTMENT}, headers=h).status_code
        == 404
    )
    assert httpx.get(f"{fake.url}{BASE}/instances/{other}", headers=h).status_code == 404
    assert httpx.post(f"{fake.url}{BASE}/instances", json={}, headers=h).status_code == 404
    assert state(fake, other) == "RUNNING" and state(fake, elsewhere) == "RUNNING"
    # what its kill switch does
    assert httpx.delete(f"{fake.url}{BASE}/instances/{mine}", headers=h).status_code == 204
    assert state(fake, mine) == "TERMINATED"
    # the principal dies with its instance
    assert httpx.delete(f"{fake.url}{BASE}/instances/{other}", headers=h).status_code == 401


def test_forged_instance_principal_is_refused(fake):
    other = launch(fake, "run-b")
    assert httpx.delete(f"{fake.url}{BASE}/instances/{other}", headers=as_principal("forged")).status_code == 401
    assert state(fake, other) == "RUNNING"


def test_stopped_oci_node_still_bills(fake):
    iid = launch(fake, "run-a")
    t0 = fake.clock.now()
    assert fake.power_off(iid) and state(fake, iid) == "STOPPED" and iid in fake.live()
    fake.clock.advance(3600)
    assert fake.meter.billed_minutes("oci", t0) == pytest.approx(60, abs=0.5)


@pytest.mark.parametrize("provider", ["vultr", "digitalocean", "oci", "aws"])
def test_powered_off_node_is_reaped_before_its_expiry(data_root, provider):
    """The kill switch powered it off hours before its expiry tag; Vultr/DigitalOcean/OCI bill it meanwhile."""
    now = 1_800_000_000.0
    inst = Instance(
        provider=provider,
        id="n-1",
        target="t",
        run_id="run-unknown-here",
        state="failed",
        expires_at=now + 3 * 3600,
        tags={"bakeoff:expires_at": str(int(now + 3 * 3600))},
    )
    why = reaper.verdict(inst, now)
    assert why and "powered off" in why
    assert reaper.verdict(dataclasses.replace(inst, state="running"), now) is None  # a live node is kept


@pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf")])
def test_reap_loop_refuses_a_bad_interval_naming_the_flag(bad):
    with pytest.raises(ValueError, match="--interval-s"):
        reaper.reap_loop(bad, wait=lambda s: True, max_passes=1)
