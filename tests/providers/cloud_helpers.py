"""Targets and launch arguments for the cloud provider tests."""

from __future__ import annotations

import copy
import time
import uuid

from bakeoff import secrets
from bakeoff.plan import load_plan, plan_from_dict


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
            "bakeoff:installation": secrets.installation_id(),  # as pipeline.provision tags it
        },
        "spec": {"api_key": "bk-" + uuid.uuid4().hex[:40].ljust(40, "0"), "expires_at": exp},
    }


def new_run_id() -> str:
    return f"manual__2026-11-29T21:00:00.{uuid.uuid4().hex[:6]}+00:00"
