"""The provider interface every cloud (and the local emulator) implements.

Lifecycle: create -> check_ready (until it returns the node) -> describe -> terminate, plus
list_tagged to find leftovers by run tag even when the task that created them is gone. Every method
is safe to retry. check_ready is one look, so a sensor can free its worker between looks;
wait_ready loops over it for callers without a scheduler (the CLI).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

TAG_RUN = "bakeoff:run_id"
TAG_TARGET = "bakeoff:target"
TAG_EXPIRES = "bakeoff:expires_at"
TAG_PLAN = "bakeoff:plan"
TAG_INSTALLATION = "bakeoff:installation"  # secrets.installation_id(): whose reaper may judge the node by its run


class ProviderError(RuntimeError):
    """A provider call failed in a way a person must act on; the message says what to do."""


class CapacityError(ProviderError):
    """No capacity for the instance type where it was asked for."""


class PartialListing(ProviderError):
    """A listing that reached some regions (or compartments) but not all: what it found, and where it failed.

    Teardown acts on ``found`` and reports ``errors``, so one region's outage never hides the nodes of
    the others; any other caller sees a ProviderError, as it cannot trust the listing to be complete.
    """

    def __init__(self, provider: str, found: list[Instance], errors: dict[str, str]):
        super().__init__(
            f"{provider}: could not list every region: " + "; ".join(f"{where}: {why}" for where, why in errors.items())
        )
        self.found, self.errors = found, dict(errors)


@dataclass
class Instance:
    """A running (or once running) node. Small and JSON-able: it travels between tasks."""

    provider: str
    id: str
    target: str  # target slug
    run_id: str
    state: str  # pending | running | terminated | failed
    host: str | None = None  # address the serving port is reached on
    port: int | None = None  # serving port
    instance_type: str = ""
    region: str | None = None
    launched_at: float | None = None  # epoch seconds
    expires_at: float | None = None
    tags: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Instance:
        return cls(**d)

    @property
    def base_url(self) -> str:
        """https when the node was booted with a per-node certificate (``details["tls_cert"]``,
        pinned by every client; see serving/tls.py), else plain http (the loopback emulator)."""
        scheme = "https" if (self.details or {}).get("tls_cert") else "http"
        return f"{scheme}://{self.host}:{self.port}"


def reachable(
    provider: Provider,
    instance: Instance,
    *,
    ended: Callable[[Instance], bool],
    status: Callable[[Instance], Any],
) -> Instance | None:
    """One look at a cloud node: running with an address, None while it boots, ProviderError once it ended."""
    cur = provider.describe(instance.id)
    if cur is None or ended(cur):
        raise ProviderError(
            f"{provider.name}: node {instance.id} ended before it was ready ({status(cur) if cur else 'gone'})"
        )
    if cur.state == "running" and cur.host and cur.port:
        return cur
    return None


def list_best_effort(provider: Provider, run_id: str | None) -> tuple[list[Instance], dict[str, str]]:
    """Whatever ``list_tagged`` could find, and where it could not look (empty when it saw everything)."""
    try:
        return provider.list_tagged(run_id), {}
    except PartialListing as e:
        return list(e.found), dict(e.errors)
    except Exception as e:  # noqa: BLE001 - a listing error must not stop the caller terminating what it knows
        return [], {provider.name: f"{type(e).__name__}: {e}"}


class Provider(abc.ABC):
    name: str
    poll_s: float | None = None  # how often wait_ready looks (None: a fiftieth of its timeout, 0.05 s to 5 s)

    def include(self, targets: list) -> None:
        """Widen what ``list_tagged`` searches to where these plan targets launch (no-op for most clouds)."""
        return None

    @abc.abstractmethod
    def create(self, target, run_id: str, *, tags: dict[str, str], spec: dict[str, Any]) -> Instance:
        """Start (or find, if a previous try already started) the instance for target in run_id."""

    @abc.abstractmethod
    def check_ready(self, instance: Instance) -> Instance | None:
        """One look: the node, running and reachable, or None while it boots; ProviderError once it ended."""

    def wait_ready(self, instance: Instance, timeout_s: float) -> Instance:
        """Look until the node is running and reachable; ProviderError when it ended or at the deadline."""
        poll_s = self.poll_s or min(5.0, max(0.05, timeout_s / 50))
        deadline = time.monotonic() + timeout_s
        while True:
            ready = self.check_ready(instance)
            if ready is not None:
                return ready
            if time.monotonic() >= deadline:
                raise ProviderError(
                    f"{self.name}: node {instance.id} not running with an address after {timeout_s:.0f}s"
                )
            time.sleep(min(poll_s, max(0.05, deadline - time.monotonic())))

    @abc.abstractmethod
    def describe(self, instance_id: str) -> Instance | None:
        """Current state, or None if the provider no longer knows it."""

    @abc.abstractmethod
    def terminate(self, instance_id: str) -> bool:
        """Terminate; True if something was terminated, False if already gone. Never raises for 'gone'."""

    @abc.abstractmethod
    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        """Live instances carrying bakeoff tags (all runs when run_id is None). A region that cannot be
        listed does not stop the others: the call then raises PartialListing with what it found."""
