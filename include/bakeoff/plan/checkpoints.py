"""Targets that serve different checkpoints of one model (MXFP4 on MI355X, NVFP4 on Blackwell, FP8).

Each vendor quantizes the same model its own way, and a checkpoint can lose accuracy. Such a
comparison is only fair when the accuracy gate compares the checkpoints with each other: the gate's
``reference: best`` gates every target against the best target's score, so a checkpoint that lost
accuracy is quarantined instead of ranked. A fixed reference score cannot do that (a lossy checkpoint
above the bar ranks beside a better one), so a plan mixing checkpoints of one model is refused a
fixed reference, and the report says plainly which targets serve which checkpoint.
"""

from __future__ import annotations

from bakeoff.plan.settings import Accuracy
from bakeoff.plan.target import Target


def checkpoint_of(target: Target) -> str:
    """The weights repo a target serves (``Target.checkpoint_id``: the model's HF id where a target names none)."""
    return target.checkpoint_id


def differing_checkpoints(targets: list[Target]) -> dict[str, dict[str, list[str]]]:
    """{model: {checkpoint: [target names]}} for each model that the targets serve from more than one checkpoint."""
    by_model: dict[str, dict[str, list[str]]] = {}
    for t in targets:
        by_model.setdefault(str(t.model), {}).setdefault(checkpoint_of(t), []).append(str(t.name))
    return {m: ck for m, ck in by_model.items() if len(ck) > 1}


def check_accuracy_reference(targets: list[Target], reference: float | str, enabled: bool = True) -> None:
    """Refuse a fixed accuracy reference when targets serve different checkpoints of one model."""
    groups = differing_checkpoints(targets)
    if not groups or reference == "best" or not enabled:
        return
    raise ValueError(
        f"quality.accuracy.reference: {reference:g} is a fixed score, but {describe_groups(groups)}; only "
        "reference: best gates each checkpoint against the best target's accuracy (a fixed bar would rank a "
        "checkpoint that lost accuracy beside a better one); set reference: best"
    )


def describe_groups(groups: dict[str, dict[str, list[str]]]) -> str:
    """'targets serve different checkpoints of glm-5.2 (amd/GLM-5.2-MXFP4: mi355x; nvidia/GLM-5.2-NVFP4: b200)'."""
    parts = []
    for model, cks in groups.items():
        served = "; ".join(f"{ck}: {', '.join(names)}" for ck, names in cks.items())
        parts.append(f"{model} ({served})")
    return f"these targets serve different checkpoints of {', '.join(parts)}"


def checkpoint_note(targets: list[Target], accuracy: Accuracy) -> str | None:
    """The report's plain sentence about mixed checkpoints, or None when every model has one checkpoint."""
    groups = differing_checkpoints(targets)
    if not groups:
        return None
    head = describe_groups(groups)
    head = head[0].upper() + head[1:]
    if not accuracy.enabled:
        return (
            f"{head}. The accuracy gate is off (quality.accuracy.enabled: false): a checkpoint that lost accuracy "
            "would be ranked as if it served the same model; enable the gate before relying on the ranking."
        )
    return (
        f"{head}. Each is gated against the best target's accuracy, so a checkpoint that loses accuracy is "
        "quarantined, not ranked."
    )
