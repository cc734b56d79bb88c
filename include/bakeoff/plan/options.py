"""Where a target runs and what it costs: provider options, emulator knobs, described hardware, prices."""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from bakeoff import catalog
from bakeoff.plan.fields import Strict
from bakeoff.secrets import STATIC_CONN_PREFIX, allowed_connection

# The stages a plan may name in inject_fault (bakeoff.faults fails there on purpose).
# weights_incomplete is acted on by a sandbox node, not the pipeline: its boot's weights step finds a shard missing
# node_create: the last node of a cluster target fails its create (bakeoff.clusters.cluster releases the others)
FAULT_STAGES = (
    "launch",
    "after_create",
    "ready_timeout",
    "deploy",
    "benchmark",
    "report",
    "weights_incomplete",
    "node_create",
)

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"
_OCID_RE = r"^ocid1\.{kind}\.[a-z0-9]+\.[a-z0-9-]*\.[a-z0-9]{{20,80}}$"  # ocid1.<kind>.<realm>.<region>.<id>


def _each(values: list[str], pattern: str, problem: str) -> list[str]:
    for x in values:
        if not re.fullmatch(pattern, x):
            raise ValueError(f"{x!r} {problem}")
    return values


class ProviderOptions(Strict):
    """Where and how a target's node is provisioned: what every provider reads. Each provider's own
    fields live on its subclass (``AwsOptions``, ``OciOptions``, ``RestOptions``, ``StaticOptions``),
    chosen by the target's provider (``plan/target.py``), so a field set for the wrong cloud is
    refused where the plan is read instead of ignored.

    ``.get(key, default)`` answers for any field name, so a reader common to every provider can ask
    for a field its target's provider may not have.
    """

    regions: list[str] = Field([], description="ordered: capacity errors fail over to the next")
    client_mode: Literal["remote", "co-located"] | None = Field(
        None,
        description="where the benchmark client runs: co-located on the node (default on clouds) or remote "
        "(the Airflow worker; default for local and static targets)",
    )
    ready_timeout_s: float = Field(1800, gt=0, le=86_400, description="node boot deadline")
    deploy_timeout_s: float | None = Field(
        None, gt=0, le=86_400, description="serving-stack ready deadline (default: 60 s local, 3600 s cloud)"
    )
    inject_fault: str | None = Field(None, description="rehearsal only: fail on purpose at this stage")

    @model_validator(mode="before")
    @classmethod
    def _no_key_env(cls, data: object) -> Any:
        if isinstance(data, dict) and "api_key_env" in data:
            raise ValueError(
                "api_key_env is no longer accepted: a plan must not name the worker's environment "
                "variables. Create an Airflow connection static_endpoint_<name> (host: the endpoint's "
                "URL, password: its key) and set provider_options.endpoint_connection to its id"
            )
        return data

    @field_validator("regions")
    @classmethod
    def _regions(cls, v: list[str]) -> list[str]:
        return _names(v)

    @field_validator("inject_fault")
    @classmethod
    def _fault(cls, v: str | None) -> str | None:
        if v is not None and v not in FAULT_STAGES:
            raise ValueError(f"unknown fault stage {v!r}; use one of {', '.join(FAULT_STAGES)}")
        return v

    def places(self) -> list[str]:
        """The places the plan lists for a node, in its order (what a capacity refusal names): its regions."""
        return list(self.regions)

    def sites(self) -> list[tuple[str, Self]]:
        """Where a whole cluster may be asked for, in the plan's order: (label, these options pinned
        there), one region each; a cloud with finer places says so on its own options."""
        return [(r, self.model_copy(update={"regions": [r]})) for r in self.regions]

    def get(self, key: str, default: object = None) -> Any:
        v = getattr(self, key, None)
        return default if v is None else v

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


