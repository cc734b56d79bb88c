"""Per-point summary with the project's metric definitions (vLLM/SGLang/MLPerf naming; docs/metrics.md).

- TTFT: send -> first chunk carrying a generated token (reasoning included); TTFA: first answer text.
- TPOT: per request (E2E - TTFT) / (output tokens - 1); requests with <= 1 output token excluded.
- ITL: gaps between consecutive token chunks (every chunk with choices that carries a token, empty
  text included: vLLM streams byte-fallback tokens as ""), pooled over requests. With multi-token
  chunks a gap is not a per-token latency, so ITL and TPOT are never mixed.
- E2E: send -> last byte. Duration: first measured send -> last measured response (warm-up excluded).
- Throughput per GPU: tokens / duration / GPUs serving the model (target.gpus_used); input tokens
  from usage, else the requested prompt length.
- Input length: requested (what bakeoff sized the prompt to, in the served model's tokens) and
  measured (usage prompt_tokens) means; input_len_error = sum(measured) / sum(requested) - 1 over
  the requests with usage.
- Send lag (open loop): actual send - scheduled send per request; p50/p99/max. TTFT from schedule:
  send lag + TTFT, the latency a user arriving on schedule saw (coordinated omission made visible).
- Interactivity: 1000 / TPOT (p50 by default; Slo.interactivity_stat), tokens/s per user.
- Goodput: requests meeting every per-request SLO per second; good_fraction = good / (succeeded +
  failed). The per-request bounds are the plan's slo.per_request, else each of TTFT, TPOT and E2E's
  highest-percentile bound (plan/slo.py). meets_slo holds when the point's statistics meet every
  percentile bound set, good_fraction reaches per_request.min_share when one is set, and the error
  rate is within max_error_rate when given.
Statistics are mean, p50, p90, p95, p99 (linear interpolation, as numpy and vLLM compute them).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from bakeoff.bench.metrics import server_metrics
from bakeoff.bench.metrics.metric_units import Column, Metric, Point, columns_of, derived, evaluation_order, filled, one
from bakeoff.bench.metrics.records import POINT_KEY, RequestRecord
from bakeoff.core.numbers import as_float
from bakeoff.plan.slo import METRICS, PERCENTILES, RequestTimes, Slo

NAN = float("nan")
# The statistics every per-request figure is summarised by; PERCENTILES are those an SLO may bound.
STATS = ("mean", *PERCENTILES)

# What summarize reads: records, row dicts, or a per-request DataFrame read back from Parquet.
Records: TypeAlias = Iterable[RequestRecord | Mapping[str, Any]] | pd.DataFrame


def _rows(records: Records) -> list[dict[str, Any]]:
    """Records, row dicts or a per-request DataFrame (as read back from Parquet, where missing
    values are pd.NA) as plain dicts with None for missing."""
    if isinstance(records, pd.DataFrame):
        return [{k: (None if v is pd.NA else v) for k, v in row.items()} for row in records.to_dict("records")]
    return [r.to_row() if isinstance(r, RequestRecord) else dict(r) for r in records]


def _num(v: object) -> float | None:
    f = as_float(v)
    return None if math.isnan(f) else f


def stats_ms(values: Iterable[float | None], prefix: str) -> dict[str, float]:
    """mean/p50/p90/p95/p99 in milliseconds of values given in seconds, missing ones skipped (NaN when empty)."""
    a = np.asarray([v for v in values if v is not None], dtype=float) * 1e3
    if a.size == 0:
        return {f"{prefix}_{s}": NAN for s in STATS}
    out = {f"{prefix}_mean": float(a.mean())}
    for p, v in zip(PERCENTILES, np.percentile(a, [float(p[1:]) for p in PERCENTILES]), strict=True):
        out[f"{prefix}_{p}"] = float(v)
    return out


def request_tpot(row: dict[str, Any]) -> float | None:
    """Seconds per output token after the first; None for <= 1-token outputs or failures."""
    out, e2e, ttft = _num(row.get("output_tokens")), _num(row.get("e2e")), _num(row.get("ttft"))
    if row.get("error_kind") or out is None or out <= 1 or e2e is None or ttft is None:
        return None
    return (e2e - ttft) / (out - 1)


def chunk_gaps(offsets: Iterable[float] | None) -> list[float]:
    offs = list(offsets) if offsets is not None else []
    return [b - a for a, b in pairwise(offs)]


def count_method(rows: list[dict[str, Any]]) -> str | None:
    """How a point's output tokens were counted, so a figure from the client's own count is never
    read as the server's: "usage", "client-chunks", "client-words", or several joined by "+"."""
    methods = {
        "usage" if r.get("tokens_source") != "client" else f"client-{r.get('client_count_method') or 'chunks'}"
        for r in rows
    }
    return "+".join(sorted(methods)) or None


