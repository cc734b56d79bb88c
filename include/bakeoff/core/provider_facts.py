"""Every provider a plan may name, and the facts the rest of bakeoff derives from it.

One entry per provider: the DAG's groups, the plan checks, the budget, the cost table, the reaper,
the deploy step and the Airflow connection lookup all read these facts instead of naming providers.
Data only, in ``core`` so the plan (below the providers) reads the same entries the providers do: an
entry's plug-in pieces are ``module:name`` pointers that ``bakeoff.providers.registry`` imports when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from bakeoff.core.errors import ProviderError

Kind = Literal["cloud", "emulator", "endpoint"]
ClientMode = Literal["co-located", "remote"]
KillSwitch = Literal["terminate", "self-delete", "power-off"]
# The shape of its credentials, which says how an Airflow connection becomes them (plugins/bakeoff_connections).
CredentialsForm = Literal["aws-keys", "api-token", "oci-api-key", "none"]


@dataclass(frozen=True)
class ProviderInfo:
    """What a provider is, declared once.

    kind: ``cloud`` (bakeoff provisions billed nodes there), ``emulator`` (a node is an emulator
    process on this machine) or ``endpoint`` (an existing server; bakeoff starts nothing).
    """

    name: str
    cls: str  # "module:Class", imported lazily
    kind: Kind
    spends: bool  # its nodes bill money while they run (the budget guard and the cost table count them)
    boot_h: float  # hours from the create call until the node runs its boot script
    conn_id: str | None  # default Airflow connection holding its credentials
    client_mode: ClientMode  # where the benchmark client runs unless the plan says otherwise
    cleanup: bool  # has ``cleanup(select)`` for what nodes leave behind (security groups, firewalls)
    console_output: bool  # has ``console_output(id)``: the node's console, for failure triage
    tls: bool  # the node serves over a pinned per-node certificate (else plain http or the endpoint's own)
    # its plan options' class in bakeoff.plan.options, by name (the plan picks it by the target's provider)
    options: str
    api_base: str | None = None  # public API root of a REST cloud
    # what the node's boot script does at its budgeted time to end billing with no help from Airflow:
    # power off (ends billing only where the cloud terminates on shutdown), or delete itself
    kill_switch: KillSwitch = "power-off"
    credentials: CredentialsForm = "none"
    # its API shows a powered-off node as such (so the reaper deletes it once its kill switch fired);
    # where it cannot (Vultr bare metal has no power field), the expiry tag is the kill-switch time
    halt_visible: bool = True
    # Its plug-in pieces, beside its provider, so no module outside providers/ names the cloud:
    # the pre-flight's checks of one target on one offer ("module:function", imported when asked)
    preflight: str | None = None
    # its boot script's byte limit where it takes more than the clouds' common one (serving.userdata.MAX_BYTES)
    user_data_max_bytes: int | None = None
    # credential field -> environment variable, for use without Airflow (providers.credentials)
    env: Mapping[str, str] = field(default_factory=dict)
    # the plan's provider options that name the node image, in the order its launch reads them: set,
    # the catalog's records of its default image (``default_images``, ``node_images``) do not apply
    image_fields: tuple[str, ...] = ()
    # the sandbox module that fakes its API (its ``fake(name, parts)``, which the sandbox calls), and the
    # name the rules its API definition states in prose go by (bakeoff_sandbox.spec_rules); None: no fake
    fake: str | None = None
    # for kill_switch "self-delete": "module:function" (minutes) -> the boot script's kill switch section
    self_delete: str | None = None

    @property
    def provisions(self) -> bool:
        """bakeoff provisions cloud nodes here (co-located client, secrets, per-node TLS, client bundle)."""
        return self.kind == "cloud"

    @property
    def emulated(self) -> bool:
        return self.kind == "emulator"

    @property
    def existing_endpoint(self) -> bool:
        """A server someone else started: its own key, its own stack, nothing claimed about either."""
        return self.kind == "endpoint"

    @property
    def launches(self) -> bool:
        """Its create starts something that must be terminated (what the sweep and the reaper scan)."""
        return self.kind != "endpoint"


def _cloud(
    name: str,
    cls: str,
    boot_h: float,
    cleanup: bool,
    console_output: bool,
    api_base: str | None = None,
    kill_switch: KillSwitch = "power-off",
    credentials: CredentialsForm = "api-token",
    halt_visible: bool = True,
    *,
    options: str,
    preflight: str,
    env: Mapping[str, str],
    image_fields: tuple[str, ...],
    fake: str,
    user_data_max_bytes: int | None = None,
    self_delete: str | None = None,
) -> ProviderInfo:
    return ProviderInfo(
        name=name,
        cls=cls,
        kind="cloud",
        spends=True,
        boot_h=boot_h,
        conn_id=f"{name}_default",
        client_mode="co-located",
        cleanup=cleanup,
        console_output=console_output,
        tls=True,
        options=options,
        api_base=api_base,
        kill_switch=kill_switch,
        credentials=credentials,
        halt_visible=halt_visible,
        preflight=preflight,
        user_data_max_bytes=user_data_max_bytes,
        env=env,
        image_fields=image_fields,
        fake=fake,
        self_delete=self_delete,
    )


def _on_this_machine(name: str, cls: str, kind: Kind, options: str) -> ProviderInfo:
    """A provider that bills nothing and needs no credentials: the emulator, or an existing endpoint."""
    return ProviderInfo(
        name=name,
        cls=cls,
        kind=kind,
        spends=False,
        boot_h=0.0,
        conn_id=None,
        client_mode="remote",
        cleanup=False,
        console_output=False,
        tls=False,
        options=options,
    )


PROVIDERS: dict[str, ProviderInfo] = {
    p.name: p
    for p in (
        _on_this_machine("local", "bakeoff.providers.local:LocalProvider", "emulator", "ProviderOptions"),
        _on_this_machine("static", "bakeoff.providers.static:StaticProvider", "endpoint", "StaticOptions"),
        # EC2 launches with InstanceInitiatedShutdownBehavior=terminate: powering off ends billing
        _cloud(
            "aws",
            "bakeoff.providers.aws:AwsProvider",
            0.25,
            cleanup=True,
            console_output=True,
            kill_switch="terminate",
            credentials="aws-keys",
            options="AwsOptions",
            preflight="bakeoff.providers.aws.preflight:checks",
            env={},  # boto3's own chain (environment, profile, instance role)
            image_fields=("ami", "ssm_parameter"),
            fake="bakeoff_sandbox.ec2",
        ),
        _cloud(
            "vultr",
            "bakeoff.providers.vultr:VultrProvider",
            0.5,
            cleanup=False,
            console_output=False,
            api_base="https://api.vultr.com/v2",
            halt_visible=False,  # the bare-metal object has no power field; a halted node reads "active"
            options="RestOptions",
            preflight="bakeoff.providers.vultr:preflight",
            env={"token": "VULTR_API_KEY", "base_url": "VULTR_API_URL"},
            image_fields=("os_image",),
            fake="bakeoff_sandbox.clouds",
        ),
        _cloud(
            "digitalocean",
            "bakeoff.providers.digitalocean:DigitalOceanProvider",
            0.25,
            cleanup=True,
            console_output=False,
            api_base="https://api.digitalocean.com/v2",
            options="RestOptions",
            preflight="bakeoff.providers.digitalocean:preflight",
            env={"token": "DIGITALOCEAN_TOKEN", "base_url": "DIGITALOCEAN_API_URL"},
            image_fields=("os_image",),
            fake="bakeoff_sandbox.clouds",
        ),
        # an OCI node deletes itself through its instance principal
        _cloud(
            "oci",
            "bakeoff.providers.oci:OciProvider",
            0.5,
            cleanup=True,
            console_output=True,
            kill_switch="self-delete",
            self_delete="bakeoff.serving.oci_sdk:kill_switch",
            credentials="oci-api-key",
            options="OciOptions",
            preflight="bakeoff.providers.oci.preflight:checks",
            # its API signing key, as the compose .env names it (the key itself is the PEM text)
            env={
                "user": "OCI_USER_OCID",
                "tenancy": "OCI_TENANCY_OCID",
                "fingerprint": "OCI_KEY_FINGERPRINT",
                "region": "OCI_REGION",
                "compartment_id": "OCI_COMPARTMENT_OCID",
                "key_content": "OCI_PRIVATE_KEY",
            },
            image_fields=("image_ocid",),
            fake="bakeoff_sandbox.oci",
            # "The combined size of the metadata and extendedMetadata objects can be a maximum of 32,000
            # bytes" (LaunchInstanceDetails.metadata, oci SDK 2.189.0), and user_data rides there base64-encoded
            # (4/3 the bytes); 1,000 bytes are left for the keys. The ATOM DSV4 recipe's nodes with TLS and
            # the agent need ~16.5 KB.
            user_data_max_bytes=(32000 - 1000) * 3 // 4,
        ),
    )
}

PROVISIONING: tuple[str, ...] = tuple(n for n, p in PROVIDERS.items() if p.provisions)
LAUNCHING: tuple[str, ...] = tuple(n for n, p in PROVIDERS.items() if p.launches)
ENDPOINTS: tuple[str, ...] = tuple(n for n, p in PROVIDERS.items() if p.existing_endpoint)
EMULATORS: tuple[str, ...] = tuple(n for n, p in PROVIDERS.items() if p.emulated)


def provider_info(name: str) -> ProviderInfo:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ProviderError(f"provider {name!r} is not available; known: {', '.join(sorted(PROVIDERS))}") from None