def _names(v: list[str]) -> list[str]:
    return _each(v, r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", "is not a valid region/zone/id; use letters, digits, - and _")


class CloudOptions(ProviderOptions):
    """What every cloud node takes: who may reach it."""

    ingress_cidr: str | None = Field(None, description="only this CIDR reaches the serving port")

    @field_validator("ingress_cidr")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return str(ipaddress.ip_network(v, strict=False))
        except ValueError:
            raise ValueError(
                f"{v!r} is not a CIDR; write e.g. 203.0.113.7/32 (the address Airflow reaches the node from)"
            ) from None


class AwsOptions(CloudOptions):
    zones: list[str] = Field([], description="AWS availability zones, ordered; tried within their region")
    subnet_id: str | None = Field(None, pattern=r"^subnet-[0-9a-f]{8,17}$")
    security_group_ids: list[str] = []
    ami: str | None = Field(None, pattern=r"^ami-[0-9a-f]{8,17}$")
    ssm_parameter: str | None = Field(
        None, pattern=r"^/[A-Za-z0-9_./-]+$", description="SSM public parameter naming the AMI"
    )
    capacity_reservation_id: str | None = Field(
        None, pattern=r"^cr-[0-9a-f]{8,17}$", description="EC2 Capacity Block / ODCR id"
    )
    key_name: str | None = Field(None, pattern=_NAME_RE, description="EC2 key pair for SSH (optional)")
    root_volume_gb: int = Field(1000, ge=50, le=16000)

    @field_validator("zones", "security_group_ids")
    @classmethod
    def _ids(cls, v: list[str]) -> list[str]:
        return _names(v)

    @model_validator(mode="after")
    def _one_vpc(self) -> AwsOptions:
        if (self.subnet_id or self.security_group_ids) and len(self.regions) > 1:
            raise ValueError(
                "subnet_id / security_group_ids pin one VPC: list a single region (fail over with zones instead)"
            )
        if self.ami and self.ssm_parameter:
            raise ValueError("give either ami or ssm_parameter, not both")
        return self

    def sites(self) -> list[tuple[str, Self]]:
        """One zone, or a region without zones, each: as EC2's placements order them (a zone's region is
        its name less the last letter)."""
        regions = list(self.regions)
        regions += [r for r in dict.fromkeys(z[:-1] for z in self.zones) if r not in regions]
        out: list[tuple[str, Self]] = []
        for r in regions:
            inside = [z for z in self.zones if z[:-1] == r]
            for where in inside or [r]:
                update: dict[str, Any] = {"regions": [r]}
                if self.zones:
                    update["zones"] = [where] if inside else []
                out.append((where, self.model_copy(update=update)))
        return out


class OciOptions(CloudOptions):
    compartment_id: str | None = Field(
        None,
        pattern=_OCID_RE.format(kind="(?:compartment|tenancy)"),
        description="OCI compartment the node is launched in (default: the connection's)",
    )
    availability_domains: list[str] = Field(
        [], description="OCI availability domains, ordered; tried within their region"
    )
    subnet_ocid: str | None = Field(None, pattern=_OCID_RE.format(kind="subnet"), description="OCI subnet (public)")
    image_ocid: str | None = Field(
        None,
        pattern=_OCID_RE.format(kind="image"),
        description="OCI image (default: the newest platform GPU image for the shape)",
    )
    root_volume_gb: int = Field(1000, ge=50, le=16000)

    @field_validator("availability_domains")
    @classmethod
    def _ads(cls, v: list[str]) -> list[str]:
        return _each(
            v, r"[A-Za-z0-9][A-Za-z0-9:_-]{0,63}", "is not an availability domain; write e.g. Uocm:US-ASHBURN-AD-1"
        )

    def places(self) -> list[str]:
        return list(self.availability_domains) or list(self.regions)

    def sites(self) -> list[tuple[str, Self]]:
        """One availability domain each, where the plan lists several (one listed: the provider decides)."""
        ads = self.availability_domains
        if ads:
            return [(ad, self.model_copy(update={"availability_domains": [ad]})) for ad in ads] if len(ads) > 1 else []
        return super().sites()


class RestOptions(CloudOptions):
    """Vultr and DigitalOcean."""

    ssh_key_ids: list[str] = Field([], description="Vultr / DigitalOcean SSH key ids (optional)")
    os_image: str | int | None = Field(None, description="Vultr os_id / image_id or DigitalOcean image slug")

    @field_validator("ssh_key_ids")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        return _names(v)

    @field_validator("os_image")
    @classmethod
    def _os_image(cls, v: str | int | None) -> str | int | None:
        if isinstance(v, str) and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", v):
            raise ValueError(f"{v!r} is not an image id or slug")
        return v


class StaticOptions(ProviderOptions):
    base_url: str | None = Field(
        None,
        pattern=r"^https?://[A-Za-z0-9.\[\]:-]+(?::[0-9]{1,5})?/?$",
        description="static: an existing endpoint that needs no key",
    )
    endpoint_connection: str | None = Field(
        None,
        description="static: the Airflow connection (static_endpoint_*) whose host is the endpoint's URL and "
        "whose password is its key; the plan never holds either",
    )

    @field_validator("endpoint_connection")
    @classmethod
    def _static_conn(cls, v: str | None) -> str | None:
        if v is not None and (not allowed_connection(v, (STATIC_CONN_PREFIX,)) or v == STATIC_CONN_PREFIX):
            raise ValueError(
                f"{v!r} is not a connection a plan may name here; use the id of a connection starting "
                f"with {STATIC_CONN_PREFIX} (e.g. {STATIC_CONN_PREFIX}pool) whose host is the endpoint's "
                "URL and whose password is its key"
            )
        return v

    @model_validator(mode="after")
    def _one_endpoint(self) -> StaticOptions:
        if self.base_url and self.endpoint_connection:
            raise ValueError(
                "give either base_url (an endpoint without a key) or endpoint_connection (the "
                "connection's host is the URL), not both: a plan may not send a connection's key elsewhere"
            )
        return self


# each provider's options class by the name its registry entry gives (core.provider_facts ``options``)
BY_NAME: dict[str, type[ProviderOptions]] = {
    c.__name__: c for c in (ProviderOptions, StaticOptions, AwsOptions, OciOptions, RestOptions)
}


class EmulatorSettings(Strict):
    """Knobs of the hardware emulator's roofline; ignored by real serving stacks."""

    efficiency: Literal["manual", "twin"] = Field(
        "manual",
        description="twin: time the roofline with the calibrated twin's fitted efficiency and step overhead "
        "(the figures bakeoff predict gives), where the twin has a calibration; manual: the two below",
    )
    prefill_efficiency: float = Field(0.45, gt=0, le=1, description="share of peak FLOPs prefill reaches")
    decode_efficiency: float = Field(0.65, gt=0, le=1, description="share of HBM bandwidth decode reaches")
    max_num_seqs: int = Field(256, ge=1, le=65_536, description="scheduler cap on concurrent sequences")
    time_scale: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="multiply every emulated delay (shortens rehearsals and tests); the benchmark sends load "
        "and records figures on the emulated hardware's own clock, so figures are that hardware's at any scale",
    )
    accuracy_error_rate: float = Field(
        0.0, ge=0, le=1, description="share of accuracy-set answers made wrong on purpose"
    )
    seed: int = 0


