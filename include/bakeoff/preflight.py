"""`bakeoff preflight PLAN`: would this plan's launches work on these accounts? Asked with reads only.

A first real run fails in the most expensive way: after other targets have booted and billed. So
before any spend, per target and with the plan's own connections, this asks each cloud what a
create would need: credentials that authenticate; the region or availability domain and the
instance type offered there (EC2 instance-type offerings, DigitalOcean ``/v2/sizes``, Vultr
``/v2/plans-metal`` locations, OCI shapes and a compute capacity report); quota or limit headroom
for one node (EC2 Service Quotas, OCI service limits); the image; EC2's ``RunInstances`` with
``DryRun=True``; and the price in force and its age. Every call is a read, a dry run or a report
(OCI's capacity report creates no resource): nothing here can start a node or bill.

Each check is a row (target, check, result, fix); a row ``FAIL`` would stop the run, ``warn`` is
for a person to read, ``n/a`` is a check the cloud offers no call for.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bakeoff import catalog
from bakeoff.plan import Plan, apply_overrides, load_plan
from bakeoff.plan.prices import apply_price_sheet
from bakeoff.providers import PROVIDERS, ProviderError, get_provider
from bakeoff.providers.base import Placement
from bakeoff.providers.credentials import credentials_from_env

log = logging.getLogger(__name__)

OK, FAIL, WARN, NA = "ok", "FAIL", "warn", "n/a"
PRICE_STALE_DAYS = 180  # a catalog price older than this is worth re-reading before a procurement run
# EC2 vCPU quota codes per instance family (Service Quotas "Running On-Demand <family> instances")
EC2_QUOTAS = {"p": "L-417A185B"}


@dataclass(frozen=True)
class Check:
    target: str
    check: str
    result: str  # ok | FAIL | warn | n/a
    detail: str
    fix: str = ""


def preflight(plan: Plan, credentials: Callable[[str], dict[str, Any]] = credentials_from_env) -> list[Check]:
    """Every check for every target of the plan, in plan order."""
    rows: list[Check] = []
    for i, t in enumerate(plan.targets):
        if not PROVIDERS[t.provider].provisions:
            rows.append(Check(t.name, "launch", NA, f"{t.provider}: nothing to launch"))
            continue
        check = _CLOUDS[t.provider]
        try:
            provider = get_provider(t.provider, credentials=credentials(t.provider))
            rows += _offers(t, [list(check(o, i, provider)) for o in _each_offer(t)])
        except ProviderError as e:  # a connection that cannot even be built
            rows.append(Check(t.name, "credentials", FAIL, str(e), f"fix the {t.provider} connection"))
        rows.append(_price(t))
    return rows


def _each_offer(t: Any) -> list[Any]:
    """The target on each of its offers (``instance_types``), or the target itself."""
    return [t.ran_as(x) for x in t.offers] if len(t.offers) > 1 else [t]


def _offers(t: Any, per_offer: list[list[Check]]) -> list[Check]:
    """Every offer's rows; a target with fallback offers is stopped only when no offer passes, so
    an offer's FAIL reads as a warning while another offer passes every check."""
    if len(per_offer) == 1:
        return per_offer[0]
    passing = [o for o, checks in zip(t.offers, per_offer, strict=True) if all(c.result != FAIL for c in checks)]
    out = []
    for offer, checks in zip(t.offers, per_offer, strict=True):
        for c in checks:
            if c.result == FAIL and passing:
                c = Check(c.target, c.check, WARN, f"{c.detail} (fallback: {passing[0]} passes)", c.fix)
            out.append(Check(f"{c.target} [{offer}]", c.check, c.result, c.detail, c.fix))
    return out


def blocking(rows: list[Check]) -> list[Check]:
    return [r for r in rows if r.result == FAIL]


MODES = ("off", "check first", "pre-flight only")


class PreflightFailed(ProviderError):
    """A check would stop the run: raised before anything is launched."""


