"""OCI's pre-flight: credentials, region and availability domains, the shape offered, a compute capacity
report, the service limit, the image and what it provides. Reads and reports only (the capacity report
creates no resource); OCI has no dry-run launch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import oci

from bakeoff.core.launch import LaunchSpec
from bakeoff.providers.base import ProviderError
from bakeoff.providers.preflight_checks import BOOT_UNTRIED, FAIL, NA, OK, WARN, Check, image_provides, untried

# What its launch does that the pre-flight cannot try (also in docs/production.md): the target's last row.
UNTRIED = [
    "the launch itself (OCI has no dry run): its metadata and user-data, the tags and the network "
    "security group made with it",
    "capacity at the moment of launch (the capacity report is a snapshot)",
    BOOT_UNTRIED,
]


def checks(t: Any, i: int, p: Any, launch: LaunchSpec) -> Iterator[Check]:
    """The pre-flight's checks of a target on OCI (registry ``preflight``)."""

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
    yield _limits(t, p, region, tenancy, offered, err)
    try:
        if opts.image_ocid:
            image = compute.get_image(opts.image_ocid).data
            yield Check(name, "image", OK, f"{image.display_name}")
        else:
            p._image(t, compartment, region)
            platform = compute.get_image(p._image(t, compartment, region)).data
            yield Check(name, "image", OK, f"{platform.display_name}, a platform image listing {t.instance_type}")
            yield image_provides(t, i, str(platform.display_name))
    except Exception as e:  # noqa: BLE001 - ProviderError or the SDK's
        yield Check(name, "image", FAIL, err(e), f"targets[{i}].provider_options.image_ocid")
    yield Check(name, "dry run", NA, "OCI has no dry-run launch; the checks above stand for it")
    yield untried(t, UNTRIED)


def _limits(t: Any, p: Any, region: str, tenancy: str, ads: list[str], err: Callable[[Exception], str]) -> Check:
    """The compute service limit whose definition names the shape, and its availability per domain."""
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
