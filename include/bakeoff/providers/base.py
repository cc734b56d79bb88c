"""The provider interface every cloud (and the local emulator) implements.

Lifecycle: create -> wait_ready -> describe -> terminate, plus list_tagged to find leftovers by
run tag even when the task that created them is gone. Every method is safe to retry.
"""

from __future__ import annotations

import abc
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

TAG_RUN = "bakeoff:run_id"
TAG_TARGET = "bakeoff:target"
TAG_EXPIRES = "bakeoff:expires_at"
TAG_PLAN = "bakeoff:plan"


class ProviderError(RuntimeError):
    """A provider call failed in a way a person must act on; the message says what to do."""


class CapacityError(ProviderError):
    """No capacity for the instance type where it was asked for."""


class PartialListing(ProviderError):
    """A listing that reached some regions (or compartments) but not all: what it found, and where it failed.

    Teardown acts on ``found`` and reports ``errors``, so one region's outage never hides the nodes of
    the others; any other caller sees a ProviderError, as it cannot trust the listing to be complete.
    """

    def __init__(self, provider: str, found: list["Instance"], errors: dict[str, str]):
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
    def from_dict(cls, d: dict[str, Any]) -> "Instance":
        return cls(**d)

    @property
    def base_url(self) -> str:
        """https when the node was booted with a per-node certificate (``details["tls_cert"]``,
        pinned by every client; see serving/tls.py), else plain http (the loopback emulator)."""
        scheme = "https" if (self.details or {}).get("tls_cert") else "http"
        return f"{scheme}://{self.host}:{self.port}"


def poll_until_reachable(
    provider: "Provider",
    instance: Instance,
    timeout_s: float,
    poll_s: float,
    *,
    ended: Callable[[Instance], bool],
    status: Callable[[Instance], Any],
) -> Instance:
    """Describe the node until it runs with an address; fail fast if it ended, clearly at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        cur = provider.describe(instance.id)
        if cur is None or ended(cur):
            raise ProviderError(
                f"{provider.name}: node {instance.id} ended before it was ready ({status(cur) if cur else 'gone'})"
            )
        if cur.state == "running" and cur.host and cur.port:
            return cur
        if time.monotonic() >= deadline:
            raise ProviderError(
                f"{provider.name}: node {instance.id} not running with an address after "
                f"{timeout_s:.0f}s (status {status(cur)})"
            )
        time.sleep(min(poll_s, max(0.05, deadline - time.monotonic())))


def list_best_effort(provider: "Provider", run_id: str | None) -> tuple[list["Instance"], dict[str, str]]:
    """Whatever ``list_tagged`` could find, and where it could not look (empty when it saw everything)."""
    try:
        return provider.list_tagged(run_id), {}
    except PartialListing as e:
        return list(e.found), dict(e.errors)
    except Exception as e:  # noqa: BLE001 - a listing error must not stop the caller terminating what it knows
        return [], {provider.name: f"{type(e).__name__}: {e}"}


class Provider(abc.ABC):
    name: str

    def include(self, targets: list) -> None:
        """Widen what ``list_tagged`` searches to where these plan targets launch (no-op for most clouds)."""

    @abc.abstractmethod
    def create(self, target, run_id: str, *, tags: dict[str, str], spec: dict[str, Any]) -> Instance:
        """Start (or find, if a previous try already started) the instance for target in run_id."""

    @abc.abstractmethod
    def wait_ready(self, instance: Instance, timeout_s: float) -> Instance:
        """Block until the node is running and reachable; raise ProviderError on timeout."""

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
