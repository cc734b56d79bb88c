"""Planned failures, for rehearsing teardown on purpose (tests, the fault-injection benchmark).

A target opts in with ``provider_options: {inject_fault: <stage>}``; the pipeline calls
``maybe_fail(stage, target)`` at each stage. Only sandbox and local plans should carry this.
"""

from __future__ import annotations

from bakeoff.plan.options import FAULT_STAGES
from bakeoff.plan.target import Target


class InjectedFault(RuntimeError):
    """A failure the plan asked for."""


def check_rehearsal(target: Target, real_cloud: bool) -> None:
    """Refuse a planned failure on a cloud whose nodes are real (no sandbox's ``emulated_nodes``): a
    fault after the create leaves a real, billed node for the teardown to find; rehearse on the local
    provider or a sandbox cloud. Called before the create."""
    wanted = target.provider_options.inject_fault
    if wanted and real_cloud:
        raise InjectedFault(
            f"targets.{target.name}.provider_options.inject_fault: {wanted!r} is for rehearsals on the local "
            f"provider or a sandbox cloud, and {target.provider} here launches real, billed nodes; remove it"
        )


def maybe_fail(stage: str, target: Target) -> None:
    assert stage in FAULT_STAGES, stage
    wanted = target.provider_options.inject_fault
    if wanted == stage:
        raise InjectedFault(f"injected fault at stage {stage!r} for target {target.name!r}")
