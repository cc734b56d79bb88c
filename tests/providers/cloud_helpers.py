"""Targets and launch arguments for the cloud provider tests."""

from __future__ import annotations

import copy
import time
import uuid

from bakeoff import secrets
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.serving import userdata
from tests.plan_fixtures import without_deployment


def make_target(provider: str, **options):
    """One target of the sandbox plan (or a DigitalOcean variant), with provider_options overridden."""
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    by = {t["provider"]: t for t in raw["targets"]}
    t = copy.deepcopy(by["vultr"] if provider == "digitalocean" else by[provider])
    if provider == "digitalocean":
        t.update(name="mi300x-vllm", provider="digitalocean", instance_type="gpu-mi300x8-1536gb")
        t["provider_options"]["regions"] = ["atl1", "nyc2"]
    t["provider_options"].update(options)
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def launch_args(run_id: str, target) -> dict:
    exp = time.time() + 3600
    return {
        "tags": {
            "bakeoff:run_id": run_id,
            "bakeoff:target": target.slug,
            "bakeoff:plan": "p",
            "bakeoff:expires_at": str(int(exp)),
            "bakeoff:installation": secrets.installation_id(),  # as provisioning.provision tags it
        },
        # the boot script's renderer, as provisioning.provision hands it in (read at each call: a test may patch it)
        "spec": {
            "api_key": "bk-" + uuid.uuid4().hex[:40].ljust(40, "0"),
            "expires_at": exp,
            "boot": userdata.render_for,
        },
    }


def new_run_id() -> str:
    return f"manual__2026-11-29T21:00:00.{uuid.uuid4().hex[:6]}+00:00"


def described(**over):
    """A static target with no catalog instance: its hardware as the owner describes it."""
    raw = load_plan("local-demo").model_dump(mode="json")
    t = without_deployment(copy.deepcopy(raw["targets"][0]))
    for k in ("instance_type", "emulator"):
        t.pop(k)
    t.update(
        provider="static",
        provider_options={"base_url": "http://10.0.0.5:8000"},
        served_model="my-llama",
        hardware={"gpu": "RTX 6000 Ada", "gpus": 8, "description": "on-prem rack 3"},
        price={"usd_per_hour": 12.0, "market": "contract"},
    )
    t.update(over)
    raw["targets"] = [{k: v for k, v in t.items() if v is not None}]
    return plan_from_dict(raw)
