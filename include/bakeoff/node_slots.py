"""How many nodes a run may hold at once on each cloud: the per-provider node limit, kept by the library.

The limits are the Airflow Variable ``bakeoff_provider_node_limits`` (JSON, ``{"aws": 4, "oci": 2}``:
nodes, e.g. the account's GPU quota). A provider absent from it, and every provider bakeoff does not
provision (the emulator, existing endpoints: ``ProviderInfo.provisions``), is unlimited. start_run
checks them (``parse_limits``, ``check_plan``: a target needing more nodes than its provider's limit is
refused before any approval or spend) and records them in the run's folder (``record``), so every
claim of the run reads the same limits.

A target holds its nodes (a cluster target one per node) from its claim, before provision, to its
release: terminate releases them once its nodes are gone, a provision that fails for good releases
them, and the sweep releases whatever the run still holds. The folder is shared by every worker, but
may be object storage, where no lock exists; so no lock is taken: each target writes only its own
record (``node_slots/<target>.json``), and the claims are granted in the plan's order. A target may
claim when its nodes, plus the nodes of every target of the same provider that has not released and
comes before it in the plan (or holds a claim), fit the limit. A target granted its claim counted
every earlier one that could still hold nodes, and earlier targets only ever release; so whichever
targets hold nodes at any moment fit the limit, and no target waits for a later one (no deadlock: the
first waits for nobody, and start_run refused any target that alone exceeds the limit).
"""

from __future__ import annotations

import json
import time
from typing import Any

from bakeoff import store
from bakeoff.plan import Plan, Target, plan_from_dict
from bakeoff.providers.registry import PROVIDERS

VARIABLE = "bakeoff_provider_node_limits"
LIMITS = "node_limits.json"  # the run's limits, as start_run read them
FOLDER = "node_slots"  # one record per target that claimed or released
MAX_LIMIT = 10_000


class NodeLimitError(ValueError):
    """A bad limit in the Variable, or a target that needs more nodes than its provider may hold."""


def _fix() -> str:
    return (
        f"set the Airflow Variable {VARIABLE} to a JSON object of provider -> nodes (a whole number from 1 to "
        f'{MAX_LIMIT}), e.g. {{"aws": 4, "oci": 2}}; leave a provider out for no limit'
    )


def parse_limits(raw: Any) -> dict[str, int]:
    """The limits from the Variable's raw value (None or "" : none; a JSON string or an object)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    value: Any = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise NodeLimitError(f"Variable {VARIABLE}: not JSON ({e.msg}); {_fix()}") from None
    if not isinstance(value, dict):
        raise NodeLimitError(f"Variable {VARIABLE}: a {type(value).__name__}, not an object; {_fix()}")
    limits: dict[str, int] = {}
    for key, n in value.items():
        if key not in PROVIDERS:
            raise NodeLimitError(
                f"Variable {VARIABLE}: key {key!r} is no provider (known: {', '.join(PROVIDERS)}); {_fix()}"
            )
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_LIMIT:
            raise NodeLimitError(f"Variable {VARIABLE}: key {key!r} is {n!r}, not a node count; {_fix()}")
        if not PROVIDERS[key].provisions:
            raise NodeLimitError(
                f"Variable {VARIABLE}: key {key!r} names a provider bakeoff does not provision (no node of an "
                f"account to count: it is never limited); remove the key"
            )
        limits[key] = n
    return limits


def nodes_of(target: Target) -> int:
    """The nodes a target holds: one, or a cluster's node count."""
    return target.cluster.node_count if target.cluster is not None else 1


def check_plan(plan: Plan, limits: dict[str, int]) -> None:
    """Refuse a target that alone needs more nodes than its provider's limit: it could never start."""
    for t in plan.targets:
        limit = limits.get(t.provider)
        if limit is not None and nodes_of(t) > limit:
            raise NodeLimitError(
                f"target {t.name!r} needs {nodes_of(t)} {t.provider} nodes, but Variable {VARIABLE} lets a run hold "
                f"{limit} at once ({t.provider!r}: {limit}); raise the limit (your {t.provider} quota allowing) or "
                "make the target smaller"
            )


def record(run_dir: str | store.StorePath, limits: dict[str, int]) -> None:
    """Keep the run's limits in its folder: every claim of the run reads these."""
    store.write_json(store.at(run_dir) / LIMITS, limits)


def _slot(run_dir: str | store.StorePath, slug: str) -> store.StorePath:
    return store.at(run_dir) / FOLDER / f"{store.safe_name(slug)}.json"


def _state(run_dir: str | store.StorePath, slug: str) -> dict[str, Any]:
    doc = store.read_json(_slot(run_dir, slug))
    return doc if isinstance(doc, dict) else {}


def _holding(state: dict[str, Any]) -> bool:
    return bool(state.get("claimed_at")) and not state.get("released_at")


def claim(run_dir: str | store.StorePath, slug: str) -> bool:
    """Claim the target's nodes: True once it holds them (again True on a retry), False while they
    do not fit its provider's limit yet (look again later)."""
    run = store.fresh(store.at(run_dir))
    if _holding(_state(run, slug)):
        return True
    plan = plan_from_dict(store.read_json(run / "plan.json"), source="plan.json")
    target = plan.target(slug)
    limit = (store.read_json(run / LIMITS) or {}).get(target.provider)
    if limit is not None:
        same = [t for t in plan.targets if t.provider == target.provider]
        mine = next(i for i, t in enumerate(same) if t.slug == target.slug)
        ahead = 0  # nodes of the targets that may hold them before this one
        for i, other in enumerate(same):
            if i == mine:
                continue
            state = _state(run, other.slug)
            if not state.get("released_at") and (i < mine or _holding(state)):
                ahead += nodes_of(other)
        if ahead + nodes_of(target) > int(limit):
            return False
    state = {"target": slug, "provider": target.provider, "nodes": nodes_of(target), "claimed_at": time.time()}
    store.write_json(_slot(run, slug), {**state, "released_at": None})
    return True


def release(run_dir: str | store.StorePath, slug: str) -> bool:
    """Release the target's nodes (also when it never claimed them: a later target then need not wait
    for it). True when it held them."""
    state = _state(run_dir, slug)
    if state.get("released_at"):
        return False
    store.write_json(_slot(run_dir, slug), {**state, "target": slug, "released_at": time.time()})
    return _holding(state)


def release_all(run_dir: str | store.StorePath) -> list[str]:
    """Release every target of the run that still holds nodes (the sweep, once the targets are done)."""
    run = store.fresh(store.at(run_dir))
    plan = plan_from_dict(store.read_json(run / "plan.json"), source="plan.json")
    return [t.slug for t in plan.targets if release(run, t.slug)]


def held(run_dir: str | store.StorePath) -> dict[str, int]:
    """Nodes each provider's targets hold now, by the records."""
    run = store.fresh(store.at(run_dir))
    out: dict[str, int] = {}
    for f in run.glob(f"{FOLDER}/*.json"):
        state = store.read_json(f) or {}
        if _holding(state):
            out[state["provider"]] = out.get(state["provider"], 0) + int(state["nodes"])
    return out