def input_lengths(ok: list[dict[str, Any]], *, sized: bool) -> dict[str, float]:
    """Mean requested and measured (usage prompt_tokens) input length of the succeeded requests, and
    measured / requested - 1 over the requests that report usage (NaN when none does, or when the
    prompts are the user's, whose requested length is only a word count)."""
    asked = [float(r.get("requested_input_len") or 0) for r in ok]
    both = [(float(r.get("requested_input_len") or 0), _num(r.get("prompt_tokens"))) for r in ok]
    pairs = [(a, m) for a, m in both if m is not None and a > 0]
    measured = [m for _, m in pairs]
    err = sum(measured) / sum(a for a, _ in pairs) - 1.0 if sized and pairs else NAN
    return {
        "input_len_requested_mean": float(np.mean(asked)) if asked else NAN,
        "input_len_measured_mean": float(np.mean(measured)) if measured else NAN,
        "input_len_error": err,
    }


def send_lag(row: dict[str, Any]) -> float | None:
    """Actual send - scheduled send (s) of an open-loop request; None in closed loop."""
    lag = _num(row.get("send_lag"))
    if lag is None:
        sched, start = _num(row.get("scheduled_offset")), _num(row.get("start_offset"))
        lag = start - sched if sched is not None and start is not None else None
    return lag


def open_loop_figures(measured: list[dict[str, Any]], ok: list[dict[str, Any]]) -> dict[str, float]:
    """Send lag p50/p99/max over the measured requests (from the records, so worker processes pool
    correctly) and TTFT / E2E from the scheduled send (= send lag + TTFT / E2E); empty in closed
    loop, NaN."""
    lags = [x for x in (send_lag(r) for r in measured) if x is not None]
    if not lags:
        return {
            k: NAN
            for k in (
                "send_lag_ms_p50",
                "send_lag_ms_p99",
                "send_lag_ms_max",
                "ttft_from_schedule_ms_p50",
                "ttft_from_schedule_ms_p99",
                "e2e_from_schedule_ms_p99",
            )
        }
    a = np.asarray(lags) * 1e3
    out = {
        "send_lag_ms_p50": float(np.percentile(a, 50)),
        "send_lag_ms_p99": float(np.percentile(a, 99)),
        "send_lag_ms_max": float(a.max()),
    }

    def from_schedule(col: str) -> list[float]:
        pairs = ((send_lag(r), _num(r.get(col))) for r in ok)
        return [lag + v for lag, v in pairs if lag is not None and v is not None]

    ttft = stats_ms(from_schedule("ttft"), "ttft")
    out["ttft_from_schedule_ms_p50"], out["ttft_from_schedule_ms_p99"] = ttft["ttft_p50"], ttft["ttft_p99"]
    out["e2e_from_schedule_ms_p99"] = stats_ms(from_schedule("e2e"), "e2e")["e2e_p99"]
    return out


def _input_tokens(row: dict[str, Any]) -> int:
    """A request's input tokens: usage prompt_tokens, else the requested prompt length."""
    measured = _num(row.get("prompt_tokens"))
    return int(measured if measured is not None else row.get("requested_input_len") or 0)


