"""Software-support matrix: which GPU x serving stack x model x quantization actually worked.

AMD and NVIDIA deployments most often stumble before the first token (image pull, kernel or
quantization unsupported, out of memory), so the report shows how far each combination got:
deployed, ready, accuracy gate, data validation. Read from what the run's steps left on disk;
a missing file means the step never got that far, which is itself the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bakeoff.quality import accuracy as accuracy_mod
from bakeoff.quality import validate as validate_mod
from bakeoff.store import StorePath, at, read_json

if TYPE_CHECKING:
    from bakeoff.plan import Plan
    from bakeoff.plan.target import Target


def support_matrix(plan: Plan, run_dir: str | StorePath) -> list[dict[str, Any]]:
    """One row per target, sorted by (gpu, stack, model, quantization); JSON-able."""
    run_dir = at(run_dir)
    summary = validate_mod.load_summary(run_dir) or {}
    rows = []
    for t in plan.targets:
        tdir = run_dir / f"target={t.slug}"
        instance, endpoint = read_json(tdir / "instance.json"), read_json(tdir / "endpoint.json")
        deploy = read_json(tdir / "deploy.json") or {}
        acc_doc = read_json(tdir / accuracy_mod.FILE)
        verdict = (summary.get("targets") or {}).get(t.slug)
        ready = bool(deploy.get("ready")) if "ready" in deploy else endpoint is not None
        rows.append(
            {
                "gpu": t.gpu.name,
                "stack": t.stack,
                "model": t.model,
                "quantization": t.quantization,
                "checkpoint": t.checkpoint_id,
                "speculative": _speculative(t),
                "kv_offload": _kv_offload(t),
                "target": t.name,
                "slug": t.slug,
                "provider": t.provider,
                "instance_type": t.instance_type,
                "emulated": t.emulated,
                "deployed": instance is not None or bool(deploy),
                "ready": ready,
                "failure": deploy.get("failure") or (None if ready or instance is None else "not ready"),
                "failure_detail": deploy.get("detail"),
                "accuracy": _accuracy_state(plan, acc_doc, verdict),
                "accuracy_score": acc_doc.get("score") if acc_doc else None,
                "gx": "not validated" if verdict is None else ("pass" if not verdict.get("gx_failures") else "fail"),
                "gx_failures": (verdict or {}).get("gx_failures", []),
            }
        )
    return sorted(rows, key=lambda r: (r["gpu"], r["stack"], r["model"], r["quantization"], r["target"]))


def _speculative(t: Target) -> str | None:
    """Method, draft tokens and acceptance mode in one cell, e.g. ``mtp k=3 pinned AL 2.99``."""
    spec = t.speculative
    if spec is None:
        return None
    mode = f"pinned AL {t.pinned_acceptance_length:g}" if spec.acceptance == "pinned" else "real"
    draft = f" draft {spec.draft_model}" if spec.draft_model else ""
    return f"{spec.method} k={spec.num_speculative_tokens} {mode}{draft}"


def _kv_offload(t: Target) -> str | None:
    kv = t.kv_offload
    return None if kv is None else f"{kv.backend} {kv.host_memory_gb:g} GB"


def _accuracy_state(plan: Plan, doc: dict[str, Any] | None, verdict: dict[str, Any] | None) -> str:
    if not plan.quality.accuracy.enabled:
        return "disabled"
    if not doc:
        return "not run"
    if verdict is None or not verdict.get("accuracy"):
        return "not judged"
    return "pass" if verdict["accuracy"]["passed"] else "fail"
