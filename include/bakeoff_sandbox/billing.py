"""The sandbox's clock and meter: what each fake cloud would bill, and when each node's kill switch fires.

Rehearsing "no node bills past its budget" needs hours of node time in seconds of wall time, so the
fakes stamp launches and deletions with ``Clock.now()`` (real time plus an offset that ``advance``
moves forward). Advancing fires every kill switch that fell due, at its own deadline.

The meter bills as the real clouds do: from launch until the node is deleted, whether it runs or
is powered off (Vultr, DigitalOcean and OCI bill a stopped GPU node); only an EC2 instance that is
stopped stops billing compute, and one launched with ``InstanceInitiatedShutdownBehavior=terminate``
is terminated by its own power-off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Clock:
    """Real time plus an offset. ``advance`` stops at each deadline a listener reports (``next_due``)
    and runs the listeners there, so what falls due happens at its own time, not at the end of the jump."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._listeners: list[tuple[Callable[[float], object], Callable[[], float | None] | None]] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.time() + self.offset

    def on_advance(self, fire: Callable[[float], object], next_due: Callable[[], float | None] | None = None) -> None:
        self._listeners.append((fire, next_due))

    def _jump_to(self, t: float) -> None:
        with self._lock:
            self.offset += max(0.0, t - self.now())

    def advance(self, seconds: float) -> float:
        """Move simulated time forward by ``seconds``; returns the new now."""
        if seconds < 0:
            raise ValueError("seconds: the sandbox clock only moves forward")
        target = self.now() + seconds
        while True:
            dues = [d for _, nd in self._listeners if nd for d in [nd()] if d is not None and d <= target]
            if not dues:
                break
            self._jump_to(min(dues))
            for fire, _ in list(self._listeners):
                fire(self.now())
        self._jump_to(target)
        for fire, _ in list(self._listeners):
            fire(self.now())
        return self.now()


@dataclass
class Bill:
    provider: str
    node: str
    launched: float
    stop_ends_billing: bool = False  # EC2: a stopped instance bills no compute
    intervals: list[list[float | None]] = field(default_factory=list)  # [start, end] billed spans
    deleted: float | None = None

    def billed_s(self, since: float, until: float) -> float:
        total = 0.0
        for start, end in self.intervals:
            lo, hi = max(start, since), min(end if end is not None else until, until)
            total += max(0.0, hi - lo)
        return total


class Meter:
    """Per node billing spans, kept after deletion (a deleted node's minutes were still billed)."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.bills: dict[tuple[str, str], Bill] = {}
        self._lock = threading.Lock()

    def launch(self, provider: str, node: str, *, stop_ends_billing: bool = False, at: float | None = None) -> None:
        at = self.clock.now() if at is None else at
        with self._lock:
            self.bills[(provider, node)] = Bill(provider, node, at, stop_ends_billing, [[at, None]])

    def stopped(self, provider: str, node: str, at: float | None = None) -> None:
        """Powered off: billing goes on, except where the cloud stops billing a stopped node (EC2)."""
        with self._lock:
            b = self.bills.get((provider, node))
            if b and b.stop_ends_billing:
                self._close(b, self.clock.now() if at is None else at)

    def deleted(self, provider: str, node: str, at: float | None = None) -> None:
        at = self.clock.now() if at is None else at
        with self._lock:
            b = self.bills.get((provider, node))
            if b and b.deleted is None:
                b.deleted = at
                self._close(b, at)

    @staticmethod
    def _close(b: Bill, at: float) -> None:
        if b.intervals and b.intervals[-1][1] is None:
            b.intervals[-1][1] = max(at, b.intervals[-1][0])

    def billed_minutes(self, provider: str, since: float, until: float | None = None) -> float:
        """Node-minutes this cloud bills between ``since`` and ``until`` (default now), all nodes together."""
        until = self.clock.now() if until is None else until
        with self._lock:
            return sum(b.billed_s(since, until) for b in self.bills.values() if b.provider == provider) / 60.0
