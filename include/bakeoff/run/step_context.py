"""What a step works in, built once per task from the run's folder: the plan as the run holds it
(``plan.json``, with the hosts ``start_run`` guarded armed again), the run id, and for a target step its
target, serving key and results folder; how a step reaches a provider (with the credentials its caller
resolves) and records its facts.

Every step and every sensor check used to derive these itself (the plan read and validated again, the
start record read for the run id, the key derived); ``with_run`` and ``with_target`` build one context per
call and hand it to the step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from bakeoff import secrets, store
from bakeoff.core import facts
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan import Plan, Target, plan_from_dict
from bakeoff.providers import Provider, get_provider
from bakeoff.providers.credentials import credentials_from_env

P = ParamSpec("P")
R = TypeVar("R")

EGRESS_FILE = "egress.json"  # the plan-chosen hosts every connection checks again (start_run writes it)

# Turns a provider name into its credentials: passed into each step that reaches a provider (the
# DAG passes its Airflow-connection resolver, the CLI and scripts the environment's).
CredentialsFn = Callable[[str], dict[str, Any]]


def provider_for(name: str, credentials: CredentialsFn = credentials_from_env, **options: Any) -> Provider:
    return get_provider(name, credentials=credentials(name), **options)


def run_plan(run_dir: str | store.StorePath) -> Plan:
    """The run's plan; the hosts start_run recorded are guarded at connect time from here on."""
    hosts = (store.read_json(store.at(run_dir) / EGRESS_FILE) or {}).get("guarded_hosts")
    if hosts:
        from bakeoff.serving import egress  # noqa: PLC0415 - httpx only for a run with a guarded static endpoint

        egress.guard(hosts)
    return plan_from_dict(store.read_json(store.at(run_dir) / "plan.json"), source="plan.json")


def serving_key(target: Target, run_id: str) -> str | None:
    """The bearer key for a target's server: an existing endpoint's own key (static), else this
    run's derived key. Never stored or returned by a step."""
    if PROVIDERS[target.provider].existing_endpoint:
        from bakeoff.providers.static import static_api_key  # noqa: PLC0415 - each step loads only the modules it runs

        return static_api_key(target)
    return secrets.api_key(run_id, target.slug)


def run_id_of(run_dir: str | store.StorePath) -> str:
    """The run id its start record holds; FileNotFoundError, saying why, when there is none."""
    run_id = store.run_facts(run_dir).start.run_id
    if not run_id:
        raise FileNotFoundError(
            f"{run_dir}: no start record ({store.STEPS}/{store.START}.json): start_run has not run for this run "
            "dir, or this worker's BAKEOFF_RESULTS points elsewhere than the worker that started it"
        )
    return run_id


@dataclass(frozen=True)
class RunContext:
    """A run-level step's context: the run's folder (as tasks pass it), plan and id."""

    run_dir: str
    plan: Plan
    run_id: str

    @property
    def folder(self) -> store.StorePath:
        return store.at(self.run_dir)

    def serving_keys(self) -> list[str]:
        """Every target's serving key that still resolves (what no published file may hold)."""
        keys = []
        for t in self.plan.targets:
            try:
                key = serving_key(t, self.run_id)
            except secrets.MissingSecret:  # a static endpoint's key no longer resolvable: nothing to look for
                continue
            if key:
                keys.append(key)
        return keys


@dataclass(frozen=True)
class TargetContext(RunContext):
    """A per-target step's context: the run's, and the target, its results folder and its serving key."""

    target: Target

    @property
    def slug(self) -> str:
        return self.target.slug

    @property
    def target_dir(self) -> store.StorePath:
        return store.target_dir(self.plan.name, self.run_id, self.target.slug)

    @functools.cached_property
    def key(self) -> str | None:
        """The target's serving key, derived (or read from its connection) once, when a step first needs it."""
        return serving_key(self.target, self.run_id)

    def record(self, fact: facts.Fact) -> None:
        """Record a target step's typed facts (``bakeoff.core.facts``) as its JSON record."""
        store.record(self.run_dir, fact.STEP, fact.to_json(), slug=self.slug)


def run_context(run_dir: str | store.StorePath) -> RunContext:
    return RunContext(str(run_dir), run_plan(run_dir), run_id_of(run_dir))


def target_context(run_dir: str | store.StorePath, slug: str) -> TargetContext:
    plan = run_plan(run_dir)
    return TargetContext(str(run_dir), plan, run_id_of(run_dir), plan.target(slug))


def with_target(step: Callable[Concatenate[TargetContext, P], R]) -> Callable[Concatenate[str, str, P], R]:
    """A per-target step as the DAG and the CLI call it, ``(run_dir, slug, ...)``: its context (plan,
    target, run id, key, folder) built once for the call and handed to the step."""

    @functools.wraps(step)
    def run(run_dir: str, slug: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return step(target_context(run_dir, slug), *args, **kwargs)

    return run


def with_run(step: Callable[Concatenate[RunContext, P], R]) -> Callable[Concatenate[str, P], R]:
    """A run-level step as the DAG and the CLI call it, ``(run_dir, ...)``, handed its run's context."""

    @functools.wraps(step)
    def run(run_dir: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return step(run_context(run_dir), *args, **kwargs)

    return run
