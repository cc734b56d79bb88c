"""How many draft tokens the emulator's verification steps accept: its model of speculative decoding.

With speculative decoding every decode step of a sequence verifies num_speculative_tokens (k) draft tokens
and yields the accepted ones plus one token of its own, so the acceptance length (AL, tokens per
verification step) is 1 + accepted. Two modes, as the target's speculative.acceptance says:

- pinned: the mean AL is exactly the given value (the plan's, else InferenceX's golden curve): its integer
  part every step and its fractional part as a seeded coin, as TensorRT-LLM's synthetic-acceptance switch
  does;
- real: EMULATED "real" acceptance is a model, not the buyer's prompts: the model's golden AL at k (else
  1 + 0.6 x k, at most 4) is the mean of a seeded per-step draw in which each draft position is accepted
  with one probability p, until the first rejection (so later positions are accepted less often, and AL
  differs from step to step).
"""

from __future__ import annotations

import random
from typing import Any

from bakeoff import catalog
from bakeoff.plan.target import Target

FALLBACK_AL_PER_TOKEN, FALLBACK_AL_MAX = 0.6, 4.0  # no golden curve: AL = min(1 + 0.6 x k, 4)


def chain_probability(k: int, accepted: float) -> float:
    """p such that the mean run of successes, capped at k, is `accepted`: sum of p^i for i = 1..k."""
    if accepted >= k:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        mean = sum(p**i for i in range(1, k + 1))
        lo, hi = (p, hi) if mean < accepted else (lo, p)
    return (lo + hi) / 2


class Acceptance:
    """Draws, per sequence and verification step, how many of the k draft tokens are accepted."""

    def __init__(self, method: str, draft_tokens: int, mean_length: float, mode: str, seed: int = 0):
        if not 1.0 <= mean_length <= draft_tokens + 1:
            raise ValueError(
                f"speculative.acceptance_length: {mean_length} is outside 1..num_speculative_tokens + 1 "
                f"= {draft_tokens + 1}; give a value in that range"
            )
        self.method, self.draft_tokens, self.mean_length, self.mode = method, draft_tokens, mean_length, mode
        self._rng = random.Random(seed)
        self._whole = int(mean_length) - 1  # pinned: accepted every step
        self._fraction = mean_length - int(mean_length)  # pinned: chance of one more
        self._p = chain_probability(draft_tokens, mean_length - 1)  # real: per-position acceptance

    def accepted(self) -> int:
        draw = self._rng.random
        if self.mode == "pinned":
            return self._whole + (draw() < self._fraction)
        n, k, p = 0, self.draft_tokens, self._p
        while n < k and draw() < p:
            n += 1
        return n

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "num_speculative_tokens": self.draft_tokens,
            "acceptance": self.mode,
            "mean_acceptance_length": self.mean_length,
            "note": "EMULATED: acceptance is drawn from a model"
            + (" (pinned mean)" if self.mode == "pinned" else ", not measured on the prompts"),
        }


def mean_length(target: Target) -> float:
    """The AL the emulator aims at: pinned, the target's; real, the golden curve's (else the fallback)."""
    spec = target.speculative
    if spec is None:
        raise ValueError(f"{target.name} serves without speculative decoding: it has no acceptance length")
    if spec.acceptance == "pinned" and target.pinned_acceptance_length is not None:
        return float(target.pinned_acceptance_length)
    k = spec.num_speculative_tokens
    golden = catalog.golden_acceptance_length(target.model, k, method=spec.method)
    if golden is None:
        golden = catalog.golden_acceptance_length(target.model, k)
    return golden if golden is not None else min(1 + FALLBACK_AL_PER_TOKEN * k, FALLBACK_AL_MAX, k + 1)


def for_target(target: Target, seed: int = 0) -> Acceptance | None:
    """The target's acceptance model, or None without speculative decoding."""
    spec = target.speculative
    if spec is None:
        return None
    return Acceptance(spec.method, spec.num_speculative_tokens, mean_length(target), spec.acceptance, seed)
