"""When each output token of each request is ready: the roofline emulator's scheduler.

RooflineEngine is one continuous-batching loop, like vLLM's V1 scheduler: every step gives one
token to each decoding sequence, then fills the rest of the step's token budget with prompt
chunks: first of sequences already being prefilled, then of waiting requests admitted while
sequence slots and KV cache allow. A sequence's first token comes out of the step that finishes
its prompt. Step times come from roofline.Roofline, multiplied by time_scale. KV space is reserved
for prompt + max_tokens at admission, so a sequence is never preempted; requests that do not fit
wait.

With a prefix cache (prefix_cache.py), a request admitted with a cached prefix starts with those
tokens already prefilled: only the rest is charged, plus, for blocks found in the host tier, their
transfer at the host link's bandwidth, added to the admitting step. vLLM's prompt-token counter
still counts every prompt token. With speculative decoding (speculation.py), each decode step is a
verification step (Roofline.verify_step_s) that gives a sequence 1 + accepted tokens at once.

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
from typing import Any

from bakeoff.serving.emulator.prefix_cache import PrefixCache
from bakeoff.serving.emulator.speculation import Acceptance
from bakeoff.twin.roofline import Roofline


async def stop_task(task: asyncio.Task[None] | None) -> None:
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
    blocks: list[int] = field(default_factory=list)  # prefix-cache keys of the prompt's full blocks
    held: int = 0  # leading blocks of `blocks` this sequence holds in the cache
    kv_in: int = 0  # prompt tokens whose KV arrived from a prefill node (disaggregated decode): not prefilled here
    ready: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Stats:
    """Counters /metrics reports, named after vLLM's."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: collections.Counter[str] = field(default_factory=collections.Counter)
    aborted: int = 0
    late_s: float = 0.0  # sum over emissions of (emitted - scheduled), seconds
    late_max_s: float = 0.0
    emissions: int = 0
    # speculative decoding, exported only when the target has it (as vLLM does)
    speculative: bool = False
    spec_drafts: int = 0  # verification steps x sequences
    spec_draft_tokens: int = 0  # k per draft
    spec_accepted_tokens: int = 0
    # prefix cache, in tokens; the external (host) tier only with kv_offload
    prefix_cache: bool = False
    prefix_queries: int = 0
    prefix_hits: int = 0
    external_cache: bool = False
    external_queries: int = 0
    external_hits: int = 0

    def lateness(self, late: float) -> None:
        """Record how far behind schedule an emission ran (the emulator's own timing error)."""
        self.late_s += late
        self.emissions += 1
        if late > self.late_max_s:
            self.late_max_s = late