class Hardware(Strict):
    """A static endpoint's hardware as its owner describes it, in place of a catalog instance type:
    bakeoff did not provision it, so it states only what the plan says (plus the catalog's figures
    when ``gpu`` names a catalog GPU), never an invented spec."""

    gpu: str = Field(
        min_length=1,
        max_length=80,
        description="GPU model, e.g. H100 SXM 80GB (a catalog GPU "
        "name such as h100 or mi300x also brings its catalog figures: memory, power)",
    )
    gpus: int = Field(ge=1, le=1024, description="GPUs behind the endpoint (the node size the price is for)")
    description: str = Field("", max_length=200, description="free text: host, interconnect, owner")

    @field_validator("gpu", "description")
    @classmethod
    def _printable(cls, v: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in v):
            raise ValueError("must not contain control characters")
        return v

    def as_gpu(self) -> catalog.Gpu | DescribedGpu:
        return catalog.gpus().get(self.gpu.strip().lower()) or DescribedGpu(name=self.gpu)


@dataclass(frozen=True)
class DescribedGpu:
    """A GPU the catalog does not know: its name only; every figure is missing (NaN), not guessed."""

    name: str
    vendor: str | None = None
    hbm_gb: float = math.nan
    hbm_tbps: float = math.nan
    usable_gib: float | None = None  # as the catalog says when it records no usable figure
    tdp_w: float = math.nan
    all_in_kw: float = math.nan
    source: str = "described in the plan (not in the hardware catalog)"
    as_of: str = ""


class PriceOverride(Strict):
    usd_per_hour: float | None = Field(None, gt=0, le=10_000, description="node price per hour")
    usd_per_gpu_hour: float | None = Field(None, gt=0, le=2_000)
    market: str = "contract"
    source: str = "per-run override"
