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
import hashlib
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


# DigitalOcean's tag name: "There is a limit of 255 characters per tag." (Vultr states none; it shares the form)
MAX_LABEL = 255
_RUN_DIGEST = "runh"  # the run's filter label when the run id is too long to spell in one label


@dataclass(frozen=True)
class Labels:
    """Plain labels (DigitalOcean, Vultr): ``bakeoff`` plus ``bakeoff-<short key>-<base32 value>``
    per tag, so any run id fits the strictest alphabet; keys bakeoff does not know are dropped.

    A label is at most ``MAX_LABEL`` characters. A value too long for one (a run id past 151
    characters; Airflow allows 250) is spelled over numbered labels ``bakeoff-<key><i>-<part>``,
    and such a run is filtered by ``bakeoff-runh-<sha256 of the run id>`` instead."""

    def encode(self, tags: Mapping[str, str]) -> list[str]:
        out = [PREFIX]
        for k, v in tags.items():
            if k not in _SHORT:
                continue
            one = f"{PREFIX}-{_SHORT[k]}-{_b32(str(v))}"
            if len(one) <= MAX_LABEL:
                out.append(one)
                continue
            if k == TAG_RUN:
                out.append(self.run(str(v)))
            room = MAX_LABEL - len(f"{PREFIX}-{_SHORT[k]}00-")
            enc = _b32(str(v))
            out += [f"{PREFIX}-{_SHORT[k]}{i}-{enc[j : j + room]}" for i, j in enumerate(range(0, len(enc), room))]
        return out

    def decode(self, raw: Iterable[str] | None) -> dict[str, str]:
        out: dict[str, str] = {}
        parts_of: dict[str, dict[int, str]] = {}
        for t in raw or []:
            parts = t.split("-", 2)
            if len(parts) != 3 or parts[0] != PREFIX:
                continue
            key, num = parts[1].rstrip("0123456789"), parts[1][len(parts[1].rstrip("0123456789")) :]
            if key not in _LONG:
                continue
            if num:
                parts_of.setdefault(key, {})[int(num)] = parts[2]
                continue
            try:
                out[_LONG[key]] = _unb32(parts[2])
            except ValueError:
                continue
        for key, chunks in parts_of.items():
            if _LONG[key] in out or sorted(chunks) != list(range(len(chunks))):
                continue
            try:
                out[_LONG[key]] = _unb32("".join(chunks[i] for i in range(len(chunks))))
            except ValueError:
                continue
        return out

    @staticmethod
    def run(run_id: str) -> str:
        """The one label that marks every node of a run (what a listing filters by), within MAX_LABEL."""
        one = f"{PREFIX}-run-{_b32(run_id)}"
        if len(one) <= MAX_LABEL:
            return one
        return f"{PREFIX}-{_RUN_DIGEST}-{hashlib.sha256(run_id.encode()).hexdigest()}"

    def is_run(self, label: str) -> bool:
        """Whether ``label`` is a run's filter label (``run``'s form, spelled or digested)."""
        head, _, rest = label.partition("-")
        kind, _, value = rest.partition("-")
        if head != PREFIX or not value:
            return False
        if kind == _RUN_DIGEST:
            return len(value) == 64 and all(c in "0123456789abcdef" for c in value)
        return kind == "run" and TAG_RUN in self.decode([label])


EC2 = Pairs()
OCI_FREEFORM = Pairs(replace=((":", "_"), (".", "_")), max_value=256)
LABELS = Labels()
