"""Budget guard: refuse a run whose estimated spend exceeds the plan's cap, before anything starts.

estimate per target = guard price x ((boot + model load) x (1 + MARGIN) + (accuracy gate + planned
benchmark) x (1 + serving margin)), where model load = image pull + weights download (checkpoint GB /
WEIGHTS_GBPS) + engine start. The serving time (gate and benchmark) is the calibrated twin's prediction
(bakeoff.twin: the emulator's roofline times efficiencies fitted on public MLPerf results), its margin
the twin's own p90 error on rows it never saw; a target the twin has no calibration for (a GPU with no
published row, a model of no calibrated kind) falls back to the pessimistic model below with MARGIN.

The guard price is the higher of the catalog list price and any contract price (``guard_usd_per_hour``):
a contract price changes the cost report, never what the guard lets start, because a mistyped or
forged 0.0001 USD/h must not pass a plan the cloud then bills at list price. The cap itself cannot
exceed the installation's ceiling (Airflow Variable ``bakeoff_budget_ceiling_usd``), which a trigger
cannot raise.

The same per-target hours arm each node's kill switch (the boot script's shutdown timer), so a node
can never bill much past what the guard approved, even if Airflow dies. A re-provision (a retry, or a
cleared task) re-checks the run's spend so far plus what remains (``recheck``).
Emulated (local) targets are priced as the hardware they stand for, so a demo shows what the real
run would cost, but they spend nothing. After termination, ``record_measured_cost`` stores what the
evaluation itself cost: launch-to-termination time x price, per target, with the share spent fetching
and loading the weights (measured; never part of benchmark time) attributed beside it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from bakeoff import catalog, store
from bakeoff.core.facts import EvaluationCost, RunFacts
from bakeoff.core.numbers import as_float
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan.precision import QUANT_BYTES
from bakeoff.plan.settings import MAX_BUDGET_USD

if TYPE_CHECKING:
    from bakeoff.bench.sessions.session_sources import Session
    from bakeoff.catalog import InstanceType
    from bakeoff.plan import Plan
    from bakeoff.plan.target import Target
    from bakeoff.plan.workload import Sessions, Workload
    from bakeoff.store import StorePath

log = logging.getLogger(__name__)

# Model load: image pull + weights download + engine start (weights read from NVMe, graph capture / compilation).
IMAGE_PULL_H = 0.1
# Weights download: the checkpoint's size (catalog params x bytes per weight of the quantization) at an
# assumed sustained rate. Plain Python downloads from the hub top out near 0.5 GB/s: hf_transfer is "a power
# user tool, to go beyond ~500MB/s on very high bandwidth network" (github.com/huggingface/hf_transfer README,
# read 2026-11-30). Assumed for every run, though an in-region S3 mirror is usually faster: the estimate
# cannot know whether the mirror holds the checkpoint yet.
WEIGHTS_GBPS = 0.5
WEIGHTS_GBPS_SOURCE = "hf_transfer README (github.com/huggingface/hf_transfer): hub downloads near 500 MB/s, 2026-11-30"
ENGINE_START_H = 0.15
MARGIN = 0.25

# Serving-time model (deliberately pessimistic; see _closed_s).
TOKEN_S = 0.05  # decode time per output token of a sequence running alone
DECODE_KNEE = 64  # batch size at which a decode step takes twice as long as alone
PREFILL_TOKEN_S = 0.0005  # prompt processing, s per input token (2,000 tokens/s), one prompt at a time
# The accuracy gate's prompts: the builtin arithmetic set is a short question; lm-eval tasks are
# few-shot prompts. Item counts of lm-eval tasks run without a limit: known ones, else a large default.
BUILTIN_PROMPT_TOKENS = 64
LM_EVAL_PROMPT_TOKENS = 2048
LM_EVAL_GEN_TOKENS = 256  # lm_eval_backend asks for max(max_tokens, 256)
LM_EVAL_ITEMS = {"gsm8k": 1319}
LM_EVAL_DEFAULT_ITEMS = 15000

# Caps. MAX_BUDGET_USD (a plan field's bound, declared with the plan) bounds any plan or trigger; the
# installation ceiling, at most that, is what a run may actually ask for.
CEILING_VARIABLE = "bakeoff_budget_ceiling_usd"
CEILING_ENV = "BAKEOFF_BUDGET_CEILING_USD"  # the same ceiling for runs without Airflow (bakeoff run)
DEFAULT_CEILING_USD = 1000.0


class BudgetExceeded(RuntimeError):
    """The plan would cost more than its cap; the message carries the breakdown."""


# --- prices ---------------------------------------------------------------------------------------


def reference_usd_per_hour(instance: InstanceType) -> float | None:
    """A list price for an instance type the catalog does not price: the dearest catalog offer of
    the same GPU, per GPU, times this node's GPUs; None when no offer of that GPU is priced."""
    per_gpu = [
        it.usd_per_hour / it.gpus
        for it in catalog.instance_types().values()
        if it.gpu == instance.gpu and it.usd_per_hour
    ]
    return max(per_gpu) * instance.gpus if per_gpu else None


