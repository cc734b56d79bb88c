"""The emulator's token convention, shared with the client's cross-check count.

One token is one whitespace-separated word. Real servers use real tokenizers: prompts for them are
sized with the server's own tokenizer (bench.client.sizing, bench.client.tokenize) and only fall back to this
convention, recorded as such, when the server offers no way to count.
"""

from __future__ import annotations

import random

# A fixed vocabulary of short, distinct words: prompts built from it have exactly the token
# count asked for under this convention.
VOCAB = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar "
    "papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basil cedar dune "
    "ember fern granite harbor iris jade kelp lotus maple nectar onyx pearl quartz raven sage "
    "thistle umber violet willow yarrow zephyr"
).split()


def count(text: str) -> int:
    return len(text.split())


def words(n: int, seed: int) -> str:
    """n deterministic words for a given seed."""
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCAB) for _ in range(n))
