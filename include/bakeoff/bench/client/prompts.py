"""Synthetic prompts: random words sized in the served model's tokens (bench.client.sizing).

Lengths are drawn per request, uniformly over ``Workload.length_bounds`` (the plan states which
interval convention it uses), from a generator seeded by the run's prompt seed (``prompt_seed``):
every target and repeat of one run gets the same prompts (for a same-model tokenizer), and a later
run gets new ones, so it never hits a prefix cache an earlier run warmed. Prefixes are shared only
where the workload asks (prefix_ratio).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bakeoff import tokens
from bakeoff.bench.client.sizing import PromptSizer

if TYPE_CHECKING:
    from bakeoff.plan.workload import Workload


@dataclass(frozen=True)
class RequestSpec:
    """One request to send. ``input_len`` is the intended prompt length in tokens."""

    input_len: int
    output_len: int  # max_tokens
    prompt: str | None = None  # completions
    messages: list[dict[str, Any]] | None = None  # chat; built from prompt when None
    extra: dict[str, Any] = field(default_factory=dict)  # per-request body fields (user files)

    def chat_messages(self) -> list[dict[str, Any]]:
        return self.messages if self.messages is not None else [{"role": "user", "content": self.prompt or ""}]

    def completion_prompt(self) -> str:
        if self.prompt is not None:
            return self.prompt
        return "\n".join(str(m.get("content", "")) for m in (self.messages or []))


def sample_length(rng: random.Random, bounds: tuple[int, int]) -> int:
    lo, hi = bounds
    return rng.randint(lo, hi)


def prompt_seed(workload: Workload, run_id: str | None) -> int:
    """The seed a run's prompts come from: the workload's seed alone when it asks for the same prompts
    in every run (``prompt_seeding: fixed``), else mixed with the run id (the default)."""
    if workload.prompt_seeding == "fixed" or not run_id:
        return int(workload.seed)
    digest = hashlib.blake2b(f"{workload.seed}/{run_id}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


def prompt_words(n: int, seed: int, prefix: str = "", sizer: PromptSizer | None = None) -> str:
    """A prompt of n tokens (as ``sizer`` counts; one word per token without one): the shared
    prefix's words that fit, then seeded random words."""
    sizer = sizer or WORDS
    head = sizer.prefix(prefix, n) if prefix else []
    return sizer.build(n, random.Random(seed), head)


WORDS = PromptSizer.words()


def synthesize(
    workload: Workload, n: int, *, stream: int = 0, sizer: PromptSizer | None = None, seed: int | None = None
) -> list[RequestSpec]:
    """n requests for a workload with synthetic lengths.

    ``stream`` separates independent request streams of the same workload (warm-up vs measured,
    one repeat vs another) while keeping each reproducible; ``seed`` is the run's prompt seed
    (default: the workload's own).
    """
    seed = workload.seed if seed is None else seed
    sizer = sizer or WORDS
    rng = random.Random(f"{seed}/{workload.name}/{stream}")
    in_b = workload.length_bounds(workload.input_len)
    out_b = workload.length_bounds(workload.output_len)
    prefixes = shared_prefixes(workload, seed)
    specs = []
    for i in range(n):
        il, ol = sample_length(rng, in_b), sample_length(rng, out_b)
        head: list[str] = []
        if prefixes:
            head = sizer.prefix(prefixes[i % len(prefixes)], min(il, round(workload.prefix_ratio * il)))
        text = sizer.build(il, random.Random(rng.getrandbits(48)), head)
        specs.append(RequestSpec(input_len=il, output_len=ol, prompt=text))
    return specs


def shared_prefixes(workload: Workload, seed: int | None = None) -> list[str]:
    """Prefix pool for shared-prefix workloads: ``prefix_groups`` distinct texts long enough for the
    longest prompt; a request uses the head of its group's text worth prefix_ratio x input_len
    tokens, so a server with prefix caching hits that share of the prompt after the group's first
    request. Derived from the run's prompt seed: shared within a run, new in the next."""
    ratio = workload.prefix_ratio or 0.0
    if ratio <= 0:
        return []
    seed = workload.seed if seed is None else seed
    longest = workload.length_bounds(workload.input_len)[1]
    return [
        tokens.words(longest, seed=seed * 1_000_003 + 7919 * (g + 1)) for g in range(max(1, workload.prefix_groups))
    ]
