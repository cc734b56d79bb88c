"""Accuracy gate: does the target serve the model correctly, not just fast?

``run_gate`` runs after deploy and before the benchmark: the evaluation set, greedily, against
the target's /v1/completions, one score and every answer written to ``accuracy.json``.
The pass rule needs every target's score when the reference is "best target in the run", so
``judge`` is applied later, by validation, over all targets' documents. ``agreement`` compares
the same items across targets: numeric drift from quantised kernels shows up there first.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING, Any

import httpx

from bakeoff import tokens
from bakeoff.core.endpoint import Endpoint
from bakeoff.quality import evalset
from bakeoff.quality.lm_eval_backend import evaluate as lm_eval_evaluate
from bakeoff.serving import egress
from bakeoff.store import StorePath, at, write_json

if TYPE_CHECKING:
    from bakeoff.plan import Plan
    from bakeoff.plan.settings import Accuracy
    from bakeoff.plan.target import Target

FILE = "accuracy.json"


def run_gate(
    endpoint: Endpoint, api_key: str | None, target: Target, plan: Plan, out_dir: str | StorePath
) -> dict[str, Any]:
    """Score target's endpoint on the plan's evaluation set; write and return out_dir/accuracy.json.

    The document holds no verdict (see ``judge``) and never the API key.
    """
    acc = plan.quality.accuracy
    started = time.time()
    if acc.backend == "lm_eval":
        result = lm_eval_evaluate(endpoint, api_key, acc)
    else:
        items = evalset.build(acc.eval_size, acc.seed)
        answers = asyncio.run(_ask_all(endpoint, api_key, items, acc))
        result = {
            "eval_set": {
                "name": evalset.NAME,
                "size": len(items),
                "seed": acc.seed,
                "fingerprint": evalset.fingerprint(items),
            },
            "items": answers,
        }
    doc = _summarise(result["items"]) | {
        "target": target.slug,
        "target_name": target.name,
        "model": endpoint.model,
        "stack": endpoint.stack,
        "emulated": endpoint.emulated,
        "backend": acc.backend,
        "eval_set": result["eval_set"],
        "max_tokens": acc.max_tokens,
        "temperature": 0,
        "started_at": started,
        "duration_s": round(time.time() - started, 3),
        "items": result["items"],
    }
    write_json(at(out_dir) / FILE, doc)
    return doc


def _summarise(items: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(items)
    correct = sum(1 for it in items if it["correct"])
    counted = [it["output_tokens"] for it in items if it.get("output_tokens") is not None]
    return {
        "n": n,
        "correct": correct,
        "score": correct / n if n else 0.0,
        "errors": sum(1 for it in items if it.get("error")),
        "mean_output_tokens": sum(counted) / len(counted) if counted else None,
    }


CONNECT_TIMEOUT_S = 10.0  # a connection not made by then will not be made: each request's own limit is for answers


class EndpointUnreachable(RuntimeError):
    """The gate's first requests all failed before any answer came: the endpoint does not answer from here."""


