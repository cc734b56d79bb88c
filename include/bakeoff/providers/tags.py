"""The tags every cloud node carries, and how each cloud spells them.

A node's tags are its only state that outlives the task that made it: teardown, the sweep and the
independent reaper find nodes by them (run, target, plan, expiry, installation) and read the serving
port from them. The set is built once (``node_tags``); each cloud's tag alphabet is a codec chosen
as data (``Provider.tag_codec``): EC2 keeps the keys as they are, OCI freeform keys cannot hold
``:``, and DigitalOcean's labels allow only letters, digits, ``:``, ``-`` and ``_`` (Vultr shares
that form so list-by-tag and the reaper read both clouds alike).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PREFIX = "bakeoff"
TAG_RUN = "bakeoff:run_id"
TAG_TARGET = "bakeoff:target"
TAG_EXPIRES = "bakeoff:expires_at"
TAG_PLAN = "bakeoff:plan"
TAG_INSTALLATION = "bakeoff:installation"  # secrets.installation_id(): whose reaper may judge the node by its run
TAG_PORT = "bakeoff:port"  # serving port, so list_tagged can say where a node serves


def node_tags(tags: Mapping[str, str], run_id: str, slug: str, port: int) -> dict[str, str]:
    """What a node of ``slug`` in ``run_id`` is tagged with: the caller's tags (plan, expiry,
    installation) plus the run, the target and the serving port, which the provider always sets."""
    return {**tags, TAG_RUN: run_id, TAG_TARGET: slug, TAG_PORT: str(port)}


def port_of(tags: Mapping[str, str]) -> int | None:
    """The serving port a node's (decoded) tags name, or None."""
    port = tags.get(TAG_PORT, "")
    return int(port) if port.isdigit() else None


def expiry_of(tags: Mapping[str, str]) -> float | None:
    """The expiry (epoch seconds) a node's (decoded) tags name, or None when absent or unreadable."""
    try:
        return float(tags[TAG_EXPIRES])
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class Pairs:
    """Key/value tags (EC2, OCI freeform): ``replace`` maps characters the cloud's keys refuse, and
    values are cut to ``max_value`` characters where the cloud caps them."""

    replace: tuple[tuple[str, str], ...] = ()
    max_value: int | None = None

    def encode(self, tags: Mapping[str, str]) -> dict[str, str]:
        out = {}
        for k, v in tags.items():
            for a, b in self.replace:
                k = k.replace(a, b)
            out[k] = str(v)[: self.max_value] if self.max_value else str(v)
        return out

    def decode(self, raw: Mapping[str, str] | None) -> dict[str, str]:
        """Back to ``bakeoff:<key>`` for bakeoff's own keys; other keys as they are."""
        if not self.replace:
            return dict(raw or {})
        sep = self.replace[0][1]
        return {
            (f"{PREFIX}:{k[len(PREFIX) + len(sep) :]}" if k.startswith(PREFIX + sep) else k): v
            for k, v in (raw or {}).items()
        }


_SHORT = {
    TAG_RUN: "run",
    TAG_TARGET: "target",
    TAG_PLAN: "plan",
    TAG_EXPIRES: "expires",
    TAG_PORT: "port",
    TAG_INSTALLATION: "inst",
}
_LONG = {v: k for k, v in _SHORT.items()}


def _b32(s: str) -> str:
    return base64.b32encode(s.encode()).decode().rstrip("=").lower()


def _unb32(s: str) -> str:
    s = s.upper()
    return base64.b32decode(s + "=" * (-len(s) % 8)).decode()


@dataclass(frozen=True)
class Labels:
    """Plain labels (DigitalOcean, Vultr): ``bakeoff`` plus ``bakeoff-<short key>-<base32 value>``
    per tag, so any run id fits the strictest alphabet; keys bakeoff does not know are dropped."""

    def encode(self, tags: Mapping[str, str]) -> list[str]:
        return [PREFIX, *(f"{PREFIX}-{_SHORT[k]}-{_b32(str(v))}" for k, v in tags.items() if k in _SHORT)]

    def decode(self, raw: Iterable[str] | None) -> dict[str, str]:
        out = {}
        for t in raw or []:
            parts = t.split("-", 2)
            if len(parts) == 3 and parts[0] == PREFIX and parts[1] in _LONG:
                try:
                    out[_LONG[parts[1]]] = _unb32(parts[2])
                except ValueError:
                    continue
        return out

    @staticmethod
    def run(run_id: str) -> str:
        """The one label that marks every node of a run (what a listing filters by)."""
        return f"{PREFIX}-run-{_b32(run_id)}"


EC2 = Pairs()
OCI_FREEFORM = Pairs(replace=((":", "_"), (".", "_")), max_value=256)
LABELS = Labels()
