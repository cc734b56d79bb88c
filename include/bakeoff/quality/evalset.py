"""The built-in accuracy set: generated arithmetic and word problems with exact integer answers.

Generated rather than downloaded so tests and the demo run offline and every target in every run
gets byte-identical prompts (cross-target agreement compares answers item by item). Each question
ends in ``What is A op B?`` (op one of + - *): the hardware emulator computes the answer from the
last such phrase in the prompt, so keep that form when adding templates.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

NAME = "bakeoff-arith-v1"

# A few worked examples first, so a real base or instruct model answers with a bare number.
FEW_SHOT = (
    "Answer each question with a single integer.\n\n"
    "Question: What is 3 + 4?\nAnswer: 7\n\n"
    "Question: A crate holds 9 jars and 2 break. What is 9 - 2?\nAnswer: 7\n\n"
    "Question: What is 6 * 5?\nAnswer: 30\n\n"
)

# (template, op, operand ranges). Word problems keep A >= B for subtraction so stories make sense.
TEMPLATES = [
    ("What is {a} + {b}?", "+", (2, 999), (2, 999)),
    ("What is {a} - {b}?", "-", (2, 999), (2, 999)),
    ("What is {a} * {b}?", "*", (2, 99), (2, 99)),
    ("Tom has {a} apples and buys {b} more. What is {a} + {b}?", "+", (2, 500), (2, 500)),
    ("A train carries {a} people and {b} get off at the first stop. What is {a} - {b}?", "-", (50, 900), (1, 49)),
    ("A warehouse has {a} shelves with {b} boxes on each. What is {a} * {b}?", "*", (2, 60), (2, 40)),
    ("Maria read {a} pages on Monday and {b} pages on Tuesday. What is {a} + {b}?", "+", (5, 300), (5, 300)),
    ("A tank holds {a} litres and {b} litres leak out. What is {a} - {b}?", "-", (100, 999), (1, 99)),
]

QUESTION_RE = re.compile(r"What is (-?\d+) ([+\-*]) (-?\d+)\?")
_INT_RE = re.compile(r"-?\d+")
_OPS: dict[str, Callable[[int, int], int]] = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    answer: int

    @property
    def prompt(self) -> str:
        return f"{FEW_SHOT}Question: {self.question}\nAnswer:"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"prompt": self.prompt}


def build(size: int, seed: int = 0) -> list[Item]:
    """size items, the same for the same (size, seed) on every machine and Python version."""
    rng = random.Random(f"{NAME}/{seed}")
    items = []
    for i in range(size):
        template, op, (alo, ahi), (blo, bhi) = TEMPLATES[rng.randrange(len(TEMPLATES))]
        a, b = rng.randint(alo, ahi), rng.randint(blo, bhi)
        items.append(Item(id=f"q{i:05d}", question=template.format(a=a, b=b), answer=_OPS[op](a, b)))
    return items


def fingerprint(items: list[Item]) -> str:
    """Identifies the exact set, so results from different sets are never compared as equal."""
    h = hashlib.sha256()
    for it in items:
        h.update(f"{it.id}\t{it.prompt}\t{it.answer}\n".encode())
    return h.hexdigest()[:16]


def solve(prompt: str) -> int | None:
    """The exact answer to the last ``What is A op B?`` in a prompt (what a correct server says)."""
    matches = QUESTION_RE.findall(prompt)
    if not matches:
        return None
    a, op, b = matches[-1]
    return _OPS[op](int(a), int(b))


def parse_answer(completion: str) -> int | None:
    """The first integer in a completion; None when there is none."""
    m = _INT_RE.search(completion or "")
    return int(m.group()) if m else None
