"""When each output token of each request is ready: the roofline emulator's scheduler.

RooflineEngine is one continuous-batching loop, like vLLM's V1 scheduler: every step gives one
token to each decoding sequence, then fills the rest of the step's token budget with prompt
chunks: first of sequences already being prefilled, then of waiting requests admitted while
sequence slots and KV cache allow. A sequence's first token comes out of the step that finishes
its prompt. Step times come from roofline.Roofline, multiplied by time_scale. KV space is reserved
for prompt + max_tokens at admission, so a sequence is never preempted; requests that do not fit
wait.

It yields, per request, how many new tokens are ready; the HTTP layer turns that into chunks.
(Scripted timing has no scheduler to model: scripted.py is a server of its own.)
Deadlines use time.monotonic(), not loop.time(): uvloop's loop clock counts whole milliseconds.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from bakeoff.serving.emulator.roofline import Roofline


async def stop_task(task: asyncio.Task | None) -> None:
    """Cancel a background task and wait until it has unwound."""
    if task:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass


class Rejected(ValueError):
    """A request this server could never run (too long for the context or the KV cache)."""


@dataclass(eq=False)
class Sequence:
    prompt_tokens: int
    n_out: int  # tokens this request will produce
    max_tokens: int  # what KV space is reserved for
    arrival: float = 0.0  # time.monotonic() when the request arrived
    produced: int = 0
    prefilled: int = 0  # prompt tokens processed so far
    kv: int = 0  # tokens in the KV cache now
    done: bool = False
    ready: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Stats:
    """Counters /metrics reports, named after vLLM's."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: collections.Counter = field(default_factory=collections.Counter)
    aborted: int = 0
    late_s: float = 0.0  # sum over emissions of (emitted - scheduled), seconds
    late_max_s: float = 0.0
    emissions: int = 0

    def lateness(self, late: float) -> None:
        """Record how far behind schedule an emission ran (the emulator's own timing error)."""
        self.late_s += late
        self.emissions += 1
        if late > self.late_max_s:
            self.late_max_s = late


class RooflineEngine:
    def __init__(self, roofline: Roofline, time_scale: float = 1.0):
        self.roofline = roofline
        self.time_scale = time_scale
        self.running: list[Sequence] = []
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.reserved = 0  # KV tokens promised to running sequences
        self.kv_tokens = 0  # KV tokens in use
        self.stats = Stats()
        self._out: list[Sequence] = []  # sequences that get a token at the end of this step
        self._busy_s = 0.0  # wall seconds of every step begun so far (the current one in full)
        self._step_end = 0.0  # time.monotonic() when the current step ends
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    # lifecycle -------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="roofline-scheduler")

    async def stop(self) -> None:
        await stop_task(self._task)

    @property
    def kv_usage(self) -> float:
        return self.kv_tokens / self.roofline.kv_capacity_tokens

    def busy_seconds(self, now: float) -> float:
        """Wall seconds spent in steps up to `now` (time.monotonic()), the current step counted only up to
        now, so a power sampler can difference it per interval without steps straddling the boundary."""
        return self._busy_s - max(0.0, self._step_end - now)

    # requests --------------------------------------------------------------
    def check(self, prompt_tokens: int, max_tokens: int) -> None:
        r = self.roofline
        if prompt_tokens + max_tokens > r.context:
            raise Rejected(
                f"This model's maximum context length is {r.context} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in "
                "the completion). Please reduce the length of the messages or completion."
            )
        if prompt_tokens + max_tokens > r.kv_capacity_tokens:
            raise Rejected(
                f"prompt + max_tokens = {prompt_tokens + max_tokens} tokens exceeds this server's KV cache "
                f"of {r.kv_capacity_tokens} tokens; lower max_tokens or the prompt length"
            )

    async def stream(self, seq: Sequence) -> AsyncGenerator[int, None]:
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
            if not seq.done:  # client went away: free its slot now
                seq.done = True
                self.stats.aborted += 1
                if seq in self.waiting:
                    self.waiting.remove(seq)

    # the scheduler loop ----------------------------------------------------
    def plan_step(self) -> float:
        """Lay out the next step (decode tokens, prompt chunks, admissions); return its duration in
        emulated seconds (before time_scale)."""
        r = self.roofline
        self._out = [s for s in self.running if s.prefilled >= s.prompt_tokens and not s.done]
        decoding, decoding_kv = len(self._out), sum(s.kv for s in self._out)
        budget = r.max_num_batched_tokens - decoding
        chunk = 0
        for seq in self.running:
            if budget <= 0:
                break
            if seq.prefilled < seq.prompt_tokens and not seq.done:
                take = self._prefill(seq, budget)
                chunk, budget = chunk + take, budget - take
        while self.waiting and len(self.running) < r.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            need = seq.prompt_tokens + seq.max_tokens
            if self.reserved + need > r.kv_capacity_tokens:
                break
            self.waiting.popleft()
            self.running.append(seq)
            self.reserved += need
            take = self._prefill(seq, budget)
            chunk, budget = chunk + take, budget - take
        return r.step_s(chunk, decoding, decoding_kv)

    def _prefill(self, seq: Sequence, budget: int) -> int:
        take = min(seq.prompt_tokens - seq.prefilled, budget)
        seq.prefilled += take
        seq.kv += take
        self.kv_tokens += take
        self.stats.prompt_tokens += take
        if seq.prefilled >= seq.prompt_tokens:
            self._out.append(seq)
        return take

    def finish_step(self) -> None:
        """One token to every sequence that decoded or finished its prompt; retire finished ones."""
        for seq in self._out:
            if not seq.done:
                seq.produced += 1
                seq.kv += 1
                self.kv_tokens += 1
                self.stats.generation_tokens += 1
                seq.ready.set()
                if seq.produced >= seq.n_out:
                    seq.done = True
        self._out = []
        keep = []
        for seq in self.running:
            if seq.done:
                self.reserved -= seq.prompt_tokens + seq.max_tokens
                self.kv_tokens -= seq.kv
            else:
                keep.append(seq)
        self.running = keep

    async def _loop(self) -> None:
        clock = time.monotonic
        next_t = clock()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                next_t = clock()
            wall = self.plan_step() * self.time_scale
            next_t = max(next_t, clock() - 0.001) + wall  # absolute deadlines
            self._busy_s += wall
            self._step_end = next_t
            delay = next_t - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            self.stats.lateness(clock() - next_t)
            self.finish_step()
