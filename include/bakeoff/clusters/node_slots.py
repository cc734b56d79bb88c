"""How many nodes a run may hold at once on each cloud: the per-provider node limit, kept by the library.

The limits are the Airflow Variable ``bakeoff_provider_node_limits`` (JSON, ``{"aws": 4, "oci": 2}``:
nodes, e.g. the account's GPU quota). A provider absent from it, and every provider bakeoff does not
provision (the emulator, existing endpoints: ``ProviderInfo.provisions``), is unlimited. start_run
checks them (``parse_limits``, ``check_plan``: a target needing more nodes than its provider's limit is
refused before any approval or spend) and records them in the run's folder (``record``), so every
claim of the run reads the same limits.

A target holds its nodes (a cluster target one per node) from its claim, before provision, to its
release: terminate releases them once its nodes are gone, a provision that fails for good releases
them only when it created no node, and the sweep releases those of the run's targets whose nodes it
saw gone (a node whose termination failed keeps its slot).

The limit is the installation's, not a run's: every run that provisions on a cloud is entered in the
installation's ledger (``_node_slots/<provider>/<run>.json`` under the results root, beside the plans'
folders) when it starts, and claims are ordered across runs by the run's start time, then within a run
by the plan's order. The folder is shared by every worker, but may be object storage, where no lock
exists; so no lock is taken: each target writes only its own record (``node_slots/<target>.json`` in
its run's folder). A target may claim when its nodes, plus the nodes of every registered target of the
same provider that has not released and comes before it (or holds a claim), fit the limit; having
written its claim it looks again, and gives the claim back if a target ordered before it has appeared
meanwhile (a run that started earlier but registered late). Whichever of two such claimers checks
last sees the other: the earlier-ordered one counts the later's written claim, or the later one finds
the earlier on its second look and yields; so the targets holding nodes at any moment fit the limit,
and no target waits for a later one (the first waits for nobody, and start_run refused any target that
alone exceeds the limit). A run that never reaches its sweep keeps its unreleased claims in the
ledger: release them with its sweep.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bakeoff import store
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan import Plan, Target, plan_from_dict

VARIABLE = "bakeoff_provider_node_limits"
LIMITS = "node_limits.json"  # the run's limits, as start_run read them
FOLDER = "node_slots"  # one record per target that claimed or released
LEDGER = "_node_slots"  # under the results root: the runs that may hold nodes, per provider (no plan starts with _)
MAX_LIMIT = 10_000


class NodeLimitError(ValueError):
    """A bad limit in the Variable, or a target that needs more nodes than its provider may hold."""


def _fix() -> str:
    return (
        f"set the Airflow Variable {VARIABLE} to a JSON object of provider -> nodes (a whole number from 1 to "
        f'{MAX_LIMIT}), e.g. {{"aws": 4, "oci": 2}}; leave a provider out for no limit'
    )


def parse_limits(raw: object) -> dict[str, int]:
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


def _ledger(run: store.StorePath, provider: str) -> store.StorePath:
    """The installation's ledger of one provider: beside the plans' folders (run = <root>/<plan>/run_id=...)."""
    return run.parent.parent / LEDGER / store.safe_name(provider)


def _entry_name(run: store.StorePath) -> str:
    return f"{store.safe_name(run.parent.name)}__{store.safe_name(run.name)}.json"


def register(run_dir: str | store.StorePath, plan: Plan, started_at: float | None = None) -> None:
    """Enter the run in the ledger of each limited-capable cloud it provisions on (start_run, or the first
    claim of a run started without it): its start time orders its claims among every run's."""
    run = store.at(run_dir)
    if started_at is None:
        started_at = store.run_facts(run).start.started_at or time.time()
    for provider in dict.fromkeys(t.provider for t in plan.targets if PROVIDERS[t.provider].provisions):
        entry = _ledger(run, provider) / _entry_name(run)
        if store.read_json(entry) is not None:
            continue
        targets = [{"slug": t.slug, "nodes": nodes_of(t)} for t in plan.targets if t.provider == provider]
        doc = {"plan": run.parent.name, "run": run.name, "started_at": started_at, "targets": targets}
        store.write_json(entry, doc)


