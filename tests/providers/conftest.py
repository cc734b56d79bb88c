"""Fake clouds shared by the provider tests: one moto server and one fake Vultr/DigitalOcean server
per session (control plane only: no emulator behind the nodes), so tests stay fast."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def fake_clouds():
    from bakeoff_sandbox.clouds import Clouds

    clouds = Clouds(None, boot_s=0.05).start()
    yield clouds
    clouds.stop()


@pytest.fixture
def aws_creds(moto_server):
    moto_server.gate.denied, moto_server.gate.stock = set(), {}
    yield {
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "region_name": "us-east-1",
        "endpoint_url": moto_server.url,
        "regions": ["us-east-1", "us-east-2", "us-west-2"],
    }
    moto_server.gate.denied, moto_server.gate.stock = set(), {}


@pytest.fixture
def rest_creds(fake_clouds):
    def creds(provider: str) -> dict:
        base = f"{fake_clouds.url}/{'vultr' if provider == 'vultr' else 'do'}/v2"
        return {"token": "sandbox-token", "base_url": base, "poll_s": 0.02, "backoff_s": 0.01}

    for c in (fake_clouds.vultr, fake_clouds.do):
        c.answer_problems, c.refused = [], []
    yield creds
    for c in (fake_clouds.vultr, fake_clouds.do):
        c.denied, c.fail_queue, c.rate_limited_until = set(), [], 0.0
    # the fakes' own answers must be what the published definitions allow
    assert not fake_clouds.vultr.answer_problems + fake_clouds.do.answer_problems
