"""Teardown that one failure cannot block: known ids first, then the run's tag, every provider, errors last.

A node is found two ways. By id: what provision recorded (its step record for the target,
its earlier tries, and the target's instance.json), which needs no listing and no knowledge of
the compartment or region the plan chose. By tag: ``list_tagged(run_id)``, best effort, for a node
whose id was never recorded (a create whose answer was lost). A node found by id is terminated
only if it carries this run's tag, so a tampered record cannot aim teardown at someone else's node.
Every failure is collected and raised once everything else was tried.
"""

from __future__ import annotations

import logging
from typing import Any

from bakeoff import store
from bakeoff.providers.base import Provider, ProviderError, list_best_effort

log = logging.getLogger(__name__)

# A cluster target's nodes carry the target tag ``<slug>--n<i>`` (bakeoff.clusters.cluster): a target's slug
# never holds "--", so one target's teardown finds all its nodes and no other target's.
NODE_SEP = "--"


def of_target(tagged: str, slug: str) -> bool:
    """The instance tagged ``tagged`` is the target's own node, or one node of its cluster."""
    return tagged == slug or tagged.startswith(slug + NODE_SEP)


class TeardownIncomplete(ProviderError):
    """Some node could not be terminated or some place could not be searched; the rest was done."""

    def __init__(self, what: str, errors: dict[str, str]):
        super().__init__(
            f"{what}: "
            + "; ".join(f"{where}: {why}" for where, why in errors.items())
            + ". Everything else was terminated; the reaper retries, or run `python -m bakeoff reap`"
        )
        self.errors = dict(errors)


def recorded_ids(run_dir: str | store.StorePath, plan_name: str, run_id: str, slug: str) -> list[str]:
    """Every instance id the results store holds for this run and target."""
    steps = store.run_facts(run_dir).target(slug)
    ids: list[Any] = []
    if steps.provision is not None:
        ids += [steps.provision.instance_id, *(t.instance_id for t in steps.provision.tries)]
    ids += list(steps.terminate.instances) if steps.terminate else []
    inst = store.read_json(store.target_dir(plan_name, run_id, slug) / "instance.json", {}) or {}
    ids.append(inst.get("id") if isinstance(inst, dict) else None)
    return [i for i in dict.fromkeys(ids) if isinstance(i, str) and i]


def terminate_ids(provider: Provider, run_id: str, ids: list[str], errors: dict[str, str]) -> list[str]:
    """Terminate each id that still exists and carries this run's tag; failures go to ``errors``."""
    done = []
    for iid in ids:
        try:
            cur = provider.describe(iid)
            if cur is None or cur.state == "terminated":
                continue
            if cur.run_id != run_id:
                errors[f"{provider.name}:{iid}"] = (
                    f"not tagged with run {run_id} (tagged {cur.run_id or 'none'}); left alone"
                )
                continue
            if provider.terminate(iid):
                done.append(iid)
        except Exception as e:  # noqa: BLE001 - the next id, and the tag search, must still run
            errors[f"{provider.name}:{iid}"] = f"{type(e).__name__}: {e}"
    return done


def terminate_tagged(
    provider: Provider,
    run_id: str,
    errors: dict[str, str],
    slug: str | None = None,
    skip: set[str] | frozenset[str] = frozenset(),
) -> tuple[list[str], list[str], dict[str, str]]:
    """Terminate what the run's tag finds (one target's, or all), wherever the listing could look.
    Returns (ids found, ids terminated, where the listing could not look); failed terminations go to ``errors``."""
    found, where = list_best_effort(provider, run_id)
    unlisted = {(w if w == provider.name else f"{provider.name}:{w}"): why for w, why in where.items()}
    ids = [i.id for i in found if (slug is None or of_target(i.target, slug)) and i.id not in skip]
    done = []
    for iid in ids:
        try:
            if provider.terminate(iid):
                done.append(iid)
                log.warning("teardown: terminated %s node %s of run %s found by its tag", provider.name, iid, run_id)
        except Exception as e:  # noqa: BLE001
            errors[f"{provider.name}:{iid}"] = f"{type(e).__name__}: {e}"
    return ids, done, unlisted