def guard_usd_per_hour(target: Target) -> float:
    """The price the guard budgets a target at: max(catalog list price, contract price).

    The contract price (plan, price sheet or trigger form) is what the cost report uses; the guard
    never goes below list, since a wrong contract price must not let a run start that the cloud
    bills at list. An instance without a catalog price is listed at ``reference_usd_per_hour``.
    A static endpoint is priced at its contract price alone: bakeoff launches nothing there, so no
    cloud bills it at list (and one described by ``hardware`` has no list price at all). A target with
    several offers (``instance_types``) is budgeted at its dearest, whichever the cloud ends up giving."""
    offers = target.offers
    if len(offers) > 1:
        return max(guard_usd_per_hour(target.ran_as(x)) for x in offers)
    if not PROVIDERS[target.provider].launches:
        return target.usd_per_hour
    listed = target.instance.usd_per_hour
    if listed is None:
        listed = reference_usd_per_hour(target.instance)
    # a cluster target bills every one of its nodes
    return max(x for x in (listed, target.usd_per_hour) if x is not None) * target.nodes


def resolve_ceiling(value: object = None) -> float:
    """The installation ceiling: the Airflow Variable's raw value, else $BAKEOFF_BUDGET_CEILING_USD,
    else the default. Only whoever runs the installation sets either; a trigger cannot."""
    if value is None or (isinstance(value, str) and not value.strip()):
        value = os.environ.get(CEILING_ENV) or None
    if value is None:
        return DEFAULT_CEILING_USD
    c = as_float(value)
    if isinstance(value, bool) or not math.isfinite(c) or not 0 < c <= MAX_BUDGET_USD:
        raise BudgetExceeded(
            f"{CEILING_VARIABLE}: {str(value)[:40]!r} is not a usable spend ceiling; set the Airflow Variable "
            f"(or {CEILING_ENV}) to a number of USD greater than 0 and at most {MAX_BUDGET_USD:g} "
            f"(e.g. {DEFAULT_CEILING_USD:g}), or delete it to use the default"
        )
    return c


# --- time -----------------------------------------------------------------------------------------


def decode_token_s(concurrency: float) -> float:
    """Seconds per output token of each sequence when ``concurrency`` sequences decode together."""
    return TOKEN_S * (1 + (max(concurrency, 1) - 1) / DECODE_KNEE)


class Timing(Protocol):
    """How long a server takes: prompt tokens prefilled, and one output token per sequence at a concurrency."""

    def prefill_s(self, tokens: float) -> float: ...
    def decode_s(self, concurrency: float, in_len: int, out_len: int) -> float: ...


class _Pessimistic:
    """The fallback for a target the twin has no calibration for: PREFILL_TOKEN_S and decode_token_s."""

    basis = "pessimistic"

    def prefill_s(self, tokens: float) -> float:
        return tokens * PREFILL_TOKEN_S

    def decode_s(self, concurrency: float, in_len: int, out_len: int) -> float:
        return decode_token_s(concurrency)


PESSIMISTIC: Timing = _Pessimistic()


def _closed_s(n: int, c: int, in_len: int, out_len: int, tm: Timing = PESSIMISTIC) -> float:
    """n requests, c at a time, as ceil(n / c) waves. Pessimistic model: in each wave the c prompts
    are prefilled one after another (c x in_len x PREFILL_TOKEN_S, never overlapped with decode),
    then all c decode out_len tokens at decode_token_s(c): a decode step slows linearly with the
    batch, so throughput saturates at DECODE_KNEE / TOKEN_S tokens/s, far below any catalog GPU."""
    c = max(1, min(int(c), max(int(n), 1)))
    wave = tm.prefill_s(c * in_len) + out_len * tm.decode_s(c, in_len, out_len)
    return math.ceil(n / c) * wave if n > 0 else 0.0