async def _ask_all(
    endpoint: Endpoint, api_key: str | None, items: list[evalset.Item], acc: Accuracy
) -> list[dict[str, Any]]:
    """Every item asked, ``acc.concurrency`` at a time, each request bounded by ``acc.request_timeout_s``
    (its connection by CONNECT_TIMEOUT_S). Once a full round of requests has failed in transport
    (refused, timed out, reset) with no answer before them, the rest are not sent: EndpointUnreachable
    names the endpoint and the error, instead of every item waiting out its timeout in turn. Until the
    first round is decided (an answer came, or the whole round failed), no request past it starts: its
    failures may arrive one by one, and a slot freed by the first must not send a second round."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=acc.concurrency, max_keepalive_connections=acc.concurrency)
    gate = asyncio.Semaphore(acc.concurrency)
    failed: list[str] = []  # transport errors while nothing has answered
    answered = False
    decided = asyncio.Event()  # the first round answered at least once, or failed whole
    async with egress.async_client(
        base_url=endpoint.base_url,
        headers=headers,
        limits=limits,
        timeout=httpx.Timeout(acc.request_timeout_s, connect=min(CONNECT_TIMEOUT_S, acc.request_timeout_s)),
        verify=endpoint.verify(),
    ) as client:

        async def one(index: int, item: evalset.Item) -> dict[str, Any]:
            nonlocal answered
            if index >= acc.concurrency:
                await decided.wait()
            async with gate:
                if not answered and len(failed) >= acc.concurrency:
                    raise EndpointUnreachable(
                        f"accuracy gate: {endpoint.base_url} did not answer any of the first {len(failed)} "
                        f"requests (last: {failed[-1]}); not sending the other {len(items) - len(failed)}"
                    )
                out, transport_failed = await _ask(client, endpoint.model, item, acc.max_tokens)
            if transport_failed:
                failed.append(str(out["error"]))
                if len(failed) >= acc.concurrency:
                    decided.set()
            else:
                answered = True
                decided.set()
            return out

        try:
            async with asyncio.TaskGroup() as tasks:  # the first EndpointUnreachable cancels the rest
                asked = [tasks.create_task(one(i, it)) for i, it in enumerate(items)]
        except* EndpointUnreachable as e:
            raise e.exceptions[0] from None
        return [t.result() for t in asked]


async def _ask(
    client: httpx.AsyncClient, model: str, item: evalset.Item, max_tokens: int
) -> tuple[dict[str, Any], bool]:
    """One greedy completion; a failed request is a wrong answer with its error recorded. The flag:
    it failed in transport (no answer at all came back)."""
    body = {
        "model": model,
        "prompt": item.prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stop": ["\n"],
        "stream": False,
    }
    out: dict[str, Any] = {
        "id": item.id,
        "expected": item.answer,
        "answer": None,
        "correct": False,
        "text": None,
        "output_tokens": None,
        "finish_reason": None,
        "error": None,
    }
    try:
        resp = await client.post("/v1/completions", json=body)
        resp.raise_for_status()
        data = resp.json()
        choice = data["choices"][0]
        text = choice.get("text") or ""
        usage = data.get("usage") or {}
        out.update(
            text=text,
            finish_reason=choice.get("finish_reason"),
            output_tokens=usage.get("completion_tokens", tokens.count(text)),
        )
        out["answer"] = evalset.parse_answer(text)
        out["correct"] = out["answer"] == item.answer
    except httpx.HTTPStatusError as e:
        out["error"] = f"HTTP {e.response.status_code}"
    except httpx.TransportError as e:
        out["error"] = f"{type(e).__name__}: {e}"[:200]
        return out, True
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
        out["error"] = f"{type(e).__name__}: {e}"[:200]
    return out, False


# --- verdicts over all targets -------------------------------------------------------------


def reference(plan: Plan, docs: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The reference score and output length the plan's rule yields for this run's documents."""
    acc = plan.quality.accuracy
    scored = {slug: d for slug, d in docs.items() if d}
    best = max(scored, key=lambda s: scored[s]["score"], default=None)
    if acc.reference == "best":
        ref = {"rule": "best target in the run", "target": best, "score": scored[best]["score"] if best else None}
        if len(scored) == 1:
            ref["note"] = (
                "only one target was scored, so 'best' compares it with itself; "
                "set quality.accuracy.reference to a number to gate a single target"
            )
    else:
        ref = {"rule": "fixed", "target": None, "score": float(acc.reference)}
    if acc.reference_output_tokens is not None:
        ref["output_tokens"], ref["output_tokens_from"] = acc.reference_output_tokens, "plan"
    else:
        ref["output_tokens"] = scored[best]["mean_output_tokens"] if best else None
        ref["output_tokens_from"] = best
    return ref


def floors(plan: Plan) -> dict[str, dict[str, Any]]:
    """Per target slug: the catalog's floor for its model, the score the gate needs from it, and where it is from.

    Only the built-in set has a recorded floor (an lm-eval task scores on another scale), so a run on
    ``backend: lm_eval`` gets none and is judged relative to its targets only.
    """
    acc = plan.quality.accuracy
    if acc.backend != "builtin":
        return {}
    out = {}
    for t in plan.targets:
        f = t.model_spec.accuracy_floor
        out[t.slug] = {
            "model": t.model,
            "score": f.score,
            "need": acc.min_score_ratio * f.score,
            "eval_set": f.eval_set,
            "source": f.source,
            "as_of": f.as_of,
        }
    return out