def gate(
    plan_ref: str,
    mode: str,
    overrides: dict[str, Any] | None = None,
    price_sheet: dict[str, Any] | None = None,
    credentials: Callable[[str], dict[str, Any]] = credentials_from_env,
) -> bool:
    """The DAG's optional first step: the plan as the run would resolve it, checked unless ``mode`` is
    off. Raises PreflightFailed (with the table) if a check would stop the run; returns whether the run
    goes on (False for "pre-flight only")."""
    if mode not in MODES:
        raise ValueError(f"params.preflight: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "off":
        return True
    plan = apply_overrides(apply_price_sheet(load_plan(plan_ref), price_sheet), overrides)
    rows = preflight(plan, credentials)
    log.info("pre-flight of %s:\n%s", plan.name, table(rows))
    bad = blocking(rows)
    if bad:
        raise PreflightFailed(
            f"pre-flight: {len(bad)} check(s) would stop the run, nothing was launched: "
            + "; ".join(f"{r.target} {r.check}: {r.detail}" + (f" (fix: {r.fix})" if r.fix else "") for r in bad)
        )
    return mode != "pre-flight only"


def table(rows: list[Check]) -> str:
    """The rows as one plain-text table (target, check, result, fix)."""
    head = ("target", "check", "result", "fix")
    body = [(r.target, r.check, f"{r.result}: {r.detail}" if r.detail else r.result, r.fix) for r in rows]
    widths = [min(60, max(len(x[c]) for x in [head, *body])) for c in range(3)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in [head, *body]
    ]
    return "\n".join(line.rstrip() for line in lines)


# --- price ----------------------------------------------------------------------------------------


def _price(t: Any, today: dt.date | None = None) -> Check:
    if t.price:
        return Check(t.name, "price", OK, f"{t.usd_per_hour:.2f} USD/h from the plan ({t.price_source})")
    it = t.instance
    when = _date(it.as_of)
    if when is None:
        return Check(
            t.name,
            "price",
            WARN,
            f"{it.usd_per_hour} USD/h, {it.source}, undated",
            f"targets.{t.name}.price: give the price you pay (contract or list, with its date)",
        )
    age = ((today or dt.date.today()) - when).days
    if age > PRICE_STALE_DAYS:
        return Check(
            t.name,
            "price",
            WARN,
            f"{it.usd_per_hour} USD/h, {it.source}, {age} days old",
            f"targets.{t.name}.price: re-read the price ({it.source} as of {it.as_of})",
        )
    return Check(t.name, "price", OK, f"{it.usd_per_hour} USD/h, {it.source}, {age} days old")


def _date(text: str) -> dt.date | None:
    for fmt in ("%Y-%m-%d", "%Y-%m"):
        try:
            return dt.datetime.strptime(text or "", fmt).date()
        except ValueError:
            continue
    return None


# What a cloud's launch does that its pre-flight cannot try with reads and dry runs (also in
# docs/production.md): shown as the target's last row, so a person knows what a real launch may
# still refuse.
UNTRIED = {
    "aws": [
        "capacity at the moment of launch (a dry run checks permissions and parameters, not stock)",
        "the boot script running on the image",
    ],
    "oci": [
        "the launch itself (OCI has no dry run): its metadata and user-data, the tags and the network "
        "security group made with it",
        "capacity at the moment of launch (the capacity report is a snapshot)",
        "the boot script running on the image",
    ],
    "vultr": [
        "the create itself (Vultr has no dry run): its user-data and tags",
        "the account's bare-metal allowance (no quota call) and stock at the moment of launch",
        "the boot script running on the image",
    ],
    "digitalocean": [
        "the create itself (DigitalOcean has no dry run): its user-data, tags and cloud firewall",
        "GPU droplet access (granted per account, not readable) and stock at the moment of launch",
        "the boot script running on the image",
    ],
}
AWS_STAND_IN_GROUP = (
    "the run's own security group (its CreateSecurityGroup was dry-run; the VPC's default group stood in "
    "for it in RunInstances)"
)
# what the dry run's RunInstances carries, as the launch's (providers/aws/instance.py: _run_request)
_AWS_SENT = {
    "RunInstances": "tags, root volume, security groups, market options, user-data",
    "CreateSecurityGroup": "the run's group in its VPC, tagged",
}


def _image_provides(t: Any, i: int, listed: str) -> Check:
    """What the default node image is recorded to provide (catalog ``node_images``), held to the name
    the cloud's listing gives the image: a GPU driver it is recorded without stops the boot (FAIL where
    the record has a source, else a warning); the boot script checks every item on the node anyway."""
    row = catalog.node_images().get(t.provider)
    image = catalog.default_images().get(t.provider)
    fields = [image.field] if image else []
    fields += ["ami", "image_ocid"]
    if row is None or any(t.provider_options.get(f) for f in fields):
        return Check(t.name, "image provides", NA, "the plan's own image: the boot script checks it on the node")
    if not re.search(row.listing, listed):
        return Check(
            t.name,
            "image provides",
            WARN,
            f"the listing names it {listed!r}; what it provides was recorded for {row.image}",
            "the boot script checks Docker and the GPU driver on the node",
        )
    vendor = catalog.gpus()[t.instance.gpu].vendor
    lacks = row.lacks(vendor)
    missing = [w for w, have in (("Docker", row.docker), ("the GPU driver", row.gpu_driver)) if have is None]
    detail = f"{listed} ({row.ref.label()})"
    fix = f"targets[{i}].provider_options.{row.instead}"
    if lacks:
        detail += f": has no {' and no '.join(lacks)}, so the boot would stop"
        return Check(t.name, "image provides", FAIL if row.ref.verified else WARN, detail, fix)
    if missing or not row.docker or not row.ref.verified:
        notes = [f"may lack {', '.join(missing)}"] if missing else []
        notes += ["Docker is installed at boot"] if row.docker is False else []
        return Check(t.name, "image provides", WARN, f"{detail}: {'; '.join(notes) or 'unverified'}", fix)
    return Check(t.name, "image provides", OK, detail)


def _untried(t: Any, parts: list[str]) -> Check:
    return Check(t.name, "not tried", NA, "; ".join(parts))


# --- EC2 ------------------------------------------------------------------------------------------


def _aws(t: Any, i: int, p: Any) -> Iterator[Check]:
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - botocore only for EC2 targets

    def err(e: Exception) -> str:
        if isinstance(e, ClientError):
            return f"{e.response['Error']['Code']}: {e.response['Error'].get('Message', '')}"
        return f"{type(e).__name__}: {e}"

    name = t.name
    placements = [(pl.region, pl.zone) for pl in p.placements(t)]
    home = p.default_region  # the connection's own region answers for the account
    try:
        who = p._client("sts", home).get_caller_identity()
        yield Check(name, "credentials", OK, f"account {who['Account']}")
    except (ClientError, BotoCoreError) as e:
        yield Check(name, "credentials", FAIL, err(e), "fix the aws_default connection's keys or role")
        return
    try:
        known = {r["RegionName"] for r in p._client("ec2", home).describe_regions()["Regions"]}
    except (ClientError, BotoCoreError) as e:
        known = set()
        yield Check(name, "region", WARN, f"describe_regions: {err(e)}")
    regions = list(dict.fromkeys(r for r, _ in placements))
    missing = [r for r in regions if known and r not in known]
    if missing:
        yield Check(
            name,
            "region",
            FAIL,
            f"{', '.join(missing)} not enabled for the account",
            f"targets[{i}].provider_options.regions: use one of {', '.join(sorted(known))}",
        )
    offered = []
    for region, zone in placements:
        if region in missing:
            continue
        kw: dict[str, Any] = {
            "LocationType": "availability-zone" if zone else "region",
            "Filters": [{"Name": "instance-type", "Values": [t.instance_type]}],
        }
        try:
            found = p._client("ec2", region).describe_instance_type_offerings(**kw)["InstanceTypeOfferings"]
        except (ClientError, BotoCoreError) as e:
            yield Check(name, "offered", WARN, f"{zone or region}: {err(e)}")
            continue
        if any(o["Location"] == (zone or region) for o in found):
            offered.append((region, zone))
    if not offered:
        yield Check(
            name,
            "offered",
            FAIL,
            f"{t.instance_type} is not offered in {', '.join(z or r for r, z in placements)}",
            f"targets[{i}].provider_options.regions/zones: list a place that offers {t.instance_type}",
        )
        return
    yield Check(name, "offered", OK, f"{t.instance_type} in {', '.join(z or r for r, z in offered)}")
    region, zone = offered[0]
    yield _aws_quota(t, p, region, err)
    try:
        ami = p._ami(t, region)
        images = p._client("ec2", region).describe_images(ImageIds=[ami])["Images"]
    except ProviderError as e:
        yield Check(name, "image", FAIL, str(e), f"targets[{i}].provider_options.ami: give an AMI id of {region}")
        return
    except (ClientError, BotoCoreError) as e:
        yield Check(name, "image", FAIL, err(e), f"targets[{i}].provider_options.ami: give an AMI of {region}")
        return
    if not images:
        yield Check(name, "image", FAIL, f"{ami} not found in {region}", f"targets[{i}].provider_options.ami")
        return
    yield Check(name, "image", OK, f"{ami} ({images[0].get('Name', '')}) in {region}")
    yield _image_provides(t, i, str(images[0].get("Name", "")))
    try:
        tried = p.preflight_dry_run(t, Placement(region, zone))
    except ProviderError as e:
        yield Check(name, "dry run", FAIL, str(e), f"targets[{i}].provider_options")
        return
    for call, code, message in tried:
        what = "dry run" if call == "RunInstances" else f"dry run {call}"
        if code == "DryRunOperation":
            yield Check(name, what, OK, f"{call} as the launch sends it ({_AWS_SENT[call]}) would succeed")
        else:
            yield Check(
                name,
                what,
                FAIL,
                f"{call}: {code}: {message}",
                "grant ec2:RunInstances, ec2:CreateTags and ec2:CreateSecurityGroup (and the subnet, "
                "capacity reservation and key pair the plan names) to the connection",
            )
    stood_in = any(call == "CreateSecurityGroup" for call, _, _ in tried)
    yield _untried(t, [*UNTRIED["aws"], *([AWS_STAND_IN_GROUP] if stood_in else [])])


def _aws_quota(t: Any, p: Any, region: str, err: Callable[[Exception], str]) -> Check:
    """The family's running On-Demand vCPU quota less what its pending and running instances hold."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - botocore only for EC2 targets

    family = t.instance_type[:1]
    code = EC2_QUOTAS.get(family)
    if code is None:
        return Check(t.name, "quota", NA, f"no vCPU quota code known for the {family} family")
    ec2 = p._client("ec2", region)
    try:
        quota = p._client("service-quotas", region).get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )
        held = [i["InstanceType"] for pg in pages for r in pg["Reservations"] for i in r["Instances"]]
        held = [x for x in held if x[:1] == family]
        kinds = sorted({*held, t.instance_type})
        vcpus = {
            x["InstanceType"]: x["VCpuInfo"]["DefaultVCpus"]
            for x in ec2.describe_instance_types(InstanceTypes=kinds)["InstanceTypes"]
        }
    except (ClientError, BotoCoreError) as e:
        return Check(t.name, "quota", WARN, f"{code} in {region}: {err(e)}", "grant servicequotas:GetServiceQuota")
    need, used = vcpus[t.instance_type], sum(vcpus.get(x, 0) for x in held)
    detail = f"{quota['QuotaName']} ({code}) {quota['Value']:g} vCPU, {used} in use, {need} needed in {region}"
    if float(quota["Value"]) - used < need:
        return Check(t.name, "quota", FAIL, detail, f"request a quota increase for {code} in {region}")
    return Check(t.name, "quota", OK, detail)


# --- OCI ------------------------------------------------------------------------------------------


def _oci(t: Any, i: int, p: Any) -> Iterator[Check]:
    import oci  # noqa: PLC0415 - the OCI SDK (slow to import) only for OCI targets

    def err(e: Exception) -> str:
        if isinstance(e, oci.exceptions.ServiceError):
            return f"{e.status} {e.code}: {e.message}"
        return f"{type(e).__name__}: {e}"

    name, opts = t.name, t.provider_options
    try:
        region = p.region_for(t)
    except ProviderError as e:
        yield Check(name, "region", FAIL, str(e), f"targets[{i}].provider_options.regions")
        return
    tenancy, compartment = p.config["tenancy"], opts.compartment_id or p.default_compartment
    try:
        ads = [a.name for a in p._client("identity", region).list_availability_domains(tenancy).data]
        yield Check(name, "credentials", OK, f"tenancy answers in {region}")
    except Exception as e:  # noqa: BLE001 - the SDK's errors vary (auth, endpoint, region)
        yield Check(name, "credentials", FAIL, err(e), "fix the oci_default connection (user, key, fingerprint)")
        return
    wanted = list(opts.availability_domains) or ads
    unknown = [a for a in wanted if a not in ads]
    if unknown:
        yield Check(
            name,
            "availability domain",
            FAIL,
            f"{', '.join(unknown)} not in {region}",
            f"targets[{i}].provider_options.availability_domains: use {', '.join(ads)}",
        )
    wanted = [a for a in wanted if a in ads]
    if opts.subnet_ocid:
        try:
            p._client("network", region).get_subnet(opts.subnet_ocid)
            yield Check(name, "subnet", OK, "found")
        except Exception as e:  # noqa: BLE001
            yield Check(name, "subnet", FAIL, err(e), f"targets[{i}].provider_options.subnet_ocid")
    compute = p._client("compute", region)
    offered = []
    for ad in wanted:
        shapes = oci.pagination.list_call_get_all_results(compute.list_shapes, compartment, availability_domain=ad)
        if any(s.shape == t.instance_type for s in shapes.data):
            offered.append(ad)
    if not offered:
        yield Check(
            name,
            "offered",
            FAIL,
            f"{t.instance_type} not offered to the tenancy in {', '.join(wanted) or region}",
            f"targets[{i}].instance_type / provider_options.availability_domains",
        )
        return
    yield Check(name, "offered", OK, f"{t.instance_type} in {', '.join(offered)}")
    available = []
    for ad in offered:
        details = oci.core.models.CreateComputeCapacityReportDetails(
            compartment_id=tenancy,
            availability_domain=ad,
            shape_availabilities=[
                oci.core.models.CreateCapacityReportShapeAvailabilityDetails(instance_shape=t.instance_type)
            ],
        )
        report = compute.create_compute_capacity_report(details).data
        if any(s.availability_status == "AVAILABLE" for s in report.shape_availabilities):
            available.append(ad)
    if available:
        yield Check(name, "capacity", OK, f"hosts available in {', '.join(available)}")
    else:
        yield Check(
            name,
            "capacity",
            FAIL,
            f"out of host capacity for {t.instance_type} in {', '.join(offered)}",
            "add availability_domains, ask Oracle for a capacity reservation, or try later",
        )
    yield _oci_limits(t, p, region, tenancy, offered, err)
    try:
        if opts.image_ocid:
            image = compute.get_image(opts.image_ocid).data
            yield Check(name, "image", OK, f"{image.display_name}")
        else:
            p._image(t, compartment, region)
            platform = compute.get_image(p._image(t, compartment, region)).data
            yield Check(name, "image", OK, f"{platform.display_name}, a platform image listing {t.instance_type}")
            yield _image_provides(t, i, str(platform.display_name))
    except Exception as e:  # noqa: BLE001 - ProviderError or the SDK's
        yield Check(name, "image", FAIL, err(e), f"targets[{i}].provider_options.image_ocid")
    yield Check(name, "dry run", NA, "OCI has no dry-run launch; the checks above stand for it")
    yield _untried(t, UNTRIED["oci"])


def _oci_limits(t: Any, p: Any, region: str, tenancy: str, ads: list[str], err: Callable[[Exception], str]) -> Check:
    """The compute service limit whose definition names the shape, and its availability per domain."""
    import oci  # noqa: PLC0415 - the OCI SDK (slow to import) only for OCI targets

    limits = p._client("limits", region)
    try:
        defs = oci.pagination.list_call_get_all_results(
            limits.list_limit_definitions, tenancy, service_name="compute"
        ).data
        names = [d.name for d in defs if t.instance_type.lower() in (d.description or "").lower()]
        if not names:
            return Check(
                t.name,
                "limit",
                WARN,
                f"no compute limit definition names {t.instance_type}",
                "check the tenancy's limits",
            )
        free = {}
        for ad in ads:
            avail = limits.get_resource_availability("compute", names[0], tenancy, availability_domain=ad).data
            free[ad] = avail.available or 0
    except Exception as e:  # noqa: BLE001
        return Check(t.name, "limit", WARN, err(e), "grant the connection inspect on limits")
    detail = f"{names[0]}: " + ", ".join(f"{ad} {n:g} free" for ad, n in free.items())
    if not any(n >= 1 for n in free.values()):
        return Check(t.name, "limit", FAIL, detail, f"request a service limit increase for {names[0]}")
    return Check(t.name, "limit", OK, detail)


# --- Vultr and DigitalOcean -----------------------------------------------------------------------


def _rest_credentials(t: Any, p: Any) -> Check:
    r = p.api.request("GET", "account")
    if r.status_code != 200:
        conn = PROVIDERS[t.provider].conn_id
        return Check(
            t.name, "credentials", FAIL, f"GET /account: {r.status_code}", f"fix the {conn} connection's token"
        )
    acct = r.json().get("account") or {}
    status = acct.get("status", "active")
    if status != "active":
        return Check(t.name, "credentials", FAIL, f"account status {status}: {acct.get('status_message', '')}")
    return Check(t.name, "credentials", OK, f"account {acct.get('email') or acct.get('name') or ''}".strip())


def _listed(items: list[str] | None) -> str:
    return ", ".join(items or []) or "none"


def _regions(t: Any, p: Any) -> list[str]:
    return list(t.provider_options.regions) or p.default_regions(t)


def _offered(
    t: Any, i: int, regions: list[str], offer: dict[str, Any] | None, what: str, locations: list[str] | None
) -> Check:
    """Is the target's type offered in one of its regions: ``offer`` is the cloud's listing entry for
    it (None: not listed), ``locations`` where that entry says it is sold."""
    if offer is None:
        return Check(t.name, "offered", FAIL, f"no {what} {t.instance_type}", f"targets[{i}].instance_type")
    where = [r for r in regions if r in (locations or [])]
    if where:
        return Check(t.name, "offered", OK, f"{t.instance_type} in {', '.join(where)}")
    return Check(
        t.name,
        "offered",
        FAIL,
        f"{t.instance_type} not in {', '.join(regions)} (offered in {_listed(locations)})",
        f"targets[{i}].provider_options.regions",
    )


def _known_regions(t: Any, i: int, wanted: list[str], known: set[str]) -> Check:
    """Are the target's regions ones the cloud lists (and, on DigitalOcean, open to new nodes)?"""
    unknown = [r for r in wanted if r not in known]
    if not unknown:
        return Check(t.name, "region", OK, f"{', '.join(wanted)} listed")
    fix = f"targets[{i}].provider_options.regions: use {', '.join(sorted(known)) or 'a listed region'}"
    return Check(
        t.name, "region", FAIL if len(unknown) == len(wanted) else WARN, f"{', '.join(unknown)} not listed", fix
    )


def _ssh_keys(t: Any, i: int, p: Any, path: str) -> Check:
    """Each SSH key id the create would name, read back from the account."""
    ids = list(t.provider_options.ssh_key_ids)
    if not ids:
        return Check(t.name, "ssh keys", OK, "none named (no SSH port opened)")
    missing = [k for k in ids if p.api.request("GET", f"{path}/{k}").status_code != 200]
    if missing:
        return Check(
            t.name,
            "ssh keys",
            FAIL,
            f"{', '.join(missing)} not on the account",
            f"targets[{i}].provider_options.ssh_key_ids",
        )
    return Check(t.name, "ssh keys", OK, f"{len(ids)} found")


def _vultr(t: Any, i: int, p: Any) -> Iterator[Check]:
    from bakeoff.providers.vultr import DEFAULT_OS_ID  # noqa: PLC0415 - the provider module only for Vultr targets

    cred = _rest_credentials(t, p)
    yield cred
    if cred.result == FAIL:
        return
    regions = {x["id"]: x for x in p.api.pages("regions", "regions", {"per_page": 500})}
    yield _known_regions(t, i, _regions(t, p), set(regions))
    plans = {x["id"]: x for x in p.api.pages("plans-metal", "plans_metal", {"per_page": 500})}
    plan = plans.get(t.instance_type)
    yield _offered(t, i, _regions(t, p), plan, "bare-metal plan", (plan or {}).get("locations"))
    yield _ssh_keys(t, i, p, "ssh-keys")
    yield Check(t.name, "quota", NA, "Vultr's API has no quota call; a refusal comes at create")
    os_image = t.provider_options.os_image or DEFAULT_OS_ID
    if isinstance(os_image, str):
        yield Check(t.name, "image", WARN, f"image_id {os_image}: not checked (Marketplace images have no read)")
        return
    oses = {o["id"]: o for o in p.api.pages("os", "os", {"per_page": 500})}
    if os_image in oses:
        yield Check(t.name, "image", OK, f"os_id {os_image} ({oses[os_image].get('name')})")
        yield _image_provides(t, i, str(oses[os_image].get("name", "")))
    else:
        yield Check(t.name, "image", FAIL, f"os_id {os_image} not offered", f"targets[{i}].provider_options.os_image")
    yield Check(t.name, "dry run", NA, "Vultr has no dry-run create")
    yield _untried(t, UNTRIED["vultr"])


def _digitalocean(t: Any, i: int, p: Any) -> Iterator[Check]:
    from bakeoff.providers.digitalocean import DEFAULT_IMAGE  # noqa: PLC0415 - the provider module only for DigitalOcean targets

    cred = _rest_credentials(t, p)
    yield cred
    if cred.result == FAIL:
        return
    regions = {x["slug"]: x for x in p.api.pages("regions", "regions", {"per_page": 200})}
    yield _known_regions(t, i, _regions(t, p), {r for r, x in regions.items() if x.get("available")})
    sizes = {s["slug"]: s for s in p.api.pages("sizes", "sizes", {"per_page": 200})}
    size = sizes.get(t.instance_type)
    size = size if size and size.get("available", True) else None
    yield _offered(t, i, _regions(t, p), size, "available size", (size or {}).get("regions"))
    acct = (p.api.json("GET", "account") or {}).get("account") or {}
    limit = acct.get("droplet_limit")
    if limit is not None and int(limit) < 1:
        yield Check(t.name, "quota", FAIL, f"droplet limit {limit}", "ask DigitalOcean to raise the droplet limit")
    else:
        yield Check(
            t.name, "quota", OK, f"droplet limit {limit}; GPU droplet access is granted per account, not readable here"
        )
    image = t.provider_options.os_image or DEFAULT_IMAGE
    r = p.api.request("GET", f"images/{image}")
    if r.status_code == 200:
        listed = str((r.json().get("image") or {}).get("name", ""))
        yield Check(t.name, "image", OK, f"{image} ({listed})")
        yield _image_provides(t, i, listed)
    else:
        yield Check(t.name, "image", FAIL, f"image {image}: {r.status_code}", f"targets[{i}].provider_options.os_image")
    yield _ssh_keys(t, i, p, "account/keys")
    yield Check(t.name, "dry run", NA, "DigitalOcean has no dry-run create")
    yield _untried(t, UNTRIED["digitalocean"])


_CLOUDS: dict[str, Callable[[Any, int, Any], Iterator[Check]]] = {
    "aws": _aws,
    "oci": _oci,
    "vultr": _vultr,
    "digitalocean": _digitalocean,
}
