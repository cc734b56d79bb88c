"""How the sandbox holds each cloud's fake without naming the cloud: a provider's registry entry names
its fake's module (``ProviderInfo.fake``), and that module's ``fake(name, parts)`` makes the cloud's
``CloudFake`` from what every fake shares (``Parts``). A module faking several clouds (Vultr and
DigitalOcean on one server) makes their server once, through ``Parts.server``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff_sandbox.backing import Backing
from bakeoff_sandbox.billing import Meter

if TYPE_CHECKING:  # the fakes' modules import Parts
    from bakeoff_sandbox.ec2 import MotoServer


class Server(Protocol):
    def start(self) -> Any: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Server)


class CloudFake(Protocol):
    """One cloud's fake as the sandbox drives it."""

    requests: int  # control-plane calls it has answered

    def credentials(self, address_map_url: str) -> dict[str, Any]:
        """What its provider is given (``credentials_from_env`` inside ``Sandbox.exported``)."""
        ...

    def connection(self, address_map_url: str) -> dict[str, Any]:
        """Its Airflow connection (``AIRFLOW_CONN_<conn id>``), for the DAG's own lookup."""
        ...

    def live(self) -> list[str]:
        """The nodes it still holds (ground truth, not asked through the provider)."""
        ...

    def kill_switch(self, node: str, action: str) -> None:
        """What the node's kill-switch section (``action``) does to this cloud once it fires."""
        ...

    def deny_capacity(self, places: list[str]) -> None:
        """Refuse capacity in these places (regions, zones or domains) or for these types."""
        ...


@dataclass
class Parts:
    """What every fake is built from: the emulators behind the nodes, the bill, the boot time, moto
    (EC2's fake and the client bundle's S3), and the servers the fakes made, started in that order."""

    backing: Backing
    meter: Meter
    boot_s: float
    moto: MotoServer
    servers: dict[str, Server] = field(default_factory=dict)
    # run once the servers answer (e.g. what a fake publishes through its own API)
    after_start: list[Callable[[], None]] = field(default_factory=list)

    def server(self, key: str, make: Callable[[], S]) -> S:
        """The server ``key`` of the fakes that share it, made on first ask."""
        if key not in self.servers:
            self.servers[key] = make()
        return cast(S, self.servers[key])  # made by ``make`` under this key


def every_fake(parts: Parts) -> dict[str, CloudFake]:
    """Each provider's fake, by provider name, from the module its registry entry names."""
    return {name: import_module(p.fake).fake(name, parts) for name, p in PROVIDERS.items() if p.fake}
