"""Synthetic prompts: random words whose token count is exact under the emulator's convention.

Lengths are drawn per request, uniformly over ``Workload.length_bounds`` (the plan states which
interval convention it uses), from a generator seeded by the workload seed, so the same plan sends
the same prompts on every target and in every repeat.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from bakeoff import tokens


@dataclass(frozen=True)
class RequestSpec:
    """One request to send. ``input_len`` is the intended prompt length in tokens."""

    input_len: int
    output_len: int                       # max_tokens
    prompt: str | None = None             # completions
    messages: list[dict[str, Any]] | None = None   # chat; built from prompt when None
    extra: dict[str, Any] = field(default_factory=dict)   # per-request body fields (user files)

    def chat_messages(self) -> list[dict[str, Any]]:
        return self.messages if self.messages is not None else [{"role": "user", "content": self.prompt or ""}]

    def completion_prompt(self) -> str:
        if self.prompt is not None:
            return self.prompt
        return "\n".join(str(m.get("content", "")) for m in (self.messages or []))


def sample_length(rng: random.Random, bounds: tuple[int, int]) -> int:
    lo, hi = bounds
    return rng.randint(lo, hi)


def prompt_words(n: int, seed: int, prefix: str = "") -> str:
    """A prompt of exactly n tokens: the shared prefix's words, then seeded random words."""
    have = tokens.count(prefix)
    rest = tokens.words(max(0, n - have), seed) if n > have else ""
    return " ".join(p for p in (prefix, rest) if p)


def synthesize(workload, n: int, *, stream: int = 0) -> list[RequestSpec]:
    """n requests for a workload with synthetic lengths.

    ``stream`` separates independent request streams of the same workload (warm-up vs measured,
    one repeat vs another) while keeping each reproducible.
    """
    rng = random.Random(f"{workload.seed}/{workload.name}/{stream}")
    in_b = workload.length_bounds(workload.input_len)
    out_b = workload.length_bounds(workload.output_len)
    prefixes = shared_prefixes(workload)
    specs = []
    for i in range(n):
        il, ol = sample_length(rng, in_b), sample_length(rng, out_b)
        prefix = ""
        if prefixes:
            words = min(il, round(workload.prefix_ratio * il))
            prefix = " ".join(prefixes[i % len(prefixes)].split()[:words])
        seed = rng.getrandbits(48)
        specs.append(RequestSpec(input_len=il, output_len=ol, prompt=prompt_words(il, seed, prefix)))
    return specs


def shared_prefixes(workload) -> list[str]:
    """Prefix pool for shared-prefix workloads: ``prefix_groups`` distinct prefixes long enough for
    the longest prompt; a request uses the first prefix_ratio x input_len words of its group's one,
    so a server with prefix caching hits that share of the prompt after the group's first request."""
    ratio = getattr(workload, "prefix_ratio", 0.0) or 0.0
    if ratio <= 0:
        return []
    longest = workload.length_bounds(workload.input_len)[1]
    return [tokens.words(longest, seed=workload.seed * 1_000_003 + 7919 * (g + 1))
            for g in range(max(1, workload.prefix_groups))]