def _lengths(w: Workload) -> tuple[int, int]:
    """The longest input and output a workload may sample (the estimate prices the worst case)."""
    return w.length_bounds(w.input_len)[1], w.length_bounds(w.output_len)[1]


def _point_s(
    w: Workload, tm: Timing = PESSIMISTIC, *, concurrency: float | None = None, rate: float | None = None
) -> float:
    """One point's planned duration.

    Closed loop: warm-up plus measured requests at ``concurrency`` (_closed_s). Open loop: the longer
    of the arrivals (n / rate) plus the last request's latency, and the same n requests served at the
    concurrency that may build up (max_concurrency, else all n in flight): a server slower than the
    rate queues them. max_point_s caps the sending; what is in flight then still finishes."""
    in_len, out_len = _lengths(w)
    if rate:
        n = w.requests_per_point or max(10, int(30 * rate))
        c = min(n, w.max_concurrency or n)
        last = tm.prefill_s(in_len) + out_len * tm.decode_s(c, in_len, out_len)
        total = max(n / rate + last, _closed_s(n, c, in_len, out_len, tm))
        warm = 0.0
    else:
        c = int(concurrency or 1)
        total = _closed_s(w.requests_at(c), c, in_len, out_len, tm)
        warm = _closed_s(w.warmup_at(c), c, in_len, out_len, tm)
    if w.max_point_s:
        total = min(total, w.max_point_s + _closed_s(c, c, in_len, out_len, tm))
    return warm + total


def _trace_s(w: Workload, tm: Timing = PESSIMISTIC) -> float:
    """Replay: the last offset plus its latency, or, if longer, the trace's requests served at the
    concurrency that may build up (max_concurrency, else all at once)."""
    from bakeoff.bench.client.workloads import trace_specs  # noqa: PLC0415 - httpx (bench.client.workloads) only for trace workloads

    offsets, specs = trace_specs(w)
    n = len(specs)
    c = min(n, w.max_concurrency or n)
    in_len = max(s.input_len for s in specs)
    out_len = max(s.output_len for s in specs)
    last = tm.prefill_s(in_len) + out_len * tm.decode_s(c, in_len, out_len)
    total = max(float(offsets[-1]) + last, _closed_s(n, c, in_len, out_len, tm))
    return min(total, w.max_point_s + _closed_s(c, c, in_len, out_len, tm)) if w.max_point_s else total


def _session_s(sess: Session, c: float, tm: Timing = PESSIMISTIC) -> float:
    """One session (its subagents beside it) when ``c`` sessions share the server: every turn's whole
    prompt prefilled (no cache credit: the estimate prices the worst case), its output decoded at
    decode_token_s(c), plus its think time; subagents add their prefill, not their wall time."""
    return sum(
        tm.prefill_s(t.input_tokens)
        + t.output_tokens * tm.decode_s(c, t.input_tokens, t.output_tokens)
        + float(t.think_s or 0.0)
        for t in sess.turns
    )


