"""Vultr bare metal: AMD MI355X / MI300X nodes over the v2 REST API (/v2/bare-metals).

The boot script firewalls the serving port on the host to the plan's CIDR (whether or not a Vultr
firewall group is attached). Nodes carry the run's tags; the boot script's shutdown timer is the
cloud-side kill switch (a powered-off bare-metal node still bills, so the sweep and the reaper
delete it as well).
"""

from __future__ import annotations

import base64
from typing import Any

from bakeoff.providers.rest import RestProvider

# Ubuntu 24.04 LTS x64; a plan should name a ROCm-ready image (provider_options.os_image) where Vultr offers one.
DEFAULT_OS_ID = 2284


class VultrProvider(RestProvider):
    name = "vultr"
    collection, one_key, many_key, tag_param = "bare-metals", "bare_metal", "bare_metals", "tag"

    def default_regions(self, target) -> list[str]:
        return list(target.instance.regions) or ["ewr"]

    def create_body(self, target, region: str, tags: list[str], script: str) -> dict[str, Any]:
        os_image = target.provider_options.os_image
        body: dict[str, Any] = {
            "region": region,
            "plan": target.instance_type,
            "label": f"bakeoff-{target.slug}"[:64],
            "hostname": f"bakeoff-{target.slug}"[:63],
            "tags": tags,
            "enable_ipv6": False,
            "activation_email": False,
            "user_data": base64.b64encode(script.encode()).decode(),
            "sshkey_id": list(target.provider_options.ssh_key_ids),
        }
        if isinstance(os_image, str):
            body["image_id"] = os_image
        else:
            body["os_id"] = os_image or DEFAULT_OS_ID
        return body

    def parse(self, raw: dict[str, Any]) -> tuple[str, str | None, str]:
        status = raw.get("status")
        ip = raw.get("main_ip") if raw.get("main_ip") not in (None, "", "0.0.0.0") else None
        power = raw.get("power_status", "running")
        if status == "pending":
            state = "pending"
        elif status == "active":  # a stopped bare-metal node still bills: "failed", so it is still deleted
            state = "running" if power == "running" else "failed"
        else:
            state = "failed"
        return state, ip, raw.get("region", "")
