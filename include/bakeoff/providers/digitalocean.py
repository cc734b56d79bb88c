"""DigitalOcean GPU Droplets (MI300X / MI355X sizes) over /v2/droplets; the AMD Developer Cloud
speaks the same API at another base URL (set it as the connection's host).

Droplet tags allow only letters, digits, ':', '-' and '_', hence the base32 tag encoding shared
with Vultr.

Two firewalls guard a droplet: the boot script's, on the host, and a DigitalOcean cloud firewall
per run and target. The cloud firewall is made before the droplet and applies to a tag the droplet
is created with, so the droplet is never open, not even while it boots: inbound, only TCP from
ingress_cidr to the serving port, the node agent's port and, when SSH keys are installed, 22;
outbound stays open (images, weights) as ports "1-65535". It is named ``<run tag>.<target slug>``, so teardown, the
sweep and the reaper find it with no stored state: it goes with its droplet (terminate), with a
create that left no droplet, and in ``cleanup`` once no live droplet stands behind it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from bakeoff.core.instance import Instance
from bakeoff.core.launch import AGENT_PORT
from bakeoff.providers.base import ProviderError
from bakeoff.providers.preflight_checks import BOOT_UNTRIED, FAIL, OK, Check, image_provides
from bakeoff.providers.rest import RestProvider, _epoch, api_error, rest_options
from bakeoff.providers.rest_preflight import Listing, RestPreflight
from bakeoff.providers.tags import LABELS, PREFIX, TAG_RUN, TAG_TARGET

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)

# DigitalOcean's AMD GPU droplet base image (ROCm + Docker preinstalled); override with provider_options.os_image.
DEFAULT_IMAGE = "gpu-amd-base"
FIREWALLS = "firewalls"
# create makes a firewall moments before its droplet: an empty one younger than this may be about to be used
ORPHAN_GRACE_S = 900.0
_ANYWHERE = {"addresses": ["0.0.0.0/0", "::/0"]}
# firewall_rule.yml: ports (required) is a port, a range or "0"; the API refuses "all" (and some
# accounts "0" for TCP/UDP), so the full range, the form every source accepts; ICMP has no ports and
# the API itself answers "0" for them
OUTBOUND_RULES = [
    {"protocol": "tcp", "ports": "1-65535", "destinations": _ANYWHERE},
    {"protocol": "udp", "ports": "1-65535", "destinations": _ANYWHERE},
    {"protocol": "icmp", "ports": "0", "destinations": _ANYWHERE},
]


def firewall_name(run_id: str, slug: str) -> str:
    """``<run tag>.<slug>``: firewall names allow letters, digits, '.' and '-', and the run tag finds it later."""
    return f"{LABELS.run(run_id)}.{slug}"


def firewall_owner(name: str) -> tuple[str, str] | None:
    """(run label, target slug) of a bakeoff firewall's name (``LABELS.run`` of its run); None for
    any other firewall."""
    tag, sep, slug = name.partition(".")
    return (tag, slug) if sep and slug and LABELS.is_run(tag) else None


def firewall_tag(run_id: str, slug: str) -> str:
    """The droplet tag a run+target's firewall applies to; hashed, as tags are capped at 255 characters."""
    return f"{PREFIX}-fw-{hashlib.sha256(f'{run_id}|{slug}'.encode()).hexdigest()[:24]}"


def inbound_rules(target: Target) -> list[dict[str, Any]]:
    """TCP from ingress_cidr to the serving and agent ports, and to SSH only when keys are installed."""
    opts = rest_options(target)
    ports = [target.stack_spec.port, AGENT_PORT] + ([22] if opts.ssh_key_ids else [])
    return [
        {"protocol": "tcp", "ports": str(p), "sources": {"addresses": [opts.ingress_cidr]}}
        for p in dict.fromkeys(ports)
    ]


def firewall_error(method: str, path: str, r: httpx.Response, target: Target | None = None) -> ProviderError:
    """The API's answer plus what to change: the token's scopes, the plan's CIDR, or the account's limit."""
    err = api_error("digitalocean", method, path, r)
    if r.status_code in (401, 403):
        fix = "give the token the firewall (create, read, delete) and tag:create scopes, or use a full-access token"
    elif "limit" in str(err).lower():
        fix = (
            "delete unused cloud firewalls (python -m bakeoff reap removes bakeoff's orphans) "
            "or raise the account limit"
        )
    elif r.status_code in (400, 422) and target is not None:
        fix = f"check targets.{target.name}.provider_options.ingress_cidr (a CIDR such as 203.0.113.7/32)"
    else:
        fix = "the cloud firewall API refused the request; no droplet is started without its firewall"
    return ProviderError(f"{err}; {fix}")


