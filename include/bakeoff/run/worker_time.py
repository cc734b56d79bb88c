"""The worker time each per-target step holds, and the wait for callers without a scheduler.

Each long wait is an action and a check: the action (provision, deploy, benchmark) starts something and
returns; the check (node_ready, serving_ready, benchmark_done) looks once and returns None while waiting,
so Airflow's sensor frees the worker between looks. ``since`` is when the wait began: the check enforces
the target's own deadline (a mapped sensor's timeout is one for every target). Every call records the
worker time it held (``held_seconds`` sums it per target).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from bakeoff import store
from bakeoff.paths import safe_name

log = logging.getLogger(__name__)

SLOTS = "slots"


Step = TypeVar("Step", bound=Callable[..., Any])


def holds_slot(task: str) -> Callable[[Step], Step]:
    """Record the worker time each call of a per-target step (run_dir, slug, ...) holds, failed or not."""

    def wrap(step: Step) -> Step:
        @functools.wraps(step)
        def run(run_dir: str, slug: str, *args: Any, **kwargs: Any) -> Any:
            started = time.time()
            try:
                return step(run_dir, slug, *args, **kwargs)
            finally:
                ended = time.time()
                try:
                    store.write_json(
                        store.at(run_dir) / f"target={safe_name(slug)}" / SLOTS / f"{task}-{int(started * 1000)}.json",
                        {"task": task, "started_at": started, "ended_at": ended},
                    )
                except Exception as e:  # noqa: BLE001 - the step's own outcome matters more than its timing
                    log.warning("%s of %s: could not record its worker time: %s", task, slug, e)

        return cast(Step, run)

    return wrap


def held_seconds(run_dir: str) -> dict[str, float]:
    """Worker-slot seconds each target's steps held, from the records ``holds_slot`` wrote."""
    held: dict[str, float] = {}
    for f in store.at(run_dir).glob(f"target=*/{SLOTS}/*.json"):
        rec = store.read_json(f) or {}
        slug = f.parent.parent.name.split("=", 1)[1]
        held[slug] = held.get(slug, 0.0) + float(rec.get("ended_at", 0)) - float(rec.get("started_at", 0))
    return held


def until_done(check: Callable[..., Any], *args: Any, poll_s: float = 0.5, **kwargs: Any) -> Any:
    """Call a check until it returns something: the wait for callers without a scheduler (the CLI)."""
    since = time.time()
    while (out := check(*args, since=since, **kwargs)) is None:
        time.sleep(poll_s)
    return out
