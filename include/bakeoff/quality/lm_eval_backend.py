"""Optional accuracy backend: EleutherAI lm-evaluation-harness (``local-completions``).

For GSM8K and friends where the machine can download datasets and a tokenizer. lm_eval is not a
bakeoff requirement (it pulls torch and datasets); install it yourself (``pip install lm-eval``)
and set ``quality.accuracy.backend: lm_eval`` and ``lm_eval_tasks`` in the plan. Each sample's
first metric (exact_match for generative tasks, acc otherwise) decides "correct"; the filtered
response is the answer compared across targets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bakeoff import tokens

if TYPE_CHECKING:
    from bakeoff.core.endpoint import Endpoint
    from bakeoff.plan.settings import Accuracy


def evaluate(endpoint: Endpoint, api_key: str | None, acc: Accuracy) -> dict[str, Any]:
    if endpoint.tls_cert:  # its HTTP client cannot pin a node's own certificate
        raise RuntimeError(
            "quality.accuracy.backend: lm_eval cannot pin this node's TLS certificate, and the key is never sent "
            "unpinned; use backend: builtin for cloud nodes (lm_eval stays available for local and static targets)"
        )
    try:
        import lm_eval  # noqa: PLC0415 - optional package (pulls torch), not a bakeoff requirement
        from lm_eval.models.openai_completions import LocalCompletionsAPI  # noqa: PLC0415 - optional package
    except ImportError:
        raise RuntimeError(
            "quality.accuracy.backend is 'lm_eval' but the lm_eval package is not installed; "
            "install it (pip install lm-eval) or set quality.accuracy.backend: builtin"
        ) from None

    class _Keyed(LocalCompletionsAPI):
        """The run's key passed directly, not through OPENAI_API_KEY in the worker's environment."""

        @property
        def api_key(self) -> str:
            return api_key or ""

    lm = _Keyed(
        base_url=f"{endpoint.base_url}/v1/completions",
        model=endpoint.model,
        num_concurrent=acc.concurrency,
        tokenized_requests=False,
        tokenizer_backend=None,
        max_gen_toks=max(acc.max_tokens, 256),
        timeout=acc.request_timeout_s,
    )
    out = lm_eval.simple_evaluate(
        model=lm,
        tasks=list(acc.lm_eval_tasks),
        limit=acc.lm_eval_limit,
        log_samples=True,
        gen_kwargs="temperature=0",
        random_seed=acc.seed,
    )
    items = []
    for task, samples in (out.get("samples") or {}).items():
        for s in samples:
            metric = next((m for m in s.get("metrics", []) if m in s), None)
            resp = s.get("resps") or [[""]]
            text = resp[0][0] if resp and resp[0] and isinstance(resp[0][0], str) else ""
            filtered = s.get("filtered_resps") or [None]
            items.append(
                {
                    "id": f"{task}/{s['doc_id']}",
                    "expected": str(s.get("target")),
                    "answer": str(filtered[0]),
                    "correct": bool(metric and s[metric] == 1),
                    "text": text,
                    "output_tokens": tokens.count(text),
                    "finish_reason": None,
                    "error": None,
                }
            )
    return {
        "eval_set": {
            "name": "lm_eval:" + ",".join(acc.lm_eval_tasks),
            "size": len(items),
            "seed": acc.seed,
            "limit": acc.lm_eval_limit,
            "fingerprint": None,
            "lm_eval_version": lm_eval.__version__,
        },
        "items": items,
    }