def request_times(row: dict[str, Any]) -> RequestTimes:
    """A request record's figures in ms, as the SLO judges a request (plan.slo.RequestTimes)."""

    def ms(v: float | None) -> float | None:
        return None if v is None else v * 1e3

    ok = not row.get("error_kind")
    return RequestTimes(ok, ms(_num(row.get("ttft"))), ms(request_tpot(row)), ms(_num(row.get("e2e"))))


def request_is_good(row: dict[str, Any], slo: Slo | None) -> bool:
    """A request meets every per-request bound of the SLO (any succeeded request without one)."""
    if slo is None:
        return not row.get("error_kind")
    return slo.request_is_good(request_times(row))


def point_meets_slo(summary: dict[str, Any], slo: Slo | None, max_error_rate: float | None = None) -> bool:
    if not summary.get("completed"):
        return False
    if max_error_rate is not None and summary["error_rate"] > max_error_rate:
        return False
    return slo is None or slo.meets(summary)


# Prompt-length bin edges (tokens) of the TTFT-by-context summaries: doubling from 1k to 1M.
CONTEXT_EDGES = (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
# Output-token position bin edges of TPOT by position: position p is the p-th output token.
POSITION_EDGES = (2, 17, 65, 257, 1025, 4097, 16385)


def binned_ms(pairs: Iterable[tuple[float, float]], edges: tuple[int, ...]) -> str:
    """JSON list of {lo, hi, n, p50_ms, p99_ms} of (x, seconds) pairs binned on x in [lo, hi);
    the last bin is open-ended (hi null); empty bins are left out."""
    bounds = [*edges, None]
    bins: dict[int, list[float]] = {}
    for x, v in pairs:
        i = max(0, int(np.searchsorted(edges, x, side="right")) - 1)
        bins.setdefault(i, []).append(v)
    out = []
    for i in sorted(bins):
        a = np.asarray(bins[i], dtype=float) * 1e3
        p50, p99 = np.percentile(a, [50, 99])
        out.append({"lo": edges[i], "hi": bounds[i + 1], "n": int(a.size), "p50_ms": float(p50), "p99_ms": float(p99)})
    return json.dumps(out)


def tpot_by_position(ok: list[dict[str, Any]]) -> str:
    """Token gaps binned by the output-token position they end at (chunk k ends token k + 1 when a
    chunk carries one token), pooled over requests: whether decoding slows as the answer grows."""
    pairs = [(float(k + 2), g) for r in ok for k, g in enumerate(chunk_gaps(r.get("chunk_offsets")))]
    return binned_ms(pairs, POSITION_EDGES)


def _slope_ms_per_1k(pairs: list[tuple[float, float]]) -> float:
    """Least-squares slope of TTFT (ms) on uncached tokens, per 1,000 tokens; NaN with < 2 distinct x."""
    if len(pairs) < 2 or len({x for x, _ in pairs}) < 2:
        return NAN
    x = np.asarray([p[0] for p in pairs], dtype=float)
    y = np.asarray([p[1] for p in pairs], dtype=float) * 1e3
    return float(np.polyfit(x, y, 1)[0] * 1000.0)


def session_figures(measured: list[dict[str, Any]], slo: Slo | None, duration: float) -> dict[str, Any]:
    """Session columns of a point from its measured turn records; NaN / None when the point is not a
    session workload. A session (a top-level one with its subagents) is completed when every turn of
    every one of them was sent and answered; cut when the point's time ended it; good when
    completed and every turn met the per-request SLO (request_is_good)."""
    turns = [r for r in measured if r.get("session_id") is not None]
    if not turns:
        return {k: (None if k.startswith("ttft_by") else NAN) for k in SESSIONS}
    by_root: dict[str, list[dict[str, Any]]] = {}
    for r in turns:
        by_root.setdefault(str(r.get("session_root") or r["session_id"]), []).append(r)
    completed = good = cut = 0
    for rows in by_root.values():
        per_session: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            per_session.setdefault(str(r["session_id"]), []).append(r)
        whole = all(len(v) == int(v[0].get("session_turns") or 0) for v in per_session.values())
        if not whole:
            cut += 1
            continue
        if all(not r.get("error_kind") for r in rows):
            completed += 1
            good += all(request_is_good(r, slo) for r in rows)
    ok = [r for r in turns if not r.get("error_kind")]
    hours = duration / 3600.0 if duration and duration > 0 else NAN
    ttft_ctx = [(float(r.get("context_tokens") or 0), float(r["ttft"])) for r in ok if _num(r.get("ttft")) is not None]
    ttft_unc = [
        (float(r["uncached_tokens_expected"]), float(r["ttft"]))
        for r in ok
        if _num(r.get("ttft")) is not None and _num(r.get("uncached_tokens_expected")) is not None
    ]
    return {
        "sessions_completed": completed,
        "sessions_cut": cut,
        "session_goodput_sps": good / duration if duration and duration > 0 else NAN,
        "sessions_per_hour": completed / hours if hours == hours else NAN,
        "turns_per_hour": len(ok) / hours if hours == hours else NAN,
        "turns_per_session_mean": len(turns) / len(by_root),
        "ttft_ms_per_1k_uncached": _slope_ms_per_1k(ttft_unc),
        "ttft_by_context": binned_ms(ttft_ctx, CONTEXT_EDGES),
        "ttft_by_uncached": binned_ms(ttft_unc, CONTEXT_EDGES),
    }


# --- the point's metrics, each declaring its columns (bench.metrics.metric_units) -----------------------


def _stat_columns(prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix}_{s}" for s in STATS)


def _stats(prefix: str, of: str, values: Callable[[Point], Iterable[float | None]]) -> Metric:
    """mean/p50/p90/p95/p99 in ms of a per-request figure in seconds (stats_ms)."""
    cols = tuple(Column(f"{prefix}_{s}", "ms", f"{s} of {of}") for s in STATS)
    return Metric(cols, lambda p, _: stats_ms(values(p), prefix))


def _from_client(name: str, unit: str, formula: str) -> Metric:
    return one(name, unit, formula, lambda p: float(p.client[name]) if p.client.get(name) is not None else NAN)


def _client_flag(name: str, formula: str) -> Metric:
    """A loop monitor's verdict on the client, held only where a request succeeded."""
    return one(name, "bool", formula, lambda p: bool(p.client.get(name, False)) and len(p.ok) > 0)


def _from_prompts(name: str, unit: str, formula: str) -> Metric:
    return one(name, unit, formula, lambda p: p.prompts.get(name))


def _interactivity(p: Point, got: Mapping[str, Any]) -> float:
    stat = p.slo.interactivity_stat if p.slo is not None else "p50"
    tpot = got[f"tpot_ms_{stat}"]
    return 1000.0 / tpot if tpot and not math.isnan(tpot) and tpot > 0 else NAN


def _per_gpu(rate: str) -> Metric:
    """A throughput column per GPU serving the model."""
    return derived(
        f"{rate}_per_gpu", "tok/s/GPU", f"{rate} / gpus", (rate, "gpus"), lambda _, got: got[rate] / got["gpus"]
    )


def _good(p: Point) -> int:
    return sum(1 for r in p.measured if request_is_good(dict(r), p.slo))


def _errors_by_kind(p: Point) -> str:
    return json.dumps(dict(sorted(Counter(str(r["error_kind"]) for r in p.measured if r.get("error_kind")).items())))


def _chunks(p: Point) -> float:
    chunks = sum(int(r.get("chunks") or 0) for r in p.ok)
    return p.output_tokens / chunks if chunks else NAN


OPEN_LOOP = (
    ("send_lag_ms_p50", "ms", "p50 of actual send - scheduled send (open loop; NaN in closed loop)"),
    ("send_lag_ms_p99", "ms", "p99 of the same"),
    ("send_lag_ms_max", "ms", "max of the same"),
    ("ttft_from_schedule_ms_p50", "ms", "p50 of send lag + TTFT: the latency a user arriving on schedule saw"),
    ("ttft_from_schedule_ms_p99", "ms", "p99 of the same"),
    ("e2e_from_schedule_ms_p99", "ms", "p99 of send lag + E2E"),
)
# The session columns (session_figures fills them): NaN / None for single-request points.
SESSIONS = {
    "sessions_completed": ("count", "top-level sessions whose every turn (subagents' too) was sent and answered"),
    "sessions_cut": ("count", "top-level sessions with a turn never sent (the point's time ran out)"),
    "session_goodput_sps": ("sessions/s", "completed sessions whose every turn met the per-request SLO / duration"),
    "sessions_per_hour": ("sessions/h", "completed sessions / duration x 3,600"),
    "turns_per_hour": ("turns/h", "answered measured turns / duration x 3,600"),
    "turns_per_session_mean": ("turns", "measured turns / top-level sessions that sent any"),
    "ttft_ms_per_1k_uncached": ("ms/1k tokens", "least-squares slope of TTFT on expected uncached tokens x 1,000"),
    "ttft_by_context": ("JSON", "TTFT p50/p99 by prompt-length bin (doubling from 1,024 tokens)"),
    "ttft_by_uncached": ("JSON", "the same by expected uncached tokens"),
}

POINT_METRICS: tuple[Metric, ...] = (
    one("gpus", "GPUs", "GPUs serving the model (target.gpus_used)", lambda p: int(p.gpus)),
    one("emulated", "bool", "measured on the hardware emulator", lambda p: bool(p.emulated)),
    one("completed", "requests", "succeeded measured requests", lambda p: len(p.ok)),
    one("failed", "requests", "measured requests that failed", lambda p: len(p.measured) - len(p.ok)),
    one(
        "error_rate",
        "ratio",
        "failed / measured requests (1 with none measured)",
        lambda p: (len(p.measured) - len(p.ok)) / len(p.measured) if p.measured else 1.0,
    ),
    one("duration_s", "s", "first measured send to last measured response", lambda p: p.duration),
    one("request_throughput", "req/s", "completed / duration", lambda p: p.per_s(len(p.ok))),
    one("input_tps", "tok/s", "input tokens (usage, else requested) / duration", lambda p: p.per_s(p.input_tokens)),
    one("output_tps", "tok/s", "output tokens / duration", lambda p: p.per_s(p.output_tokens)),
    one(
        "total_tps", "tok/s", "(input + output tokens) / duration", lambda p: p.per_s(p.input_tokens + p.output_tokens)
    ),
    _per_gpu("output_tps"),
    _per_gpu("total_tps"),
    _stats("ttft_ms", "TTFT (send to first token chunk), succeeded requests", lambda p: (r.get("ttft") for r in p.ok)),
    _stats("tpot_ms", "TPOT ((E2E - TTFT) / (output tokens - 1)), outputs > 1 token", lambda p: p.tpots),
    _stats("itl_ms", "gaps between consecutive token chunks, pooled", lambda p: p.gaps),
    _stats("e2e_ms", "E2E (send to last byte), succeeded requests", lambda p: (r.get("e2e") for r in p.ok)),
    derived(
        "interactivity",
        "tok/s/user",
        "1000 / TPOT at Slo.interactivity_stat (p50 by default)",
        _stat_columns("tpot_ms"),
        _interactivity,
    ),
    one("goodput_rps", "req/s", "requests meeting every per-request SLO / duration", lambda p: p.per_s(_good(p))),
    one(
        "good_fraction",
        "ratio",
        "requests meeting every per-request SLO / measured",
        lambda p: _good(p) / len(p.measured) if p.measured else 0.0,
    ),
    derived(
        "meets_slo",
        "bool",
        "the point's statistics meet every SLO set, error rate within bound",
        ("completed", "error_rate", "good_fraction", *(f"{m}_ms_{q}" for m in METRICS for q in PERCENTILES)),
        lambda p, got: point_meets_slo(dict(got), p.slo, p.max_error_rate),
    ),
    one("load_mode", "label", "concurrency, rate or trace", lambda p: p.load_mode),
    one(
        "rate",
        "req/s",
        "the open-loop arrival rate (NaN in closed loop)",
        lambda p: float(p.rate) if p.rate is not None else NAN,
    ),
    _stats("ttfa_ms", "TTFA (send to first answer text), succeeded requests", lambda p: (r.get("ttfa") for r in p.ok)),
    one("tokens_per_chunk", "tok/chunk", "output tokens / token chunks", _chunks),
    one(
        "token_mismatches",
        "requests",
        "usage and client count disagree by > 10%",
        lambda p: sum(1 for r in p.ok if r.get("token_mismatch")),
    ),
    one(
        "usage_missing",
        "requests",
        "succeeded requests without usage (client count used)",
        lambda p: sum(1 for r in p.ok if r.get("tokens_source") == "client"),
    ),
    one("errors_by_kind", "JSON", "failed measured requests per error kind", _errors_by_kind),
    _from_client("loop_lag_ms_p99", "ms", "p99 event-loop lag of the client (loop monitor)"),
    _from_client("client_cpu_pct", "%", "client process CPU over the point (loop monitor)"),
    _from_client("loop_stall_ms_max", "ms", "longest event-loop stall of the client (loop monitor)"),
    _client_flag("client_bound", "the client, not the server, set the pace (loop monitor)"),
    _client_flag("client_stalled", "a stall passed monitor.STALL_BOUND_MS"),
    _from_client(
        "client_fleet", "members", "client members that measured the point (bench.fleet.members; NaN for one)"
    ),
    _from_client(
        "clock_offset_ms_max", "ms", "largest clock offset of a fleet member, corrected (bench.fleet.members)"
    ),
    _from_client("clock_rtt_ms_max", "ms", "largest round trip of a member's kept clock exchange: 2x its error bound"),
    one(
        "client_hosts",
        "label",
        "the workers or hosts a fleet's members ran on, joined by + (bench.fleet.members; empty for one)",
        lambda p: "+".join(str(h) for h in p.client.get("client_hosts") or []),
    ),
    one(
        "token_count_method",
        "label",
        "usage, client-chunks, client-words, or several joined by +",
        lambda p: count_method([dict(r) for r in p.ok]),
    ),
    filled("bench.run", [("ttft_connection", "label", "warm or per_request (the workload's ttft_connection)")]),
    Metric(
        (
            Column("input_len_requested_mean", "tokens", "mean requested prompt length, succeeded requests"),
            Column("input_len_measured_mean", "tokens", "mean usage prompt_tokens"),
            Column("input_len_error", "ratio", "sum(measured) / sum(requested) - 1 over requests with usage"),
        ),
        lambda p, _: input_lengths([dict(r) for r in p.ok], sized=bool(p.prompts.get("sized", True))),
    ),
    _from_prompts("input_len_tolerance", "ratio", "the workload's bound on input_len_error"),
    _from_prompts("prompt_seed", "seed", "the seed the prompts came from"),
    _from_prompts("prompt_sizing", "label", "how prompts were sized in tokens (bench.client.sizing), or file"),
    Metric(
        tuple(Column(*c) for c in OPEN_LOOP),
        lambda p, _: open_loop_figures([dict(r) for r in p.measured], [dict(r) for r in p.ok]),
    ),
    server_metrics.UNIT,
    filled(
        "bench.run",
        [("prefix_cache_hit_rate_expected", "ratio", "the trace's predicted hit rate (sessions.expected_hit_rate)")],
    ),
    Metric(
        tuple(Column(n, *SESSIONS[n]) for n in SESSIONS),
        lambda p, _: session_figures([dict(r) for r in p.measured], p.slo, p.duration),
    ),
    one(
        "tpot_by_position",
        "JSON",
        "token gaps p50/p99 by the output-token position they end at",
        lambda p: tpot_by_position([dict(r) for r in p.ok]),
    ),
    filled(
        "bench.run",
        [
            ("power_w_per_gpu", "W", "energy_j / gpus / the measured window"),
            (
                "energy_j",
                "J",
                "per GPU, energy counter at the window's end - at its start (vendor library); "
                "else mean sampled power x gpus x the window (serving.energy)",
            ),
            ("joules_per_output_token", "J/token", "energy_j / output tokens of the succeeded requests"),
            ("energy_method", "label", "measured, energy counters, GPU only; or measured, power samples, GPU only"),
            ("energy_library", "label", "library=version that read the GPUs (nvml, amdsmi), or cli"),
            ("energy_sample_s", "s", "median spacing of GPU 0's samples in the window"),
            ("throttled", "bool", "a GPU reported a slowdown (power cap, thermal, power brake) in the window"),
            ("throttle_reasons", "label", "the slowdown reasons seen, joined by +"),
            ("node_power_w", "W", "mean node power over the window (IPMI DCMI), where the node exposes it"),
            ("node_power", "label", "measured, IPMI DCMI; or missing"),
        ],
    ),
)

# The per-point table's columns, the contract every later step reads: the point's key, then every
# declared unit's columns in order.
POINT_COLUMNS: list[str] = [*POINT_KEY, *columns_of(POINT_METRICS)]
# The order summarize computes the units in, each after the columns it requires (refused here, at
# import, when a required column is computed by none or the requirements form a cycle).
EVALUATION_ORDER: tuple[Metric, ...] = evaluation_order(POINT_METRICS)


def summarize(
    records: Records,
    *,
    gpus: int,
    slo: Slo | None = None,
    emulated: bool,
    max_error_rate: float | None = None,
    load_mode: str = "concurrency",
    rate: float | None = None,
    client: dict[str, Any] | None = None,
    prompts: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One row of POINT_COLUMNS from one point's request records (warm-up rows are dropped here):
    each of POINT_METRICS in EVALUATION_ORDER, the row in POINT_COLUMNS order; columns another step
    fills are None.

    ``client`` carries the loop monitor's figures (loop_lag_ms_p99, loop_stall_ms_max,
    client_cpu_pct, client_bound, client_stalled) when the point was measured under it; open-loop
    send lags are taken from the records themselves. ``prompts`` says how the
    prompts were made: prompt_seed, prompt_sizing, input_len_tolerance and ``sized`` (bakeoff wrote
    them, so their measured length is held to the requested one).
    """
    if gpus < 1:
        raise ValueError(f"gpus: must be >= 1 (the target's tensor_parallel x pipeline_parallel), got {gpus}")
    rows = _rows(records)
    if not rows:
        raise ValueError("records: a point needs at least one request record")
    measured = [r for r in rows if not r.get("warmup")]
    ok = [r for r in measured if not r.get("error_kind")]
    starts = [s for s in (_num(r.get("start_offset")) for r in measured) if s is not None]
    ends = []
    for r in measured:
        s, el = _num(r.get("start_offset")), _num(r.get("elapsed"))
        if el is None:
            el = _num(r.get("e2e"))
        if s is not None and el is not None:
            ends.append(s + el)
    point = Point(
        measured=measured,
        ok=ok,
        duration=(max(ends) - min(starts)) if starts and ends else NAN,
        input_tokens=sum(_input_tokens(r) for r in ok),
        output_tokens=sum(int(_num(r.get("output_tokens")) or 0) for r in ok),
        gpus=int(gpus),
        emulated=emulated,
        slo=slo,
        max_error_rate=max_error_rate,
        load_mode=load_mode,
        rate=rate,
        client=client or {},
        prompts=prompts or {},
        tpots=[t for t in (request_tpot(r) for r in ok) if t is not None],
        gaps=[g for r in ok for g in chunk_gaps(r.get("chunk_offsets"))],
    )
    computed: dict[str, Any] = {}
    for unit in EVALUATION_ORDER:
        computed.update(unit.values(point, computed))
    return {k: rows[0].get(k) for k in POINT_KEY} | {k: computed.get(k) for k in POINT_COLUMNS[len(POINT_KEY) :]}
