"""When each output token of each request is ready: the emulator's two schedulers.

RooflineEngine is one continuous-batching loop, like vLLM's: every step first admits waiting
requests while sequence slots and KV cache allow (their prefill time is added to that step and
their first token comes out of it), then gives one token to every running sequence. Step times
come from roofline.Roofline, multiplied by time_scale. KV space is reserved for prompt +
max_tokens at admission, so a sequence is never preempted; requests that do not fit wait.

ScriptedEngine has no batching at all: fixed TTFT and inter-token latency per request, on absolute
deadlines from the arrival time, so timer slop never accumulates. It is the null server a
benchmark client measures its own overhead against.

Both yield, per request, how many new tokens are ready; the HTTP layer turns that into chunks.
"""
from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from bakeoff.serving.emulator.config import Scripted
from bakeoff.serving.emulator.roofline import Roofline


class Rejected(ValueError):
    """A request this server could never run (too long for the context or the KV cache)."""


@dataclass(eq=False)
class Sequence:
    prompt_tokens: int
    n_out: int                 # tokens this request will produce
    max_tokens: int            # what KV space is reserved for
    arrival: float = 0.0       # loop time the request arrived
    produced: int = 0
    kv: int = 0                # tokens in the KV cache now
    done: bool = False
    ready: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Stats:
    """Counters /metrics reports, named after vLLM's."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: collections.Counter = field(default_factory=collections.Counter)


class RooflineEngine:
    def __init__(self, roofline: Roofline, time_scale: float = 1.0):
        self.roofline = roofline
        self.time_scale = time_scale
        self.running: list[Sequence] = []
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.reserved = 0          # KV tokens promised to running sequences
        self.kv_tokens = 0         # KV tokens in use
        self.stats = Stats()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    # lifecycle -------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="roofline-scheduler")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    @property
    def kv_usage(self) -> float:
        return self.kv_tokens / self.roofline.kv_capacity_tokens

    # requests --------------------------------------------------------------
    def check(self, prompt_tokens: int, max_tokens: int) -> None:
        r = self.roofline
        if prompt_tokens + max_tokens > r.context:
            raise Rejected(f"This model's maximum context length is {r.context} tokens. However, you requested "
                           f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in "
                           "the completion). Please reduce the length of the messages or completion.")
        if prompt_tokens + max_tokens > r.kv_capacity_tokens:
            raise Rejected(f"prompt + max_tokens = {prompt_tokens + max_tokens} tokens exceeds this server's KV cache "
                           f"of {r.kv_capacity_tokens} tokens; lower max_tokens or the prompt length")

    async def stream(self, seq: Sequence) -> AsyncIterator[int]:
        """Yield the number of new tokens each time some are ready, until seq.n_out are out."""
        self.waiting.append(seq)
        self._wake.set()
        sent = 0
        try:
            while sent < seq.n_out:
                await seq.ready.wait()
                seq.ready.clear()
                new, sent = seq.produced - sent, seq.produced
                yield new
        finally:
            if not seq.done:            # client went away: free its slot now
                seq.done = True
                if seq in self.waiting:
                    self.waiting.remove(seq)

    # the scheduler loop ----------------------------------------------------
    def _admit(self) -> float:
        r, prefill = self.roofline, 0.0
        while self.waiting and len(self.running) < r.max_num_seqs:
            seq = self.waiting[0]
            need = seq.prompt_tokens + seq.max_tokens
            if self.reserved + need > r.kv_capacity_tokens:
                break
            self.waiting.popleft()
            self.running.append(seq)
            self.reserved += need
            seq.kv = seq.prompt_tokens
            self.kv_tokens += seq.kv
            self.stats.prompt_tokens += seq.prompt_tokens
            prefill += r.prefill_s(seq.prompt_tokens)
        return prefill

    def _emit(self) -> None:
        keep = []
        for seq in self.running:
            if not seq.done:
                seq.produced += 1
                seq.kv += 1
                self.kv_tokens += 1
                self.stats.generation_tokens += 1
                seq.ready.set()
                if seq.produced >= seq.n_out:
                    seq.done = True
            if seq.done:
                self.reserved -= seq.prompt_tokens + seq.max_tokens
                self.kv_tokens -= seq.kv
            else:
                keep.append(seq)
        self.running = keep

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                next_t = loop.time()
            decoding, kv = len(self.running), self.kv_tokens
            step = self._admit() + self.roofline.decode_step_s(decoding, kv)
            next_t = max(next_t, loop.time() - 0.001) + step * self.time_scale   # absolute deadlines
            delay = next_t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self._emit()


class ScriptedEngine:
    def __init__(self, script: Scripted):
        self.script = script
        self.running: set[Sequence] = set()
        self.waiting: tuple = ()
        self.stats = Stats()
        self.kv_usage = 0.0

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def check(self, prompt_tokens: int, max_tokens: int) -> None:
        pass

    async def stream(self, seq: Sequence) -> AsyncIterator[int]:
        loop = asyncio.get_running_loop()
        s = self.script
        first, gap = s.ttft_ms / 1000, s.tokens_per_chunk * s.itl_ms / 1000
        self.running.add(seq)
        self.stats.prompt_tokens += seq.prompt_tokens
        try:
            k = 0
            while seq.produced < seq.n_out:
                delay = seq.arrival + first + k * gap - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                new = min(s.tokens_per_chunk, seq.n_out - seq.produced)
                seq.produced += new
                self.stats.generation_tokens += new
                k += 1
                yield new
        finally:
            seq.done = True
            self.running.discard(seq)
