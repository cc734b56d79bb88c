"""Agentic session workloads: the sessions of a workload, the prompt text of a turn, and the prefix-cache
hit rate a trace predicts.

``load_sessions`` reads a plan's sessions block (trace, logs or synthetic; bench.sessions.session_sources);
``PromptBlocks`` turns a turn's hash_ids into text whose blocks are a function of their ids, so two
prompts share exactly the prefix the trace says they share; ``expected_hit_rate`` replays the turns
through an LRU of blocks and counts hits as a server does.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np

from bakeoff import tokens
from bakeoff.bench.client.sizing import WORDS as SIZER_WORDS
from bakeoff.bench.client.sizing import PromptSizer
from bakeoff.bench.client.workloads import WorkloadFileError, resolve_file
from bakeoff.bench.sessions.session_sources import (
    Session,
    SyntheticSpec,
    Turn,
    fit,
    generate,
    read_logs,
    read_trace,
)
from bakeoff.plan import Plan
from bakeoff.plan.workload import SERVER_BLOCK_TOKENS, Workload

__all__ = [
    "Session",
    "Turn",
    "SyntheticSpec",
    "PromptBlocks",
    "load_sessions",
    "check_context",
    "expected_hit_rate",
    "send_order",
    "SERVER_BLOCK_TOKENS",
]


def load_sessions(
    workload: Workload, seed: int, *, context_tokens: int | None = None, model: str = "the model"
) -> list[Session]:
    """The sessions of a ``kind: sessions`` workload. ``seed`` seeds the synthetic generator (pass the
    workload's seed for the same sessions in every run). With ``context_tokens``, a session whose
    prompt plus output passes the model's context is refused with its numbers (check_context)."""
    block = workload.sessions
    if block is None:
        raise ValueError(f"workloads {workload.name}: kind {workload.kind!r} has no sessions block")
    where = "synthetic sessions"
    if block.source == "trace":
        p = resolve_file(block.path, "sessions.path")
        sessions, where = read_trace(p, block.block_tokens), p.name
    elif block.source == "logs":
        p = resolve_file(block.path, "sessions.path")
        sessions, where = read_logs(p, block.block_tokens), p.name
    else:
        spec = SyntheticSpec.of(block)
        if block.fit_from:
            p = resolve_file(block.fit_from, "sessions.fit_from")
            fitted = fit(read_trace(p, block.block_tokens), block.block_tokens)
            spec = SyntheticSpec(**{**fitted.__dict__, "sessions": block.sessions})
            where = f"sessions fitted from {p.name}"
        sessions = generate(spec, seed)
    if context_tokens is not None:
        check_context(sessions, context_tokens, model, where)
    return sessions


def check_plan_contexts(plan: Plan) -> None:
    """Before any spend: every session a trace or log file holds fits the context of every target's model
    (synthetic sessions are checked when the plan is loaded, from their stated maxima)."""
    tightest = min(plan.targets, key=lambda t: t.model_spec.context)
    for w in plan.workloads:
        block = w.sessions
        if w.kind == "sessions" and block is not None and (block.source != "synthetic" or block.fit_from):
            load_sessions(w, w.seed, context_tokens=tightest.model_spec.context, model=tightest.model)


def check_context(sessions: Iterable[Session], context_tokens: int, model: str, where: str) -> None:
    """Refuse the first turn whose prompt plus output passes the model's context: a server refuses it,
    so the session could never be replayed as the trace states it."""
    for s in sessions:
        for j, t in enumerate(s.turns, 1):
            need = t.input_tokens + t.output_tokens
            if need > context_tokens:
                raise WorkloadFileError(
                    f"{where}: session {s.id} turn {j} needs {need} tokens ({t.input_tokens} prompt + "
                    f"{t.output_tokens} output), beyond the {context_tokens}-token context of {model}; "
                    "choose a model with a longer context or drop the session's later turns"
                )


# --- prompts from hash ids ----------------------------------------------------------------------
_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
HEADER_WORDS = 12  # base-len(vocab) digits of a block's 64-bit key (prompts for a real tokenizer)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place: a fast, well-spread hash of each uint64 (arithmetic wraps)."""
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


class PromptBlocks:
    """Prompt text from hash_ids: block i's text is a function of hash_id i (and the run's ``seed``),
    the last block cut so the prompt is ``input_tokens`` long.

    Under the emulator's convention (no ``sizer``, or a words sizer) a block is one unique leading
    word naming its id, then words of ``tokens.VOCAB`` picked by a hash of (id, position): one word
    is one token, so a block is exactly ``block_tokens`` tokens and blocks of different ids differ
    in their first server block. For a real tokenizer (a fitted ``PromptSizer``) blocks use only
    the words that tokenizer spends one token on after a space, lead with 12 such words spelling a
    64-bit key of the id (different ids collide with probability 2**-64) and the last block gives
    back the tokens the prompt's start and the chat template add (the sizer's fit): exact as far as
    the sizer's additive fit is, which the run verifies on a sample.

    Block texts are cached (LRU, ``cache_tokens`` tokens in all): a turn re-sending its session's
    context joins cached strings, so a 256k-token prompt costs one join."""

    def __init__(
        self, block_tokens: int, sizer: PromptSizer | None = None, *, seed: int = 0, cache_tokens: int = 4_000_000
    ):
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        self.block_tokens = block_tokens
        self.seed = seed
        self.sizer = None if sizer is None or sizer.method == "words" else sizer
        self.words_convention = self.sizer is None
        vocab = list(tokens.VOCAB)
        if self.sizer is not None:
            vocab = [w for w in SIZER_WORDS if self.sizer.more.get(w) == 1]
            if len(vocab) < 2:
                raise ValueError("the tokenizer spends more than one token on nearly every word; size with words")
        self.vocab = np.asarray(vocab, dtype=object)
        # word pairs: half the items to index and join (the cost of a cold block)
        self.pairs = np.asarray([f"{a} {b}" for a in vocab for b in vocab], dtype=object)
        self._cache: OrderedDict[int, str] = OrderedDict()
        self._cap = max(16, cache_tokens // block_tokens)

    def _key(self, hash_id: int) -> int:
        digest = hashlib.blake2b(f"{self.seed}/{hash_id}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    def _build(self, ids: Sequence[int]) -> list[str]:
        """Block texts of ``ids``, all at once (one vectorised hash for every word)."""
        b, v = self.block_tokens, len(self.vocab)
        keys = np.asarray([self._key(i) for i in ids], dtype=np.uint64)
        head = 1 if self.words_convention else min(HEADER_WORDS, b)
        body = b - head
        pos = np.arange(1, body // 2 + body % 2 + 1, dtype=np.uint64) * _GOLDEN
        picks = (_mix(keys[:, None] + pos[None, :]) >> np.uint64(16)) % np.uint64(v * v)
        words = self.pairs[picks].tolist()
        out = []
        for n, (hid, key) in enumerate(zip(ids, keys.tolist(), strict=True)):
            if self.words_convention:
                lead = [f"blk{self.seed:x}x{hid}"]
            else:
                lead = [self.vocab[(key // v**d) % v] for d in range(head)]
            row = words[n]
            if body % 2:  # an odd body ends on one word: the last pair's first
                row[-1] = row[-1].split(" ", 1)[0]
            out.append(" ".join(lead + row))
        return out

    def blocks(self, hash_ids: Sequence[int]) -> list[str]:
        """The full text of each block (cached)."""
        cache = self._cache
        missing = list(dict.fromkeys(h for h in hash_ids if h not in cache))
        if missing:
            for h, text in zip(missing, self._build(missing), strict=True):
                cache[h] = text
        out = []
        for h in hash_ids:
            cache.move_to_end(h)
            out.append(cache[h])
        while len(cache) > self._cap:
            cache.popitem(last=False)
        return out

    def prompt(self, hash_ids: Sequence[int], input_tokens: int) -> str:
        """The prompt of a turn: its blocks in order, the last cut so the whole is input_tokens."""
        b, n = self.block_tokens, len(hash_ids)
        if n == 0 or input_tokens > n * b or input_tokens <= (n - 1) * b:
            raise ValueError(
                f"input_tokens {input_tokens} needs {-(-input_tokens // b)} blocks of {b} tokens; got {n} hash_ids"
            )
        texts = self.blocks(hash_ids)
        overhead = 0
        if self.sizer is not None:  # what the prompt's start (and template) adds, as the sizer fitted it
            w0 = texts[0].split(" ", 1)[0]
            overhead = self.sizer.first[w0] - self.sizer.more[w0] + self.sizer.bias
        last = max(1, input_tokens - overhead - (n - 1) * b)
        if last < b:
            texts[-1] = " ".join(texts[-1].split(" ", last)[:last])
        return " ".join(texts)


# --- the hit rate a trace predicts ----------------------------------------------------------------
def send_order(sessions: Sequence[Session]) -> list[tuple[float, Session, int]]:
    """Every turn as (send time, session, turn index), in send order: a trace's send time where it
    gives one, else the previous turn's send plus think time (no service time: the order, not the
    clock, is what matters here); a subagent starts from its parent's fork turn."""
    by_id = {s.id: s for s in sessions}
    times: dict[str, list[float]] = {}

    def turn_times(s: Session) -> list[float]:
        if s.id in times:
            return times[s.id]
        t = s.start_s
        if s.parent is not None and s.parent in by_id and s.fork_after_turn:
            parent = turn_times(by_id[s.parent])
            t = parent[min(s.fork_after_turn, len(parent)) - 1]
        out = []
        for turn in s.turns:
            t = turn.send_at_s if turn.send_at_s is not None else t + turn.think_s
            out.append(t)
        times[s.id] = out
        return out

    events = [(at, k, j) for k, s in enumerate(sessions) for j, at in enumerate(turn_times(s))]
    events.sort()
    return [(at, sessions[k], j) for at, k, j in events]


def expected_hit_rate(sessions: Sequence[Session], block_tokens: int, capacity_blocks: int | None = None) -> float:
    """Prefix-cache hit tokens / prompt tokens when the turns are sent in send order to a server
    caching blocks of SERVER_BLOCK_TOKENS (16) tokens with LRU eviction (``capacity_blocks`` server
    blocks; None: unbounded).

    Counted as vLLM counts: a server block is keyed by its whole prefix (a trace block's id after
    the same ids); only full blocks are cached, and at most input_tokens - 1 tokens hit (the last
    token is always computed); a prompt hits its leading cached blocks up to the first miss.
    ``block_tokens`` (the trace's) is a multiple of 16: one trace block is block_tokens / 16 server
    blocks. Output tokens are not cached here (their text never recurs in a later prompt)."""
    if block_tokens % SERVER_BLOCK_TOKENS:
        raise ValueError(f"block_tokens {block_tokens} must be a multiple of {SERVER_BLOCK_TOKENS}")
    per = block_tokens // SERVER_BLOCK_TOKENS
    cache: OrderedDict[int, int] = OrderedDict()  # prefix key -> server blocks of it cached
    used = hit_tokens = prompt_tokens = 0
    for _, s, j in send_order(sessions):
        turn = s.turns[j]
        full = (turn.input_tokens - 1) // SERVER_BLOCK_TOKENS
        prompt_tokens += turn.input_tokens
        chain, hits, broken = 0, 0, False
        for i, hid in enumerate(turn.hash_ids):
            need = min(per, full - i * per)
            if need <= 0:
                break
            chain = hash((chain, hid))
            have = cache.get(chain, 0)
            if not broken:
                hits += min(have, need)
                broken = have < need
            if need > have:
                cache[chain] = need
                used += need - have
            cache.move_to_end(chain)
        hit_tokens += hits * SERVER_BLOCK_TOKENS
        if capacity_blocks is not None:
            while used > capacity_blocks and cache:
                used -= cache.popitem(last=False)[1]
    return hit_tokens / prompt_tokens if prompt_tokens else 0.0
