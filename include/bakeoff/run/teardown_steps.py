"""The steps that tear a run down, whatever happened: a target's nodes terminated (its cluster router
stopped first), then the run's sweep over every provider, which also releases the node slots of the
targets whose nodes it saw gone.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from bakeoff import store
from bakeoff.cleanup import teardown
from bakeoff.clusters import node_slots
from bakeoff.core import facts
from bakeoff.core.instance import Instance
from bakeoff.plan import Plan, Target
from bakeoff.providers.base import TAG_RUN
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.run.provisioning import router_folder
from bakeoff.run.step_context import CredentialsFn, RunContext, TargetContext, provider_for, with_run, with_target
from bakeoff.spend import budget

log = logging.getLogger(__name__)


@with_target
def terminate(
    ctx: TargetContext, instance: dict[str, Any] | None, credentials: CredentialsFn = credentials_from_env
) -> dict[str, Any]:
    """Terminate the target's instance: the ids provision recorded first (no listing can block them),
    then whatever the run's tag finds for the target, best effort (the sweep looks again). Safe when
    the node is already gone or was never created; fails only when a termination failed."""

    run_dir, slug, plan, rid, target = ctx.run_dir, ctx.slug, ctx.plan, ctx.run_id, ctx.target
    provider = provider_for(target.provider, credentials)
    provider.include([target])
    known = list(
        dict.fromkeys(
            ([instance["id"]] if instance and instance.get("id") else [])
            + teardown.recorded_ids(run_dir, plan.name, rid, target.slug)
        )
    )
    failed: dict[str, str] = {}
    if target.cluster is not None and instance:
        _stop_router(rid, target.slug, Instance.from_dict(instance))
    done = teardown.terminate_ids(provider, rid, known, failed)
    found, more, unlisted = teardown.terminate_tagged(provider, rid, failed, slug=target.slug, skip=set(known))
    for where, why in unlisted.items():
        log.warning("terminate: could not search %s for leftovers of %s (the sweep looks again): %s", where, slug, why)
    # a retry that succeeds replaces this record, errors included
    ctx.record(
        facts.Terminate(
            instances=tuple(sorted({*known, *found})),
            errors=tuple(f"{w}: {e}" for w, e in failed.items()),
            terminated_at=None if failed else time.time(),
        ),
    )
    if failed:  # its nodes may still run: they still count against the limit (the sweep releases them)
        raise teardown.TeardownIncomplete(f"terminate {slug}", failed)
    node_slots.release(run_dir, slug)
    return {"target": slug, "terminated": [*done, *more]}


def _stop_router(rid: str, slug: str, instance: Instance) -> None:
    """Stop the target's emulated router: signalled where it runs, else through its stop route at the
    recorded address (instance.json's host and port are the router's)."""
    from bakeoff.clusters.cluster import stop_router  # noqa: PLC0415 - only a cluster target has a router

    pid = instance.router_pid
    url = instance.base_url if instance.host and instance.port else None
    if pid is not None and not stop_router(pid, router_folder(rid, slug), url):
        log.warning("the router of %s could not be stopped from here; it exits at the run's expiry", slug)


def _stop_routers(plan: Plan, rid: str, targets: list[Target]) -> None:
    """The emulated router of each cluster target (its pid and address in instance.json)."""
    for t in targets:
        if t.cluster is None:
            continue
        inst = store.read_json(store.target_dir(plan.name, rid, t.slug) / "instance.json", {}) or {}
        if isinstance(inst, dict) and inst.get("id"):
            _stop_router(rid, t.slug, Instance.from_dict(inst))


@with_run
def sweep(ctx: RunContext, credentials: CredentialsFn = credentials_from_env) -> dict[str, Any]:
    """Terminate everything of this run on every provider the plan uses: each recorded instance id, then
    whatever the run's tag finds. One provider's failure never stops the next; what was done and the
    measured cost are recorded, then any failure (a node not terminated, a place not searched) fails the step."""

    run_dir, plan, rid = ctx.run_dir, ctx.plan, ctx.run_id
    killed: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    for name in sorted({t.provider for t in plan.targets}):
        targets = [t for t in plan.targets if t.provider == name]
        killed[name] = []
        try:
            provider = provider_for(name, credentials)
            provider.include(targets)
        except Exception as e:  # noqa: BLE001 - the next provider is still swept
            errors[name] = f"{type(e).__name__}: {e}"
            continue
        known = list(dict.fromkeys(i for t in targets for i in teardown.recorded_ids(run_dir, plan.name, rid, t.slug)))
        _stop_routers(plan, rid, targets)
        killed[name] += teardown.terminate_ids(provider, rid, known, errors)
        _, more, unlisted = teardown.terminate_tagged(provider, rid, errors, skip=set(known))
        killed[name] += more
        errors.update(unlisted)
        try:  # the run's firewalls / security groups, once nothing uses them (clouds declaring ``cleanup``)
            getattr(provider, "cleanup", lambda select: [])(lambda tags: tags.get(TAG_RUN) == rid)
        except Exception as e:  # noqa: BLE001 - the reaper retries; the sweep still records the run's cost
            log.error("sweep: %s cleanup failed: %s", name, e)
    for where, why in errors.items():
        log.error("sweep: %s: %s", where, why)
    swept = facts.Sweep(
        at=time.time(),
        terminated={name: tuple(ids) for name, ids in killed.items()},
        errors=tuple(f"{w}: {e}" for w, e in errors.items()),
    )
    store.record(run_dir, swept.STEP, swept.to_json())

    budget.record_measured_cost(run_dir, plan)
    # every target is done: release each one's nodes, except where a node may still run (its termination
    # failed, or its cloud could not be searched): those keep their slot until a later sweep sees them gone
    node_slots.release_all(run_dir, keep=_maybe_running(run_dir, plan, rid, errors))
    if errors:
        raise teardown.TeardownIncomplete("sweep", errors)
    return killed


def _maybe_running(run_dir: str, plan: Plan, rid: str, errors: dict[str, str]) -> set[str]:
    """Targets whose nodes the sweep could not see gone. An error names a provider ("vultr") or a place or
    node in it ("vultr:<id>"): a recorded node id keeps its own target's slot; anything else (the cloud, a
    region not searched, a tagged node no record names) keeps the slot of every target on that provider."""

    owner = {i: t.slug for t in plan.targets for i in teardown.recorded_ids(run_dir, plan.name, rid, t.slug)}
    keep: set[str] = set()
    for where in errors:
        provider, _, what = where.partition(":")
        if what in owner:
            keep.add(owner[what])
        else:
            keep |= {t.slug for t in plan.targets if t.provider == provider}
    return keep