class DigitalOceanProvider(RestProvider):
    name = "digitalocean"
    collection, one_key, many_key, tag_param = "droplets", "droplet", "droplets", "tag_name"

    def default_regions(self, target: Target) -> list[str]:
        return list(target.instance.regions) or ["atl1", "nyc2", "tor1"]

    def listings(self, tag: str) -> dict[str, dict[str, Any]]:
        """droplets_list.yml: the default listing holds only non-GPU droplets, ``type=gpus`` only GPU
        ones, and ``tag_name`` cannot be combined with ``type``: both queries, the GPU one filtered by tag."""
        return {"droplets": {"tag_name": tag}, "GPU droplets": {"type": "gpus"}}

    def create_body(self, target: Target, region: str, tags: list[str], script: str) -> dict[str, Any]:
        owner, opts = LABELS.decode(tags), rest_options(target)
        run = LABELS.run(owner[TAG_RUN])
        name = f"bakeoff-{target.slug}-{hashlib.sha256(run.encode()).hexdigest()[:8]}"
        return {
            "name": name[:255],
            "region": region,
            "size": target.instance_type,
            "image": opts.os_image or DEFAULT_IMAGE,
            "user_data": script,
            "tags": [*tags, firewall_tag(owner[TAG_RUN], owner[TAG_TARGET])],  # behind its firewall from boot
            "ssh_keys": list(opts.ssh_key_ids),
            "ipv6": False,
            "monitoring": False,
            "backups": False,
        }

    def parse(self, raw: dict[str, Any]) -> tuple[str, str | None, str]:
        nets = (raw.get("networks") or {}).get("v4") or []
        ip = next((n.get("ip_address") for n in nets if n.get("type") == "public"), None)
        status = raw.get("status")
        # a powered-off droplet still bills, and so may a status this code does not know ("archive", a new
        # one): "failed", so the sweep and the reaper still delete it; a deleted droplet is a 404, not a status
        state = {"new": "pending", "active": "running"}.get(status or "", "failed")
        region = raw.get("region")
        return state, ip, region.get("slug", "") if isinstance(region, dict) else (region or "")

    # the lifecycle's hooks with the cloud firewall ------------------------------------------------
    # Firewall first (prepare), then the droplet behind it, then the firewall checked again (secured: a
    # reaper pass may have removed an old empty one in between); a create that leaves no droplet takes
    # its firewall with it (abandon). The launch itself needs nothing of it (the droplet's tag applies it).
    def prepare(self, target: Target, run_id: str, tags: dict[str, str]) -> None:
        self.ensure_firewall(target, run_id)

    def secured(self, target: Target, run_id: str, inst: Instance) -> None:
        self.ensure_firewall(target, run_id)

    def abandon(self, target: Target, run_id: str, context: None) -> None:
        self._drop_unused_firewall(run_id, target.slug)

    def terminate(self, instance_id: str) -> bool:
        """Delete the droplet, then its firewall unless another live droplet of the target stands behind it."""
        owner = self._owner(instance_id)
        done = super().terminate(instance_id)
        if owner:
            self._drop_unused_firewall(*owner, gone=instance_id)
        return done

    def cleanup(self, select: Callable[[dict[str, str]], bool] | None = None) -> list[str]:
        """Delete bakeoff firewalls with no live droplet behind them whose run ``select`` picks from
        {run_id, target} (the sweep: its own run), or that have stood empty ORPHAN_GRACE_S (the reaper:
        a lost terminate, a killed create). Returns the deleted firewalls' ids.

        Only a complete listing of every droplet kind decides: list_tagged raises (PartialListing)
        when one query failed, and nothing is deleted; a firewall whose tag any live droplet carries,
        or that names a droplet directly, is kept."""
        nodes = self.list_tagged(None)
        live = {(LABELS.run(i.run_id), i.target) for i in nodes}
        live_tags = {firewall_tag(i.run_id, i.target) for i in nodes}
        deleted = []
        for fw in self.firewalls():
            run, slug = firewall_owner(fw["name"]) or ("", "")  # firewalls() lists only bakeoff's
            if (run, slug) in live or fw.get("droplet_ids") or live_tags & set(fw.get("tags") or []):
                continue
            # a run id too long to spell in the name (its digest there) is unknown here: its age decides
            run_id = LABELS.decode([run]).get(TAG_RUN, "")
            if (select and run_id and select({TAG_RUN: run_id, TAG_TARGET: slug})) or _stale(fw):
                if self._delete_firewall(fw["id"]):
                    deleted.append(fw["id"])
        return deleted

    # firewall calls ----------------------------------------------------------------------
    def firewalls(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Bakeoff's cloud firewalls on the account (one run's, or every run's)."""
        try:
            every = list(self.api.pages(FIREWALLS, FIREWALLS, {"per_page": self.page_size}))
        except ProviderError as e:
            raise ProviderError(f"{e} (listing cloud firewalls: a scoped token needs firewall:read)") from None
        return [
            fw
            for fw in every
            if (owner := firewall_owner(fw.get("name", ""))) and (run_id is None or owner[0] == LABELS.run(run_id))
        ]

    def ensure_firewall(self, target: Target, run_id: str) -> dict[str, Any]:
        """The run+target's firewall, made once: a retried task, or a create whose answer was lost, finds it
        by name instead of making a second one."""
        name, tag = firewall_name(run_id, target.slug), firewall_tag(run_id, target.slug)
        body = {"name": name, "inbound_rules": inbound_rules(target), "outbound_rules": OUTBOUND_RULES, "tags": [tag]}

        def lookup() -> dict[str, Any] | None:
            return next((fw for fw in self.firewalls(run_id) if fw["name"] == name), None)

        found = lookup()
        if found:
            return found
        self._ensure_tag(tag)
        try:
            answer = self.api.create(FIREWALLS, body, find=lookup, what=f"creating cloud firewall {name}")
        except ProviderError as e:
            raise ProviderError(f"{e}; no droplet was started") from None
        if isinstance(answer, dict):
            return answer
        if answer.status_code not in (200, 201, 202):
            raise firewall_error("POST", FIREWALLS, answer, target)
        log.info(
            "digitalocean: cloud firewall %s for %s allows %s", name, target.slug, rest_options(target).ingress_cidr
        )
        firewall: dict[str, Any] = answer.json()["firewall"]
        return firewall

    def _ensure_tag(self, tag: str) -> None:
        """A firewall may only name existing tags; creating one that exists already is harmless."""
        r = self.api.request("POST", "tags", json={"name": tag})
        if r.status_code not in (200, 201, 204) and self.api.request("GET", f"tags/{tag}").status_code != 200:
            raise firewall_error("POST", "tags", r)

    def _delete_firewall(self, firewall_id: str) -> bool:
        r = self.api.request("DELETE", f"{FIREWALLS}/{firewall_id}")
        if r.status_code == 404:
            return False
        if r.status_code not in (200, 202, 204):
            raise firewall_error("DELETE", f"{FIREWALLS}/{firewall_id}", r)
        log.info("digitalocean: deleted cloud firewall %s", firewall_id)
        return True

    def _owner(self, instance_id: str) -> tuple[str, str] | None:
        """(run_id, target slug) from the droplet's tags, read while it still exists; None if unknown,
        so a failed look-up never stops the droplet being deleted."""
        try:
            r = self.api.request("GET", f"{self.collection}/{instance_id}")
        except ProviderError:
            return None
        tags = LABELS.decode(r.json()[self.one_key].get("tags")) if r.status_code == 200 else {}
        return (tags[TAG_RUN], tags[TAG_TARGET]) if TAG_RUN in tags and TAG_TARGET in tags else None

    def _drop_unused_firewall(self, run_id: str, slug: str, gone: str | None = None) -> list[str]:
        """Delete the run+target's firewall once no live droplet other than ``gone`` stands behind it.
        Failures are logged, not raised: the droplet is what bills, and the sweep and the reaper retry."""
        try:
            if any(i.target == slug and i.id != gone for i in self.list_tagged(run_id)):
                return []
            name = firewall_name(run_id, slug)
            mine = [fw["id"] for fw in self.firewalls(run_id) if fw["name"] == name]
            return [fid for fid in mine if self._delete_firewall(fid)]
        except ProviderError as e:
            log.warning(
                "digitalocean: cloud firewall of %s (run %s) left for the sweep or the reaper: %s", slug, run_id, e
            )
            return []


def _stale(fw: dict[str, Any]) -> bool:
    created = _epoch(fw.get("created_at"))
    return created is not None and time.time() - created >= ORPHAN_GRACE_S


def _quota(t: Target, p: RestProvider) -> Check:
    limit = ((p.api.json("GET", "account") or {}).get("account") or {}).get("droplet_limit")
    if limit is not None and int(limit) < 1:
        return Check(t.name, "quota", FAIL, f"droplet limit {limit}", "ask DigitalOcean to raise the droplet limit")
    return Check(
        t.name, "quota", OK, f"droplet limit {limit}; GPU droplet access is granted per account, not readable here"
    )


def _image(t: Target, i: int, p: RestProvider) -> Iterator[Check]:
    image = rest_options(t).os_image or DEFAULT_IMAGE
    r = p.api.request("GET", f"images/{image}")
    if r.status_code == 200:
        listed = str((r.json().get("image") or {}).get("name", ""))
        yield Check(t.name, "image", OK, f"{image} ({listed})")
        yield image_provides(t, i, listed)
    else:
        yield Check(t.name, "image", FAIL, f"image {image}: {r.status_code}", f"targets[{i}].provider_options.os_image")


# The pre-flight's checks of a target here (registry ``preflight``): reads only; a region or size the
# listing marks unavailable counts as not listed.
preflight = RestPreflight(
    cloud="DigitalOcean",
    regions=Listing("regions", "regions", "slug", 200, counts=lambda x: bool(x.get("available"))),
    offers=Listing("sizes", "sizes", "slug", 200, counts=lambda x: bool(x.get("available", True))),
    offer_word="available size",
    sold_in="regions",
    ssh_keys="account/keys",
    quota=_quota,
    image=_image,
    untried=(
        "the create itself (DigitalOcean has no dry run): its user-data, tags and cloud firewall",
        "GPU droplet access (granted per account, not readable) and stock at the moment of launch",
        BOOT_UNTRIED,
    ),
)