def _below_floor(doc: dict[str, Any], floor: dict[str, Any] | None, ratio: float) -> list[str]:
    """The floor's failure, if the target scored below it on the set the floor was measured on."""
    if not floor or (doc.get("eval_set") or {}).get("name") != floor["eval_set"]:
        return []
    if doc["score"] >= floor["need"] - 1e-12:
        return []
    return [
        f"accuracy: score {doc['score']:.3f} ({doc['correct']}/{doc['n']}) is below the floor for {floor['model']}: "
        f"{ratio:.0%} of {floor['score']:.3f}, the score a correct deployment gets on {floor['eval_set']} "
        f"(models.yaml accuracy_floor, {floor['as_of']}) = {floor['need']:.3f}, whatever the other targets scored"
    ]


def judge(plan: Plan, docs: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """Pass/fail per target: score >= ratio x the model's catalog floor and >= ratio x reference, mean output
    tokens within the tolerance. The floor fails a run whose targets are all broken the same way."""
    acc = plan.quality.accuracy
    ref = reference(plan, docs)
    floor = floors(plan)
    verdicts = {}
    for slug, doc in docs.items():
        if not doc:
            verdicts[slug] = {
                "passed": False,
                "score": None,
                "mean_output_tokens": None,
                "failures": ["accuracy: the gate did not run for this target (no accuracy.json)"],
            }
            continue
        failures = _below_floor(doc, floor.get(slug), acc.min_score_ratio)
        need = acc.min_score_ratio * (ref["score"] or 0.0)
        if not ref["score"]:
            failures.append(
                "accuracy: the reference score is 0 (no target answered any item correctly), "
                "so no target can be shown to serve the model correctly"
            )
        elif doc["score"] < need - 1e-12:
            ref_name = f"target {ref['target']}" if ref["target"] else "the plan's fixed reference"
            failures.append(
                f"accuracy: score {doc['score']:.3f} ({doc['correct']}/{doc['n']}) is below "
                f"{acc.min_score_ratio:.0%} of {ref['score']:.3f} ({ref_name}) = {need:.3f}"
            )
        mean, ref_tok = doc.get("mean_output_tokens"), ref["output_tokens"]
        if mean is None:
            failures.append("accuracy: no output token counts recorded (every request failed?)")
        elif ref_tok and abs(mean - ref_tok) > acc.output_tokens_tolerance * ref_tok + 1e-12:
            failures.append(
                f"accuracy: mean output tokens {mean:.2f} is outside +-{acc.output_tokens_tolerance:.0%} "
                f"of the reference {ref_tok:.2f} (from {ref['output_tokens_from']})"
            )
        verdicts[slug] = {
            "passed": not failures,
            "score": doc["score"],
            "n": doc["n"],
            "correct": doc["correct"],
            "mean_output_tokens": mean,
            "failures": failures,
        }
    return {"reference": ref, "floors": floor, "targets": verdicts}


def agreement(docs: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """Share of identical parsed answers for every pair of targets, over the items both answered."""
    answers = {slug: {it["id"]: it["answer"] for it in d["items"]} for slug, d in docs.items() if d}
    sets = {slug: (d.get("eval_set") or {}).get("fingerprint") for slug, d in docs.items() if d}
    pairs = []
    for a, b in itertools.combinations(sorted(answers), 2):
        common = answers[a].keys() & answers[b].keys()
        same = sum(1 for i in common if answers[a][i] == answers[b][i])
        pairs.append(
            {
                "a": a,
                "b": b,
                "n": len(common),
                "agree": same,
                "rate": same / len(common) if common else None,
                "same_eval_set": sets[a] == sets[b],
            }
        )
    rates = [p["rate"] for p in pairs if p["rate"] is not None]
    return {"pairs": pairs, "min_rate": min(rates) if rates else None}