def _queue(run: store.StorePath, provider: str) -> list[tuple[store.StorePath, str, int]]:
    """(run folder, target slug, nodes) of every registered target of the provider, in claim order: by the
    run's start time (then its name), then the plan's order. A malformed entry is skipped, never trusted."""
    ledger = store.fresh(_ledger(run, provider))
    entries: list[tuple[float, str, store.StorePath, list[tuple[str, int]]]] = []
    files: list[store.StorePath] = list(ledger.glob("*.json"))
    for f in sorted(files, key=str):
        doc = store.read_json(f)
        try:
            if not isinstance(doc, dict) or not str(doc["run"]).startswith("run_id="):
                continue
            folder = run.parent.parent / store.safe_name(str(doc["plan"])) / store.safe_name(str(doc["run"]))
            targets = [(str(t["slug"]), int(t["nodes"])) for t in doc["targets"]]
            entries.append((float(doc["started_at"]), str(f.name), folder, targets))
        except (KeyError, TypeError, ValueError):
            continue
    entries.sort(key=lambda e: (e[0], e[1]))
    return [(folder, slug, nodes) for _, _, folder, targets in entries for slug, nodes in targets]


def _fits(run: store.StorePath, slug: str, provider: str, limit: int, *, count_holders: bool) -> bool:
    """Whether the target's nodes fit beside those of every unreleased target ordered before it (and, when
    count_holders, of every target holding a claim, wherever it is ordered)."""
    queue = _queue(run, provider)
    me = next(
        (
            i
            for i, (folder, s, _) in enumerate(queue)
            if s == slug and folder.name == run.name and folder.parent.name == run.parent.name
        ),
        None,
    )
    if me is None:
        return False  # not registered yet: register first
    taken = 0
    for i, (folder, other, nodes) in enumerate(queue):
        if i == me:
            continue
        state = _state(folder, other)
        if not state.get("released_at") and (i < me or (count_holders and _holding(state))):
            taken += nodes
    return taken + queue[me][2] <= limit


def claim(run_dir: str | store.StorePath, slug: str) -> bool:
    """Claim the target's nodes: True once it holds them (again True on a retry), False while they
    do not fit its provider's installation-wide limit yet (look again later)."""
    run = store.fresh(store.at(run_dir))
    if _holding(_state(run, slug)):
        return True
    plan = plan_from_dict(store.read_json(run / "plan.json"), source="plan.json")
    target = plan.target(slug)
    limit = (store.read_json(run / LIMITS) or {}).get(target.provider)
    state = {"target": slug, "provider": target.provider, "nodes": nodes_of(target)}
    if limit is not None:
        register(run, plan)
        if not _fits(run, slug, target.provider, int(limit), count_holders=True):
            return False
    store.write_json(_slot(run, slug), {**state, "claimed_at": time.time(), "released_at": None})
    if limit is not None and not _fits(run, slug, target.provider, int(limit), count_holders=False):
        # a target ordered before this one appeared between the look and the write: it goes first
        store.write_json(_slot(run, slug), {**state, "claimed_at": None, "released_at": None})
        return False
    return True


def release(run_dir: str | store.StorePath, slug: str) -> bool:
    """Release the target's nodes (also when it never claimed them: a later target then need not wait
    for it). True when it held them."""
    state = _state(run_dir, slug)
    if state.get("released_at"):
        return False
    store.write_json(_slot(run_dir, slug), {**state, "target": slug, "released_at": time.time()})
    return _holding(state)


def release_all(run_dir: str | store.StorePath, keep: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Release every target of the run that still holds nodes, except ``keep`` (targets whose nodes may
    still run: the sweep, once the targets are done, keeps those whose termination failed)."""
    run = store.fresh(store.at(run_dir))
    plan = plan_from_dict(store.read_json(run / "plan.json"), source="plan.json")
    return [t.slug for t in plan.targets if t.slug not in keep and release(run, t.slug)]


def held(run_dir: str | store.StorePath) -> dict[str, int]:
    """Nodes each provider's targets hold now, by the records."""
    run = store.fresh(store.at(run_dir))
    out: dict[str, int] = {}
    for f in run.glob(f"{FOLDER}/*.json"):
        state = store.read_json(f) or {}
        if _holding(state):
            out[state["provider"]] = out.get(state["provider"], 0) + int(state["nodes"])
    return out
