"""What the emulator answers: deterministic text, and correct (or deliberately wrong) arithmetic.

Output depends only on the prompt and the target's seed, so every target of a run and every repeat
gets the same text, and a test can predict it. Arithmetic questions of the built-in accuracy set
("What is 41 * 2?") are answered greedily with the result, so the accuracy gate has something to
score; a share of them (the target's accuracy_error_rate, picked by hashing the question) is
answered off by one, so a demo can show a target failing the gate.

Token convention (bakeoff.tokens): one whitespace-separated word is one token; each output token
is a word with a leading space.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from bakeoff.tokens import VOCAB

QUESTION = re.compile(r"What is (-?\d+) ([+\-*]) (-?\d+)\?")
_WORDS = tuple(" " + w for w in VOCAB)
_OPS: dict[str, Callable[[int, int], int]] = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@dataclass(frozen=True)
class Reply:
    words: list[str]  # output tokens, each with its leading space
    finish_reason: str  # "length" | "stop"

    @property
    def text(self) -> str:
        return "".join(self.words)


def _hash(text: str, seed: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}\x00{text}".encode(), digest_size=8).digest(), "big")


def answer(question: str, seed: int, error_rate: float) -> int:
    """The emulator's answer to one matched question: the result, or result + 1 for a seeded share."""
    m = QUESTION.fullmatch(question)
    if m is None:
        raise ValueError(f"not an accuracy question: {question!r}")
    result = _OPS[m.group(2)](int(m.group(1)), int(m.group(3)))
    wrong = _hash(question, seed) / 2**64 < error_rate
    return result + 1 if wrong else result


def reply(
    prompt: str, max_tokens: int, *, seed: int, ignore_eos: bool = False, min_tokens: int = 0, error_rate: float = 0.0
) -> Reply:
    """The whole output for a request. Without ignore_eos the "model" stops (finish_reason "stop") at a
    deterministic length drawn from [max(min_tokens, ceil(max_tokens / 2)), max_tokens]."""
    h = _hash(prompt, seed)
    rng = random.Random(h)
    questions = list(QUESTION.finditer(prompt))
    if questions:
        head = [f" {answer(questions[-1].group(0), seed, error_rate)}"]
        n = max_tokens if ignore_eos else max(min_tokens, 1)  # greedy: stop right after the answer
        words = (head + rng.choices(_WORDS, k=max(0, n - 1)))[:max_tokens]
        return Reply(words, "length" if ignore_eos or min_tokens >= max_tokens else "stop")
    if ignore_eos:
        n = max_tokens
    else:
        lo = min(max_tokens, max(min_tokens, -(-max_tokens // 2)))
        n = lo + h % (max_tokens - lo + 1)
    return Reply(rng.choices(_WORDS, k=n), "length" if n >= max_tokens else "stop")
