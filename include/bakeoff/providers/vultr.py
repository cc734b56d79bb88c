"""Vultr bare metal: AMD MI355X / MI300X nodes over the v2 REST API (/v2/bare-metals).

The boot script firewalls the serving port on the host to the plan's CIDR (whether or not a Vultr
firewall group is attached). Nodes carry the run's tags; the listing takes only ``per_page`` and
``cursor`` (Vultr's OpenAPI), so the tag filter runs here, over every page.

The boot script's shutdown timer is the node-side kill switch, but a halted bare-metal node still
bills and the API cannot show it halted: the bare-metal object has no power field, and its
``status`` (active, pending, suspended) stays ``active``. So nothing can delete a Vultr node *because*
it stopped; its expiry tag is set to the kill-switch time instead (``halt_visible=False`` in the
registry, see ``pipeline.provision``), and the independent reaper deletes it when that passes.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from bakeoff.providers.rest import RestProvider, rest_options

if TYPE_CHECKING:  # the plan's model, for the annotations only (the plan imports the provider registry)
    from bakeoff.plan.target import Target

# Ubuntu 24.04 LTS x64; a plan should name a ROCm-ready image (provider_options.os_image) where Vultr offers one.
DEFAULT_OS_ID = 2284


class VultrProvider(RestProvider):
    name = "vultr"
    collection, one_key, many_key, tag_param = "bare-metals", "bare_metal", "bare_metals", ""
    page_size = 500  # the listing's maximum

    def listings(self, tag: str) -> dict[str, dict[str, Any]]:
        return {self.collection: {}}  # no filter parameter: every node, filtered by tag in list_tagged

    def default_regions(self, target: Target) -> list[str]:
        return list(target.instance.regions) or ["ewr"]

    def create_body(self, target: Target, region: str, tags: list[str], script: str) -> dict[str, Any]:
        opts = rest_options(target)
        os_image = opts.os_image
        body: dict[str, Any] = {
            "region": region,
            "plan": target.instance_type,
            "label": f"bakeoff-{target.slug}"[:64],
            "hostname": f"bakeoff-{target.slug}"[:63],
            "tags": tags,
            "enable_ipv6": False,
            "activation_email": False,
            "user_data": base64.b64encode(script.encode()).decode(),
            "sshkey_id": list(opts.ssh_key_ids),
        }
        if isinstance(os_image, str):
            body["image_id"] = os_image
        else:
            body["os_id"] = os_image or DEFAULT_OS_ID
        return body

    def parse(self, raw: dict[str, Any]) -> tuple[str, str | None, str]:
        status = raw.get("status")
        ip = raw.get("main_ip") if raw.get("main_ip") not in (None, "", "0.0.0.0") else None
        # active is all the API says of a running or a halted node (no power field); suspended still bills
        state = {"pending": "pending", "active": "running"}.get(status or "", "failed")
        return state, ip, raw.get("region", "")