def _sessions_s(w: Workload, cfg: Sessions, tm: Timing = PESSIMISTIC) -> float:
    """A session workload's points. Closed loop at c sessions: warm-up sessions, then the measured
    ones, each wave of c taking its longest session plus the other c - 1 sessions' prefill (prompts
    queue for prefill, _closed_s's pessimism); duration_s cuts the measured part (the turns in flight
    then finish). Open loop at rate r: the last arrival plus the longest session, or the closed-loop
    time with every session in flight, whichever is longer."""
    from bakeoff.bench.load.session_load import point_sessions  # noqa: PLC0415 - budget imports bench lazily
    from bakeoff.bench.sessions.workload import load_sessions  # noqa: PLC0415 - as _trace_s does

    chosen = point_sessions(load_sessions(w, w.seed), cfg.warmup_sessions, cfg.max_sessions_per_point)
    kids: dict[str, list[Session]] = {}
    for s in chosen:
        if s.parent is not None:
            kids.setdefault(s.parent, []).append(s)

    def tree(s: Session, c: float) -> float:
        prefill = sum(tm.prefill_s(t.input_tokens) for k in kids.get(s.id, []) for t in k.turns)
        return _session_s(s, c, tm) + prefill

    roots = [s for s in chosen if s.parent is None]
    warm, measured = roots[: cfg.warmup_sessions], roots[cfg.warmup_sessions :]
    longest_turn = max((tm.prefill_s(t.input_tokens) for s in chosen for t in s.turns), default=0.0)
    longest_in = max((t.input_tokens for s in chosen for t in s.turns), default=0)

    def closed(group: list[Session], c: int) -> float:
        c = max(1, min(c, max(len(group), 1)))
        total = 0.0
        for i in range(0, len(group), c):
            wave = [tree(s, c) for s in group[i : i + c]]
            prefill = sum(tm.prefill_s(t.input_tokens) for s in group[i : i + c] for t in s.turns)
            total += max(wave) + prefill
        return total

    longest_output = max((t.output_tokens for s in chosen for t in s.turns), default=0)

    def bounded(total: float, c: int) -> float:
        if not cfg.duration_s:
            return total
        return min(total, cfg.duration_s + longest_turn + longest_output * tm.decode_s(c, longest_in, longest_output))

    out = 0.0
    for c in cfg.concurrent_sessions:
        out += closed(warm, c) + bounded(closed(measured, c), c)
    for r in cfg.session_rates:
        n = len(roots)
        longest = max((tree(s, n) for s in roots), default=0.0)
        out += bounded(max(n / r + longest, closed(roots, n)), n)
    return out


def _workload_s(w: Workload, tm: Timing = PESSIMISTIC) -> float:
    if w.sessions is not None:  # kind: sessions (the plan holds the block there and only there)
        return _sessions_s(w, w.sessions, tm)
    if w.load == "rate":
        return sum(_point_s(w, tm, rate=r) for r in w.rates)
    if w.load == "trace":
        return _trace_s(w, tm)
    # every probe may run, each no longer than one at the highest load (the plan fills sla in for load: sla)
    if w.load == "sla" and w.sla is not None:
        top = {"rate": {"rate": w.sla.max}}.get(w.sla.over, {"concurrency": w.sla.max})
        return w.sla.max_probes * _point_s(w, tm, **top)
    return sum(_point_s(w, tm, concurrency=c) for c in w.levels())


def _capacity_s(plan: Plan, w: Workload, tm: Timing = PESSIMISTIC) -> float:
    """The capacity search at SLO tiers (bench.load.capacity): its whole budget of points may run, each no
    longer than one at the search's highest load; nothing without tiers."""
    if not plan.slo_tiers:
        return 0.0
    cap = plan.capacity
    if w.sessions is not None:
        top = w.sessions.model_copy(update={"concurrent_sessions": [cap.max], "session_rates": []})
        return cap.points * _sessions_s(w, top, tm)
    return cap.points * _point_s(w, tm, concurrency=cap.max)


def bench_hours(plan: Plan, target: Target, tm: Timing = PESSIMISTIC) -> float:
    """Planned benchmark time over every workload and repeat, and the capacity search's points
    (pessimistic unless ``tm`` says otherwise)."""
    return sum(_workload_s(w, tm) * w.repeats + _capacity_s(plan, w, tm) for w in plan.workloads) / 3600


def gate_hours(plan: Plan, tm: Timing = PESSIMISTIC) -> float:
    """The accuracy gate: its items at its concurrency, greedy, up to max_tokens each (lm-eval
    generates at least LM_EVAL_GEN_TOKENS); nothing when the gate is off."""
    acc = plan.quality.accuracy
    if not acc.enabled:
        return 0.0
    if acc.backend == "lm_eval":
        n = sum(acc.lm_eval_limit or LM_EVAL_ITEMS.get(task, LM_EVAL_DEFAULT_ITEMS) for task in acc.lm_eval_tasks)
        gen = max(acc.max_tokens, LM_EVAL_GEN_TOKENS)
        return _closed_s(n, acc.concurrency, LM_EVAL_PROMPT_TOKENS, gen, tm) / 3600
    return _closed_s(acc.eval_size, acc.concurrency, BUILTIN_PROMPT_TOKENS, acc.max_tokens, tm) / 3600


