"""Vultr bare metal: AMD MI355X / MI300X nodes over the v2 REST API (/v2/bare-metals).

The boot script firewalls the serving port on the host to the plan's CIDR (whether or not a Vultr
firewall group is attached). Nodes carry the run's tags; the listing takes only ``per_page`` and
``cursor`` (Vultr's OpenAPI), so the tag filter runs here, over every page.

The boot script's shutdown timer is the node-side kill switch, but a halted bare-metal node still
bills and the API cannot show it halted: the bare-metal object has no power field, and its
``status`` (active, pending, suspended) stays ``active``. So nothing can delete a Vultr node *because*
it stopped; its expiry tag is set to the kill-switch time instead (``halt_visible=False`` in the
registry, see ``provisioning.provision``), and the independent reaper deletes it when that passes.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from bakeoff.providers.preflight_checks import BOOT_UNTRIED, FAIL, NA, OK, WARN, Check, image_provides
from bakeoff.providers.rest import RestProvider, rest_options
from bakeoff.providers.rest_preflight import Listing, RestPreflight

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
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


def _quota(t: Target, p: RestProvider) -> Check:
    return Check(t.name, "quota", NA, "Vultr's API has no quota call; a refusal comes at create")


def _image(t: Target, i: int, p: RestProvider) -> Iterator[Check]:
    os_image = rest_options(t).os_image or DEFAULT_OS_ID
    if isinstance(os_image, str):
        yield Check(t.name, "image", WARN, f"image_id {os_image}: not checked (Marketplace images have no read)")
        return
    oses = {o["id"]: o for o in p.api.pages("os", "os", {"per_page": 500})}
    if os_image in oses:
        yield Check(t.name, "image", OK, f"os_id {os_image} ({oses[os_image].get('name')})")
        yield image_provides(t, i, str(oses[os_image].get("name", "")))
    else:
        yield Check(t.name, "image", FAIL, f"os_id {os_image} not offered", f"targets[{i}].provider_options.os_image")


# The pre-flight's checks of a target here (registry ``preflight``): reads only; every list takes 500 a page.
preflight = RestPreflight(
    cloud="Vultr",
    regions=Listing("regions", "regions", "id", 500),
    offers=Listing("plans-metal", "plans_metal", "id", 500),
    offer_word="bare-metal plan",
    sold_in="locations",
    ssh_keys="ssh-keys",
    quota=_quota,
    image=_image,
    untried=(
        "the create itself (Vultr has no dry run): its user-data and tags",
        "the account's bare-metal allowance (no quota call) and stock at the moment of launch",
        BOOT_UNTRIED,
    ),
)
