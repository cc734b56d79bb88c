"""Synthetic prompts sized in the served model's tokens, by calibration rather than per-prompt calls.

Tokenizing every prompt over HTTP would cost one call per request, so the sizer asks the model's
tokenizer (bench.client.tokenize) what each vocabulary word costs once: alone as a whole prompt (special
tokens and, for chat, the template included) and as one more space-separated word. Real BPE and
SentencePiece tokenizers split on spaces first, so a prompt's length is then the sum of its words'
costs, and a prompt of exactly n tokens is built by drawing words that fit the remaining budget.
A sample of built prompts is then tokenized for real; a constant offset found there (a tokenizer
that is not additive after all) is corrected once and the achieved error stated.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any

from bakeoff import tokens
from bakeoff.bench.client.tokenize import TokenCounter, TokenizeError

log = logging.getLogger(__name__)

REPEAT = 8  # a word's marginal cost: tokens of "w" + REPEAT x " w", less "w", over REPEAT
SAMPLE = 8  # prompts tokenized for real to verify the fit
# Short words nearly every tokenizer spends one token on: the tail of a prompt draws on them too, so
# a total the vocabulary's words (often two tokens each) would overshoot still lands exactly.
FILLERS = ("a", "I", "1", "x", "of", "to")
WORDS = tuple(tokens.VOCAB) + FILLERS


@dataclass(frozen=True)
class PromptSizer:
    """Per-word token costs of one model (plain data: it travels to worker processes)."""

    method: str  # tokenize | usage-probe | words
    first: dict[str, int]  # tokens of a prompt made of this one word
    more: dict[str, int]  # tokens one more " word" adds
    bias: int = 0  # correction found by verification (tokens)
    check: dict[str, Any] = field(default_factory=dict)  # verification figures

    @classmethod
    def words(cls) -> PromptSizer:
        """The emulator's convention: one word is one token."""
        return cls("words", {w: 1 for w in WORDS}, {w: 1 for w in WORDS})

    def cost(self, words: list[str]) -> int:
        if not words:
            return 0
        return self.first[words[0]] + sum(self.more[w] for w in words[1:])

    def prefix(self, text: str, budget: int) -> list[str]:
        """The longest head of ``text``'s words that costs at most ``budget`` tokens (shared prefixes
        are cut from one long text, so every request of a group shares the same head)."""
        out: list[str] = []
        total = 0
        for w in text.split():
            c = self.first[w] if not out else self.more[w]
            if total + c > budget:
                break
            out.append(w)
            total += c
        return out

    def build(self, n: int, rng: random.Random, prefix: list[str] | None = None) -> str:
        """A prompt of n tokens (as the fitted tokenizer counts): the prefix words, then random words;
        the last few are the dearest that still fit (down to one-token fillers), so the total lands on n."""
        target = max(1, n - self.bias)
        words = list(prefix or [])
        have = self.cost(words)
        if not words:
            fits = [w for w in tokens.VOCAB if self.first[w] <= target] or [
                min(tokens.VOCAB, key=self.first.__getitem__)
            ]
            words.append(rng.choice(fits))
            have = self.first[words[0]]
        dear = max(self.more[w] for w in tokens.VOCAB)
        more, vocab, choice = self.more, tokens.VOCAB, rng.choice
        while target - have > 2 * dear:  # any word fits: the hot loop of long prompts
            w = choice(vocab)
            words.append(w)
            have += more[w]
        while have < target:  # the tail: the dearest word that fits, so the total lands
            left = target - have
            fits = [w for w in WORDS if more[w] <= left]
            if not fits:
                break  # nothing small enough: a few tokens short (verification shows it)
            top = max(more[x] for x in fits)
            w = choice([x for x in fits if more[x] == top])
            words.append(w)
            have += more[w]
        return " ".join(words)


def calibrate(
    counter: TokenCounter, *, chat: bool = False, lengths: list[int] | None = None, seed: int = 0
) -> PromptSizer:
    """Fit per-word costs with ``counter`` and verify on a sample of prompts of ``lengths`` (the
    workload's; a few spread ones by default). Falls back to one-word-one-token when the counter
    fails, saying so in ``check``."""
    if counter.method == "words":
        return PromptSizer.words()
    try:
        first, more = {}, {}
        for w in WORDS:
            one = counter.count(w, chat=chat)
            many = counter.count(" ".join([w] * (REPEAT + 1)), chat=chat)
            first[w], more[w] = one, max(1, round((many - one) / REPEAT))
        sizer = PromptSizer(counter.method, first, more)
        sizer = _verify(sizer, counter, chat, lengths or [16, 128, 1024], seed)
    except TokenizeError as e:
        log.warning("prompt sizing fell back to words: %s", e)
        return PromptSizer("words", {w: 1 for w in WORDS}, {w: 1 for w in WORDS}, check={"error": str(e)})
    return sizer


def _sample(
    sizer: PromptSizer, counter: TokenCounter, chat: bool, lengths: list[int], seed: int
) -> tuple[list[int], list[int]]:
    rng = random.Random(f"sizing/{seed}")
    asked = [lengths[i % len(lengths)] for i in range(SAMPLE)]
    got = [counter.count(sizer.build(n, rng), chat=chat) for n in asked]
    return asked, got


def _verify(sizer: PromptSizer, counter: TokenCounter, chat: bool, lengths: list[int], seed: int) -> PromptSizer:
    asked, got = _sample(sizer, counter, chat, lengths, seed)
    bias = round(sum(g - a for a, g in zip(asked, got, strict=True)) / len(asked))
    if bias:
        sizer = PromptSizer(sizer.method, sizer.first, sizer.more, bias)
        asked, got = _sample(sizer, counter, chat, lengths, seed)
    errs = [(g - a) / a for a, g in zip(asked, got, strict=True)]
    check = {
        "requested": asked,
        "measured": got,
        "bias_tokens": bias,
        "error_mean": sum(errs) / len(errs),
        "error_max_abs": max(abs(e) for e in errs),
    }
    return PromptSizer(sizer.method, sizer.first, sizer.more, sizer.bias, check)