def checkpoint_gb(target: Target) -> float:
    """The checkpoint's size: catalog parameters x bytes per weight of the target's quantization."""
    return target.model_spec.params_b * QUANT_BYTES[target.quantization]


def download_hours(target: Target) -> float:
    """The weights download at WEIGHTS_GBPS; nothing for a node that already serves (or an emulator)."""
    if not PROVIDERS[target.provider].provisions:
        return 0.0
    return checkpoint_gb(target) / WEIGHTS_GBPS / 3600


def load_hours(target: Target) -> float:
    """Image pull, weights download and engine start; nothing for a node that already serves."""
    if not PROVIDERS[target.provider].provisions:
        return 0.0
    return IMAGE_PULL_H + download_hours(target) + ENGINE_START_H


def timing(target: Target) -> tuple[Timing, float, str]:
    """(serving timing, its margin, where it comes from): the calibrated twin's prediction (margin: its
    own p90 error on rows it never saw), else the pessimistic model with MARGIN and the twin's reason."""
    from bakeoff.twin.target import NoCalibration, twin_for  # noqa: PLC0415 - numpy only when estimating

    tw = twin_for(target)
    if isinstance(tw, NoCalibration):
        return PESSIMISTIC, MARGIN, f"pessimistic ({tw.reason})"
    return tw, tw.margin, f"twin ({tw.basis}; margin {tw.margin:.0%}, its p90 error)"


def target_hours(plan: Plan, target: Target) -> float:
    """Budgeted node hours: (boot + model load) x (1 + MARGIN) + (accuracy gate + benchmark) x (1 + the
    serving timing's margin), the serving time predicted by the twin where it has a calibration."""
    boot = PROVIDERS[target.provider].boot_h
    tm, margin, _ = timing(target)
    serve = gate_hours(plan, tm) + bench_hours(plan, target, tm)
    return (boot + load_hours(target)) * (1 + MARGIN) + serve * (1 + margin)


def pessimistic_hours(plan: Plan, target: Target) -> float:
    """The hours the pessimistic model alone budgets: (boot + load + gate + benchmark) x (1 + MARGIN), the
    estimate for a target the twin has no calibration for (and, for comparison, for any other)."""
    boot = PROVIDERS[target.provider].boot_h
    return (boot + load_hours(target) + gate_hours(plan) + bench_hours(plan, target)) * (1 + MARGIN)


def kill_switch_s(plan: Plan, target: Target) -> float:
    """Seconds after boot at which the node powers itself off: the longer of the twin's budgeted hours
    and the pessimistic model's, capped by max_instance_hours. The twin prices the run; the kill switch
    keeps the pessimistic time, so a node slower than predicted (beyond the twin's margin) still
    finishes its benchmark instead of powering off with a point half-measured."""
    return min(max(target_hours(plan, target), pessimistic_hours(plan, target)), plan.max_instance_hours) * 3600


# --- the guard ------------------------------------------------------------------------------------


def _row(plan: Plan, t: Target) -> dict[str, Any]:
    price = guard_usd_per_hour(t)
    tm, margin, basis = timing(t)
    fixed = (PROVIDERS[t.provider].boot_h + load_hours(t)) * (1 + MARGIN)
    gate, bench = gate_hours(plan, tm), bench_hours(plan, t, tm)
    hours = fixed + (gate + bench) * (1 + margin)  # = target_hours(plan, t)
    return {
        "target": t.name,
        "provider": t.provider,
        "usd_per_hour": price,
        "contract_usd_per_hour": t.usd_per_hour,
        "boot_h": round(PROVIDERS[t.provider].boot_h, 3),
        "load_h": round(load_hours(t), 3),
        "download_h": round(download_hours(t), 3),
        "checkpoint_gb": round(checkpoint_gb(t), 1),
        "gate_h": round(gate, 3),
        "bench_h": round(bench, 3),
        "serving_margin": round(margin, 3),
        "basis": basis,
        "hours": round(hours, 3),
        "usd": round(hours * price, 2),
        # the band's low end: serving time at its prediction, without the margin
        "usd_low": round((fixed + gate + bench) * price, 2),
        "spends": PROVIDERS[t.provider].spends,
        "kill_switch_s": round(kill_switch_s(plan, t)),
    }