class RooflineEngine:
    def __init__(
        self,
        roofline: Roofline,
        time_scale: float = 1.0,
        *,
        cache: PrefixCache | None = None,
        host_bytes_per_s: float = 0.0,
        speculation: Acceptance | None = None,
    ):
        if cache is not None and cache.host_capacity_blocks and host_bytes_per_s <= 0:
            raise ValueError("a prefix cache with a host tier needs host_bytes_per_s > 0 (kv_offload.host_tbps)")
        self.roofline = roofline
        self.time_scale = time_scale
        self.cache = cache
        self.host_bytes_per_s = host_bytes_per_s  # host tier -> HBM, whole node
        self.speculation = speculation
        self.running: list[Sequence] = []
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.reserved = 0  # KV tokens promised to running sequences
        self.kv_tokens = 0  # KV tokens in use
        self.stats = Stats(
            speculative=speculation is not None,
            prefix_cache=cache is not None,
            external_cache=cache is not None and cache.host_capacity_blocks > 0,
        )
        self._out: list[Sequence] = []  # sequences that get a token at the end of this step
        self._decoding = 0  # the first _decoding of _out decode (verify, with speculation) this step
        self._load_s = 0.0  # host-tier transfers of this step's admissions, emulated seconds
        self._busy_s = 0.0  # wall seconds of every step begun so far (the current one in full)
        self._step_end = 0.0  # time.monotonic() when the current step ends
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # lifecycle -------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="roofline-scheduler")

    async def stop(self) -> None:
        await stop_task(self._task)

    @property
    def kv_usage(self) -> float:
        return self.kv_tokens / self.roofline.kv_capacity_tokens

    def summary(self) -> dict[str, Any]:
        """The cache and speculation settings /version reports beside the roofline."""
        cache = self.cache.summary() if self.cache else None
        if cache is not None and cache["host_capacity_blocks"]:
            cache["host_tbps"] = self.host_bytes_per_s / 1e12
        return {
            "prefix_cache": cache,
            "speculative": self.speculation.summary() if self.speculation else None,
        }

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
        # sparse attention reads at most index_topk cached tokens per sequence
        kv_read = sum(map(r.kv_read_tokens, (s.kv for s in self._out))) if r.index_topk is not None else decoding_kv
        self._decoding = decoding
        per_seq = 1 + (self.speculation.draft_tokens if self.speculation else 0)
        budget = r.max_num_batched_tokens - decoding * per_seq
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
            if self.cache:
                self._reuse(seq, self.cache)
            if seq.kv_in > seq.prefilled:  # its KV was transferred in: only the last prompt token runs here
                arrived = min(seq.kv_in, seq.prompt_tokens - 1) - seq.prefilled
                seq.prefilled, seq.kv, self.kv_tokens = (
                    seq.prefilled + arrived,
                    seq.kv + arrived,
                    self.kv_tokens + arrived,
                )
            take = self._prefill(seq, budget)
            chunk, budget = chunk + take, budget - take
        if self.cache:  # unused cached blocks get what running sequences do not reserve
            self.cache.shrink(self.cache.capacity_blocks - -(-self.reserved // self.cache.block_tokens))
        load_s, self._load_s = self._load_s, 0.0
        if self.speculation is not None and decoding:  # prompt chunks ride in the verification pass
            step = r.verify_step_s(decoding, self.speculation.draft_tokens, decoding_kv, kv_read, prefill_tokens=chunk)
        else:
            step = r.step_s(chunk, decoding, decoding_kv, kv_read)
        return step + load_s

    def _reuse(self, seq: Sequence, cache: PrefixCache) -> None:
        """Start a newly admitted sequence from its cached prefix (HBM, then host tier) and count the lookup."""
        b, st = cache.block_tokens, self.stats
        found = cache.match(seq.blocks, (seq.prompt_tokens - 1) // b)
        st.prefix_queries += seq.prompt_tokens
        st.prefix_hits += found.hbm * b
        if st.external_cache:
            st.external_queries += seq.prompt_tokens - found.hbm * b
            st.external_hits += found.host * b
            if found.host:
                self._load_s += found.host * b * self.roofline.kv_bytes_per_token / self.host_bytes_per_s
        seq.held = found.hbm + found.host
        if seq.held:
            cache.acquire(seq.blocks[: seq.held])
            hit = seq.held * b
            seq.prefilled = seq.kv = hit
            self.kv_tokens += hit
            st.prompt_tokens += hit

    def _prefill(self, seq: Sequence, budget: int) -> int:
        take = min(seq.prompt_tokens - seq.prefilled, budget)
        seq.prefilled += take
        seq.kv += take
        self.kv_tokens += take
        self.stats.prompt_tokens += take
        if seq.prefilled >= seq.prompt_tokens:
            self._out.append(seq)
        if self.cache and seq.blocks:  # blocks this chunk completed are cached for later requests
            full = min(len(seq.blocks), seq.prefilled // self.cache.block_tokens)
            if full > seq.held:
                self.cache.acquire(seq.blocks[seq.held : full])
                seq.held = full
        return take

    def finish_step(self) -> None:
        """Tokens to every sequence that decoded (1 + accepted drafts with speculation) or finished its
        prompt (1); retire finished ones."""
        st, spec = self.stats, self.speculation
        for i, seq in enumerate(self._out):
            if not seq.done:
                n = 1
                if spec is not None and i < self._decoding:
                    accepted = spec.accepted()  # counted as verified, even past the sequence's end
                    st.spec_drafts += 1
                    st.spec_draft_tokens += spec.draft_tokens
                    st.spec_accepted_tokens += accepted
                    n = min(1 + accepted, seq.n_out - seq.produced)
                seq.produced += n
                seq.kv += n
                self.kv_tokens += n
                st.generation_tokens += n
                seq.ready.set()
                if seq.produced >= seq.n_out:
                    seq.done = True
        self._out = []
        keep = []
        for seq in self.running:
            if seq.done:
                self.reserved -= seq.prompt_tokens + seq.max_tokens
                self.kv_tokens -= seq.kv
                if seq.held and self.cache:
                    self.cache.release(seq.blocks[: seq.held])
                    seq.held = 0
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
