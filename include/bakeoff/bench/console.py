"""What ``bakeoff bench`` prints per point: the figures, plus what a reader must not miss.

A point line never claims more than was measured: no SLO verdict when no SLO was given, no
client-bound label on a point where nothing succeeded, and a warning line whenever the token
counts or the prompt lengths the server reports disagree with what the client counted or asked.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from bakeoff import store

if TYPE_CHECKING:
    from bakeoff.plan.slo import Slo

PROMPT_TOLERANCE = 0.05  # measured vs requested mean prompt length, before a warning


def slo_given(slo: Slo | None, max_error_rate: float | None) -> bool:
    """Whether there is anything to judge a point against."""
    return max_error_rate is not None or (slo is not None and slo.is_set())


def _ms(v: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:{width}.{digits}f}"


def point_line(s: dict[str, Any], *, judged: bool, emulated: bool) -> str:
    head = (
        f"{s['load_mode']:>11} {s['concurrency']:>6} r{s['repeat']}: {s['completed']:>5} ok {s['failed']:>4} failed  "
    )
    if not s["completed"]:
        kinds = ", ".join(f"{k} x{n}" for k, n in json.loads(s.get("errors_by_kind") or "{}").items())
        return head + f"ALL REQUESTS FAILED ({kinds or 'no detail'})" + (" EMULATED" if emulated else "")
    verdict = ("SLO met" if s["meets_slo"] else "SLO missed") if judged else "no SLO given"
    watts = s.get("power_w_per_gpu")
    throttled = f"  THROTTLED ({s.get('throttle_reasons') or 'reason not given'})" if s.get("throttled") else ""
    return (
        head + f"TTFT p99 {_ms(s['ttft_ms_p99'], 8, 1)} ms  TPOT p50 {_ms(s['tpot_ms_p50'], 7, 2)} ms  "
        f"{s['output_tps_per_gpu']:9.1f} out tok/s/GPU  {verdict}"
        f"{f' (goodput {share})' if judged and (share := _share(s.get('good_fraction'))) else ''}"
        f"{'  CLIENT-BOUND' if s['client_bound'] else ''}{throttled}"
        f"{f'  {watts:6.0f} W/GPU' if watts is not None and watts == watts else ''}"
        f"{server_figures(s)}"
        f"{' EMULATED' if emulated else ''}"
    )


def _share(v: object) -> str | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1%}"


def server_figures(s: dict[str, Any]) -> str:
    """The server's own prefix-cache hit rate (beside the trace's prediction) and speculative
    acceptance, and the point's completed sessions, when there are any."""
    parts = []
    hit, exp = _share(s.get("prefix_cache_hit_rate")), _share(s.get("prefix_cache_hit_rate_expected"))
    if hit or exp:
        parts.append(f"hit {hit or '-'}" + (f" (trace {exp})" if exp else ""))
    al = s.get("spec_acceptance_length")
    if al is not None and al == al:
        parts.append(f"spec AL {al:.2f}")
    done = s.get("sessions_completed")
    if done is not None and done == done:
        parts.append(f"{int(done)} sessions, {s.get('session_goodput_sps') or 0:.2f} good/s")
    return "  " + "  ".join(parts) if parts else ""


def point_warnings(s: dict[str, Any], out_dir: str | store.StorePath, workload: str) -> list[str]:
    """Token-count and prompt-length disagreements of one point, each as one indented line."""
    ok = int(s.get("completed") or 0)
    if not ok:
        return []
    out = []
    if s.get("token_mismatches"):
        out.append(
            f"  warning: {s['token_mismatches']} of {ok} requests: the server's usage and the client's own "
            f"count of output tokens differ by more than 10% (column token_mismatch)"
        )
    if s.get("usage_missing"):
        out.append(
            f"  warning: {s['usage_missing']} of {ok} requests had no usage: output tokens are the client's "
            f"own count ({s.get('token_count_method')}), a lower bound for multi-token chunks"
        )
    path = store.point_file(out_dir, "requests", workload, s["concurrency"], s["repeat"])
    if path.exists():
        req = store.read_frame(path, columns=["warmup", "error_kind", "prompt_tokens", "requested_input_len"])
        req = req[~req["warmup"].astype(bool) & req["error_kind"].isna() & req["prompt_tokens"].notna()]
        if len(req):
            measured, asked = float(req["prompt_tokens"].mean()), float(req["requested_input_len"].mean())
            if asked > 0 and abs(measured - asked) > PROMPT_TOLERANCE * asked:
                out.append(
                    f"  warning: prompts measured {measured:.1f} tokens on average by the server's usage, "
                    f"{asked:.1f} requested ({(measured - asked) / asked:+.1%}): lengths and throughput "
                    f"are not those of the workload as written"
                )
    return out
