"""Software-support matrix: which GPU x serving stack x model x quantization actually worked.

AMD and NVIDIA deployments most often stumble before the first token (image pull, kernel or
quantization unsupported, out of memory), so the report shows how far each combination got:
deployed, ready, accuracy gate, data validation. Read from what the run's steps left on disk;
a missing file means the step never got that far, which is itself the answer. A custom stack shows as
``custom: <name>`` with what its run verified of its declaration and what the matrix cannot say.
"""

from __future__ import annotations

from typing import Any

from bakeoff import engines
from bakeoff.plan import Plan
from bakeoff.plan.target import Target
from bakeoff.quality import accuracy as accuracy_mod
from bakeoff.quality import validate as validate_mod
from bakeoff.store import StorePath, at, read_json


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
                "stack": engines.label(t),
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
                **_custom_checks(t, ready, verdict),
            }
        )
    return sorted(rows, key=lambda r: (r["gpu"], r["stack"], r["model"], r["quantization"], r["target"]))


def _custom_checks(t: Target, ready: bool, verdict: dict[str, Any] | None) -> dict[str, Any]:
    """A custom stack's declaration against what the run showed: verified (the routes readiness asked,
    the benchmark's OpenAI requests once validated) and not verified (what no step of the run checks)."""
    c = t.custom
    if c is None:
        return {}
    verified = [f"image {c.image}", f"command {' '.join(c.command)}"] if ready else []
    if ready:
        verified += [f"health {c.health_route} answered 200", f"readiness {c.readiness_route} listed the model"]
    if verdict is not None and not verdict.get("gx_failures"):
        verified.append("OpenAI completions: the benchmark's requests passed validation")
    tokenize = (
        f"tokenize {c.tokenize_route}: used when it answers a probe, else usage counts"
        if c.tokenize_route
        else "tokenize: none declared, prompts sized from usage counts"
    )
    metrics = (
        f"metrics {c.metrics_route} (prefix {c.metrics_prefix or 'none'}): counters read only under vLLM's or "
        "SGLang's names"
        if c.metrics_route
        else "metrics: no route declared, no server counters"
    )
    keyed = "API key and TLS: the node's front holds both, the stack's own are not used"
    return {"custom_verified": verified, "custom_not_verified": [tokenize, metrics, keyed]}


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
