"""DigitalOcean GPU Droplets (MI300X / MI355X sizes) over /v2/droplets; the AMD Developer Cloud
speaks the same API at another base URL (set it as the connection's host).

Droplet tags allow only letters, digits, ':', '-' and '_', hence the base32 tag encoding shared
with Vultr. The boot script firewalls the serving port to the plan's CIDR on the host.
"""
from __future__ import annotations

import hashlib
from typing import Any

from bakeoff.providers.rest import RestProvider

# DigitalOcean's AMD GPU droplet base image (ROCm + Docker preinstalled); override with provider_options.os_image.
DEFAULT_IMAGE = "gpu-amd-base"


class DigitalOceanProvider(RestProvider):
    name = "digitalocean"
    default_base = "https://api.digitalocean.com/v2"
    collection, one_key, many_key, tag_param = "droplets", "droplet", "droplets", "tag_name"

    def default_regions(self, target) -> list[str]:
        return list(target.instance.regions) or ["atl1", "nyc2", "tor1"]

    def create_body(self, target, region: str, tags: list[str], script: str) -> dict[str, Any]:
        run = next((t for t in tags if t.startswith("bakeoff-run-")), "")
        name = f"bakeoff-{target.slug}-{hashlib.sha256(run.encode()).hexdigest()[:8]}"
        return {"name": name[:255], "region": region, "size": target.instance_type,
                "image": target.provider_options.os_image or DEFAULT_IMAGE, "tags": tags, "user_data": script,
                "ssh_keys": list(target.provider_options.ssh_key_ids), "ipv6": False, "monitoring": False,
                "backups": False}

    def parse(self, raw: dict[str, Any]) -> tuple[str, str | None, str]:
        nets = (raw.get("networks") or {}).get("v4") or []
        ip = next((n.get("ip_address") for n in nets if n.get("type") == "public"), None)
        status = raw.get("status")
        # a powered-off droplet still bills: "failed", so the sweep and the reaper still delete it
        state = {"new": "pending", "active": "running", "off": "failed"}.get(status, "terminated")
        region = raw.get("region")
        return state, ip, region.get("slug", "") if isinstance(region, dict) else (region or "")