def estimate(plan: Plan) -> dict[str, Any]:
    """Per-target hours and spend at the guard price (see the module docstring); ``estimate_low_usd``
    is the same without the serving margin (the band's low end)."""
    rows = [_row(plan, t) for t in plan.targets]
    total = round(sum(r["usd"] for r in rows), 2)
    low = round(sum(r["usd_low"] for r in rows), 2)
    return {
        "cap_usd": plan.budget_usd,
        "estimate_usd": total,
        "estimate_low_usd": low,
        "margin": MARGIN,
        "targets": rows,
    }


def _breakdown(est: dict[str, Any]) -> str:
    return "\n".join(
        f"  {r['target']}: ({r['boot_h']} h boot + {r['load_h']} h model load (weights {r['checkpoint_gb']} GB: "
        f"{r['download_h']} h at {WEIGHTS_GBPS} GB/s)) x {1 + MARGIN} + ({r['gate_h']} h accuracy gate + "
        f"{r['bench_h']} h benchmark) x {1 + r['serving_margin']:g} = {r['hours']} h x {r['usd_per_hour']} USD/h "
        f"= {r['usd']} USD; serving time {r['basis']}"
        + (
            f" (guard price: list, above the contract {r['contract_usd_per_hour']} USD/h)"
            if r["contract_usd_per_hour"] < r["usd_per_hour"]
            else ""
        )
        for r in est["targets"]
    )


def _sane(what: str, values: list[float]) -> None:
    """A negative or non-finite figure (a trace whose time runs backwards, a NaN from a file) would pass
    any cap: refused, never compared."""
    bad = next((v for v in values if not (isinstance(v, (int, float)) and 0 <= v < math.inf)), None)
    if bad is not None:
        raise BudgetExceeded(
            f"budget_usd: {what} came out as {bad!r}, not a finite amount >= 0, so it cannot be held to the cap; "
            "check the workload files (timestamps in order, plain finite numbers) and the recorded launches"
        )


def check(plan: Plan, ceiling_usd: object = None) -> dict[str, Any]:
    """The estimate, or BudgetExceeded naming the field to change. Called before any API call that
    costs money. ``ceiling_usd`` is the installation ceiling's raw value (None = the default)."""
    ceiling = resolve_ceiling(ceiling_usd)
    if plan.budget_usd > ceiling:
        raise BudgetExceeded(
            f"budget_usd: {plan.budget_usd:g} USD exceeds this installation's ceiling of {ceiling:g} USD "
            f"(Airflow Variable {CEILING_VARIABLE}); ask for at most {ceiling:g} USD, "
            "or have an administrator raise the Variable"
        )
    est = estimate(plan) | {"ceiling_usd": ceiling}
    _sane("estimated spend", [est["estimate_usd"], *(r["hours"] for r in est["targets"])])
    lines = _breakdown(est)
    if est["estimate_usd"] > plan.budget_usd:
        raise BudgetExceeded(
            f"budget_usd: estimated spend {est['estimate_usd']} USD exceeds the cap of {plan.budget_usd} USD:\n"
            f"{lines}\n"
            "Raise budget_usd, or drop targets, load levels or requests. Contract prices lower the cost report, "
            "not this estimate: the guard prices every node at least at its catalog list price."
        )
    too_long = [r for r in est["targets"] if r["spends"] and r["hours"] > plan.max_instance_hours]
    if too_long:
        names = ", ".join(f"{r['target']} ({r['hours']} h)" for r in too_long)
        raise BudgetExceeded(
            f"max_instance_hours: {names} would need longer than {plan.max_instance_hours} h, so the "
            f"kill switch would stop it mid-run:\n{lines}\nRaise max_instance_hours or shorten the workload."
        )
    from bakeoff.bench.client.client_cores import warnings  # noqa: PLC0415 - httpx (bench.client.client_cores) only once the plan fits its cap

    for w in warnings(plan):  # logged, not refused: too few client cores cost no money
        log.warning("%s", w)
    return est


# --- re-provisioning ------------------------------------------------------------------------------


