"""The server's own figures from two Prometheus /metrics scrapes, to hold bakeoff's client against.

Histograms are compared by their mean (sum / count between the two scrapes): that is exact for the
requests in between, where a quantile read from vLLM's buckets (20 ms wide around a 30 ms TTFT) is
not fine enough to check a 3 ms goal. vLLM renamed some series across releases, so each figure
names the series to try, newest first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

# figure -> series to try, newest name first (vLLM V1 names, then older ones)
TTFT = ("vllm:time_to_first_token_seconds",)
TPOT = ("vllm:request_time_per_output_token_seconds",)
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
E2E = ("vllm:e2e_request_latency_seconds",)
PROMPT_TOKENS = ("vllm:prompt_tokens_total", "vllm:prompt_tokens")
GENERATION_TOKENS = ("vllm:generation_tokens_total", "vllm:generation_tokens")
REQUESTS = ("vllm:request_success_total", "vllm:request_success")


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text exposition as (name, labels, value) samples; comments and junk lines skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        out.append((name, dict(_LABEL.findall(labels or "")), v))
    return out


def counter(samples, names: tuple[str, ...]) -> float | None:
    """A counter summed over its label sets (engines, finish reasons); the first series present."""
    for name in names:
        vals = [v for n, _, v in samples if n == name]
        if vals:
            return sum(vals)
    return None


@dataclass
class Hist:
    """A histogram's count and sum, summed over its label sets (engines)."""

    name: str
    count: float = 0.0
    total: float = 0.0

    def minus(self, before: Hist | None) -> Hist:
        if before is None:
            return self
        return Hist(self.name, self.count - before.count, self.total - before.total)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count > 0 else math.nan


def histogram(samples, names: tuple[str, ...]) -> Hist | None:
    """The first of ``names`` present as a histogram (its ``_count`` and ``_sum`` series)."""
    for name in names:
        h, seen = Hist(name), False
        for n, _, v in samples:
            if n == f"{name}_count":
                h.count += v
                seen = True
            elif n == f"{name}_sum":
                h.total += v
        if seen:
            return h
    return None


def delta(before_text: str, after_text: str) -> dict[str, object]:
    """The server's figures for what happened between two scrapes: histogram deltas (seconds) and
    counter deltas (tokens, requests); None where the server exports no such series."""
    b, a = parse(before_text), parse(after_text)

    def hist(names):
        after = histogram(a, names)
        return None if after is None else after.minus(histogram(b, names))

    def count(names):
        after = counter(a, names)
        return None if after is None else after - (counter(b, names) or 0.0)

    return {
        "ttft": hist(TTFT),
        "tpot": hist(TPOT),
        "itl": hist(ITL),
        "e2e": hist(E2E),
        "prompt_tokens": count(PROMPT_TOKENS),
        "generation_tokens": count(GENERATION_TOKENS),
        "requests": count(REQUESTS),
    }