def recheck(plan: Plan, slug: str, run: RunFacts, now: float | None = None) -> dict[str, Any]:
    """Before launching a target again (a retry, a cleared task): the run's spend so far (every
    recorded launch to its termination, or to now, at the guard price: ``TargetFacts.billed_hours``)
    plus what remains (this target's full estimate again, the unfinished part of the others') must
    still fit budget_usd."""
    now = time.time() if now is None else now
    again = plan.target(slug)
    spent = remaining = 0.0
    rows = []
    for t in plan.targets:
        price, hours = guard_usd_per_hour(t), target_hours(plan, t)
        facts = run.target(t.slug)
        billed, running = facts.billed_hours(now), facts.running_since()
        if t.slug == again.slug:
            left = hours
        elif running is not None:
            left = max(0.0, hours - (now - running) / 3600)
        else:
            left = 0.0 if facts.launches() else hours
        spent += billed * price
        remaining += left * price
        rows.append(f"  {t.name}: {billed:.3f} h so far + {left:.3f} h to go at {price} USD/h")
    _sane(f"the spend of relaunching {again.name}", [spent, remaining])
    total = round(spent + remaining, 2)
    doc = {
        "cap_usd": plan.budget_usd,
        "spent_usd": round(spent, 2),
        "remaining_usd": round(remaining, 2),
        "total_usd": total,
    }
    if total > plan.budget_usd:
        raise BudgetExceeded(
            f"budget_usd: launching {again.name} again would bring this run to {total} USD ({doc['spent_usd']} USD "
            f"already billed by earlier launches + {doc['remaining_usd']} USD still to run), over the cap of "
            f"{plan.budget_usd} USD:\n" + "\n".join(rows) + "\nStart a new run (with a larger budget_usd, up to the "
            "installation ceiling, if it needs one) rather than re-provisioning this one."
        )
    return doc


def evaluation_cost(plan: Plan, run_dir: str | StorePath) -> pd.DataFrame:
    """Instance hours actually held (launch to termination, from the step records) x node price.

    Emulated and static targets spend nothing; their figure is what the run would have cost on the
    hardware they stand for. A target still without a termination time is counted up to now. The
    weights' share (download + load, measured on the node: deploy.json's ``weights``) is inside those
    hours, never in any benchmark time; ``weights_s`` / ``weights_usd`` attribute it. The hours are
    ``TargetFacts.billed_hours``, every launch of the target (a cleared and retried target billed
    each), the figure the re-provision re-check charges.
    """
    rdir = store.at(run_dir)
    run = store.run_facts(rdir)
    now = time.time()
    rows = []
    for t in plan.targets:
        facts = run.target(t.slug)
        weights = (store.read_json(rdir / f"target={store.safe_name(t.slug)}" / "deploy.json") or {}).get("weights")
        parts = [(weights or {}).get(k) for k in ("download_s", "load_s")]
        weights_s = sum(float(x) for x in parts if x is not None) if weights else float("nan")
        launched = facts.first_launched_at()
        open_ended = launched is not None and facts.running_since() is not None
        hours = facts.billed_hours(now) if launched is not None else float("nan")
        rows.append(
            {
                "target": t.slug,
                "name": t.name,
                "provider": t.provider,
                "launched_at": launched,
                "terminated_at": facts.last_ended_at(),
                "still_running": open_ended,
                "instance_hours": hours,
                "node_usd_per_hour": t.usd_per_hour,
                "usd": hours * t.usd_per_hour if math.isfinite(hours) else float("nan"),
                "weights_s": weights_s,
                "weights_usd": weights_s / 3600 * t.usd_per_hour,
                "spends": PROVIDERS[t.provider].spends,
            }
        )
    return pd.DataFrame(rows)


def record_measured_cost(run_dir: str | Path, plan: Plan) -> dict[str, Any]:
    """After termination: store what the evaluation itself cost (launch to termination x price, per
    target: evaluation_cost) as evaluation_cost.json and as a run record, so it is on record even when
    a later step (cost, report) fails."""
    rdir = store.at(run_dir)
    df = evaluation_cost(plan, rdir)
    rows = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in df.to_dict("records")]
    spent = round(sum(r["usd"] or 0.0 for r in rows if r["spends"]), 2)
    doc = {"usd": spent, "targets": rows, "at": time.time()}
    store.write_json(rdir / "evaluation_cost.json", doc)
    measured = EvaluationCost(usd=spent)
    store.record(rdir, measured.STEP, measured.to_json())
    return doc
