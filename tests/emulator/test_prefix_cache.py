"""The emulator's prefix cache: chain-hashed 16-token blocks, hits charged no prefill, LRU eviction bounded
by the KV cache, a host-memory tier, and vLLM's prefix-cache counters."""

from __future__ import annotations

import asyncio
import random
import re
import time

import pytest
from emulator_fixtures import h100_8b, make_config, serve

from bakeoff.bench.sessions.session_sources import SyntheticSpec, generate
from bakeoff.bench.sessions.workload import PromptBlocks, expected_hit_rate, send_order
from bakeoff.plan.workload import Spread
from bakeoff.serving.emulator import prefix_cache
from bakeoff.serving.emulator.engine import RooflineEngine, Sequence
from bakeoff.serving.emulator.prefix_cache import BLOCK_TOKENS, PrefixCache, block_keys
from bakeoff.tokens import VOCAB
from bakeoff.twin.roofline import Roofline


def words(n: int, tag: str) -> list[str]:
    rng = random.Random(tag)
    return [f"{tag}-start"] + rng.choices(VOCAB, k=n - 1)


def counters(text: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(r"^(vllm:[a-z_]+_total)\{[^}]*\} (\S+)$", text, re.M)}


# keys -------------------------------------------------------------------------
def test_keys_name_whole_prefixes_and_only_full_blocks():
    a = words(100, "a")
    b = a[:40] + ["different"] + a[41:]
    ka, kb = block_keys(a), block_keys(b)
    assert len(ka) == 100 // BLOCK_TOKENS == 6
    assert ka[:2] == kb[:2]  # words 0..31 shared
    assert all(x != y for x, y in zip(ka[2:], kb[2:], strict=True))  # block 2 differs, so every later key does
    assert block_keys(a[16:])[0] != ka[1]  # same words at another position: another key


def test_a_256k_word_prompt_has_one_chained_key_per_full_block():
    """A long prompt's keys are one per full block, each a prefix's (so a shorter prompt's keys lead them).
    What hashing it costs is timed by benchmarks/prefix_cache_keys.py, not here."""
    ws = words(256_000 + 5, "long")
    keys = block_keys(ws)
    assert len(keys) == 256_000 // BLOCK_TOKENS
    assert len(set(keys)) == len(keys)
    assert block_keys(ws[: 100 * BLOCK_TOKENS + 3]) == keys[:100]


# the cache on its own ------------------------------------------------------------
def test_lru_evicts_least_recent_and_tails_first():
    c = PrefixCache(capacity_blocks=10)
    a, b = block_keys(words(64, "a")), block_keys(words(64, "b"))  # 4 blocks each
    for keys in (a, b):
        c.acquire(keys)
        c.release(keys)
    c.acquire(a)  # a used again: now the more recent prefix
    c.release(a)
    c.shrink(5)
    assert c.match(a, 99).hbm == 4
    assert c.match(b, 99).hbm == 1  # b's tail went first; its first block is what remains of it
    c.acquire(a)
    c.shrink(0)  # held blocks are never evicted
    assert c.match(a, 99).hbm == 4 and c.match(b, 99).hbm == 0


def test_host_tier_takes_evicted_blocks_and_gives_them_back():
    c = PrefixCache(capacity_blocks=10, host_capacity_blocks=3)
    a = block_keys(words(80, "a"))  # 5 blocks
    c.acquire(a)
    c.release(a)
    c.shrink(2)  # a's last 3 blocks move to the host
    assert c.match(a, 99) == prefix_cache.Match(hbm=2, host=3)
    c.acquire(a)
    assert c.match(a, 99).hbm == 5 and not c.host  # loaded back: out of the host tier
    c.release(a)
    c.shrink(0)  # 5 evicted into a 3-block host tier: the first two evicted are dropped
    assert c.match(a, 99) == prefix_cache.Match(hbm=0, host=3)  # tails went first: the prefix survives
    assert len(c.host) == 3


# through the scheduler ---------------------------------------------------------
def tiny(capacity: int) -> Roofline:
    """Weights read in 1 ms; 0.01 ms of compute per prompt token; 1e5 KV bytes per token."""
    return Roofline(
        params=1e9,
        active_params=1e9,
        bytes_per_param=1.0,
        kv_bytes_per_token=1e5,
        kv_capacity_tokens=capacity,
        prefill_flops_per_s=2e14,
        decode_bytes_per_s=1e12,
        max_num_seqs=64,
        context=10_000,
    )


def seq(ws: list[str], n_out: int = 1) -> Sequence:
    return Sequence(len(ws), n_out, n_out, blocks=block_keys(ws))


def run_alone(e: RooflineEngine, s: Sequence) -> float:
    """Run one request to its end; return the emulated seconds of its first step (its prefill)."""
    e.waiting.append(s)
    first = e.plan_step()
    e.finish_step()
    while e.running:
        e.plan_step()
        e.finish_step()
    return first


def test_a_hit_is_not_prefilled_again():
    async def go():
        e = RooflineEngine(tiny(100_000), cache=PrefixCache(100_000 // 16))
        shared = words(4100, "shared")
        cold = run_alone(e, seq(shared + words(200, "x")))
        warm_seq = seq(shared + words(300, "y"))
        warm = run_alone(e, warm_seq)
        return cold, warm, e.stats

    cold, warm, st = asyncio.run(go())
    assert st.prefix_hits == 4096  # 256 full blocks; the 4 shared words of block 256 are recomputed
    assert st.prefix_queries == 4300 + 4400
    assert st.prompt_tokens == 4300 + 4400  # vLLM's prompt counter still counts every prompt token
    assert cold == pytest.approx(2 * 1e9 * 4300 / 2e14)  # 43 ms of compute
    assert warm == pytest.approx(2 * 1e9 * (4400 - 4096) / 2e14)  # only the 304 uncached tokens


def test_a_whole_cached_prompt_still_computes_its_last_token():
    async def go():
        e = RooflineEngine(tiny(100_000), cache=PrefixCache(100_000 // 16))
        p = words(64, "p")
        run_alone(e, seq(p))
        run_alone(e, seq(p))
        return e.stats.prefix_hits

    assert asyncio.run(go()) == 48  # 64 tokens: blocks of at most 63 may hit, so 3 blocks


def test_eviction_once_the_kv_cache_is_full():
    """A 160-token KV cache (10 blocks): each request reserves its prompt + output while it runs, so cached
    blocks of finished requests give way, least recently used first; the third request evicts the first."""

    async def go():
        e = RooflineEngine(tiny(160), cache=PrefixCache(10))
        a, b, c = words(80, "a"), words(80, "b"), words(79, "c")
        for ws in (a, b, c):  # c reserves 80 tokens (5 blocks) while it runs: a's 5 blocks must go
            run_alone(e, seq(ws))
        hits = {}
        for name, ws in (("b", b), ("a", a)):
            before = e.stats.prefix_hits
            run_alone(e, seq(ws))
            hits[name] = e.stats.prefix_hits - before
        return hits

    hits = asyncio.run(go())
    assert hits == {"b": 64, "a": 0}  # b (79 tokens may hit: 4 blocks) survived; a was least recently used


def test_host_tier_hit_costs_transfer_not_prefill():
    async def go():
        roof = tiny(160)
        e = RooflineEngine(roof, cache=PrefixCache(10, host_capacity_blocks=100), host_bytes_per_s=1e10)
        a = words(80, "a")
        run_alone(e, seq(a))
        run_alone(e, seq(words(80, "b")))
        run_alone(e, seq(words(79, "c")))  # a's blocks are evicted to the host tier
        step = run_alone(e, seq(a))
        return step, e.stats

    step, st = asyncio.run(go())
    assert st.external_hits == 64 and st.prefix_hits == 0
    assert st.external_queries == 80 + 80 + 79 + 80  # HBM misses are looked up in the host tier
    load = 64 * 1e5 / 1e10  # 0.64 ms at 10 GB/s
    assert step == pytest.approx(load + max(2 * 1e9 * 16 / 2e14, (1e9 + 0) / 1e12))  # + 16 tokens' step (1 ms)


# over HTTP ------------------------------------------------------------------------
async def ttft(s, body) -> float:
    t0 = time.perf_counter()
    r = await s.post("/v1/completions", json=body | {"stream": True, "max_tokens": 2, "ignore_eos": True})
    async for line in r.content:
        if line.startswith(b"data: {"):
            return time.perf_counter() - t0
    raise AssertionError("no chunk")


def test_server_counts_hits_and_answers_sooner(run):
    shared = " ".join(words(4100, "shared"))

    async def go():
        async with serve(make_config(h100_8b())) as s:
            cold = await ttft(s, {"prompt": shared + " " + " ".join(words(60, "one"))})
            warm = await ttft(s, {"prompt": shared + " " + " ".join(words(60, "two"))})
            text = await (await s.get("/metrics")).text()
            version = await (await s.get("/version")).json()
            return cold, warm, counters(text), version

    cold, warm, c, version = run(go())
    assert c["vllm:prefix_cache_hits_total"] == 4096
    assert c["vllm:prefix_cache_queries_total"] == 2 * 4160
    assert "vllm:external_prefix_cache_hits_total" not in c  # no host tier configured
    assert warm < cold / 2  # prefill of 4160 tokens (~130 ms on H100 at 0.45) against 64
    cache = version["roofline"]["prefix_cache"]
    assert cache["block_tokens"] == 16 and cache["host_capacity_blocks"] == 0
    assert cache["capacity_blocks"] == version["roofline"]["kv_capacity_tokens"] // 16


def test_chat_prompts_hit_on_their_messages_in_order(run):
    history = " ".join(words(1000, "chat"))

    async def go():
        async with serve(make_config(h100_8b(emulator={"time_scale": 0.01}))) as s:
            first = [{"role": "user", "content": history}]
            await s.post("/v1/chat/completions", json={"messages": first, "max_tokens": 4})
            more = first + [{"role": "assistant", "content": "sure"}, {"role": "user", "content": "go on"}]
            await s.post("/v1/chat/completions", json={"messages": more, "max_tokens": 4})
            return counters(await (await s.get("/metrics")).text())

    assert run(go())["vllm:prefix_cache_hits_total"] == 992  # 1000 content words: 62 full blocks


def test_kv_offload_target_exports_the_host_tier(run):
    t = h100_8b(kv_offload={"backend": "vllm_native", "host_memory_gb": 64, "host_tbps": 0.05})

    async def go():
        async with serve(make_config(t)) as s:
            await s.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 1})
            return counters(await (await s.get("/metrics")).text()), await (await s.get("/version")).json()

    c, version = run(go())
    assert c["vllm:external_prefix_cache_queries_total"] == 3 and c["vllm:external_prefix_cache_hits_total"] == 0
    cache = version["roofline"]["prefix_cache"]
    assert cache["host_capacity_blocks"] == int(64e9 // (version["roofline"]["kv_bytes_per_token"] * 16))
    assert cache["host_tbps"] == pytest.approx(0.05)


def test_prefix_caching_off_by_engine_flag(run):
    t = h100_8b(engine_args=["--no-enable-prefix-caching"])

    async def go():
        async with serve(make_config(t)) as s:
            return await (await s.get("/metrics")).text(), await (await s.get("/version")).json()

    text, version = run(go())
    assert "prefix_cache" not in text and version["roofline"]["prefix_cache"] is None


def hit_rate_of_prompts(prompts: list[list[str]]) -> float:
    """Independently of the emulator: an unbounded cache of whole-prefix tuples, full 16-token blocks,
    at most prompt length - 1 tokens per hit."""
    seen: set[tuple[str, ...]] = set()
    hits = total = 0
    for p in prompts:
        n_blocks = len(p) // 16
        hit = 0
        while hit < min(n_blocks, (len(p) - 1) // 16) and tuple(p[: (hit + 1) * 16]) in seen:
            hit += 1
        hits, total = hits + hit * 16, total + len(p)
        seen.update(tuple(p[: (i + 1) * 16]) for i in range(n_blocks))
    return hits / total


def test_hit_rate_over_multi_turn_sessions_matches_the_blocks(run):
    """8 sessions of 6 turns, each turn resending the context so far plus new words; sessions run at once."""
    rng = random.Random(3)
    sessions = []
    for i in range(8):
        context, turns = words(rng.randint(50, 400), f"s{i}"), []
        for j in range(6):
            context = context + words(rng.randint(20, 300), f"s{i}t{j}")
            turns.append(list(context))
        sessions.append(turns)

    async def go():
        async with serve(make_config(h100_8b(emulator={"time_scale": 0.01}))) as s:

            async def session(turns):
                for p in turns:
                    await (await s.post("/v1/completions", json={"prompt": " ".join(p), "max_tokens": 3})).read()

            await asyncio.gather(*(session(t) for t in sessions))
            return counters(await (await s.get("/metrics")).text())

    c = run(go())
    emulated = c["vllm:prefix_cache_hits_total"] / c["vllm:prefix_cache_queries_total"]
    # sessions share nothing, so only the order within a session matters: replay session by session
    expected = hit_rate_of_prompts([p for turns in sessions for p in turns])
    assert expected > 0.5
    assert emulated == pytest.approx(expected, abs=0.01)


def test_hit_rate_matches_the_traces_prediction(run):
    """Synthetic agentic sessions (subagents forking from their parents), prompts built from the trace's
    block ids, sent in send order: the emulator's /metrics hit rate is the rate the hash_ids predict."""
    spec = SyntheticSpec(
        sessions=6,
        turns=Spread(mean=4, max=6),
        first_prompt_tokens=Spread(mean=1500, max=4000),
        new_tokens_per_turn=Spread(mean=300, max=1000),
        output_tokens=Spread(mean=100, max=300),
        subagent_prob=0.3,
        subagent_turns=Spread(mean=2, max=4),
        block_tokens=64,
    )
    sessions = generate(spec, seed=5)
    blocks = PromptBlocks(spec.block_tokens)
    prompts = [blocks.prompt(s.turns[j].hash_ids, s.turns[j].input_tokens) for _, s, j in send_order(sessions)]

    async def go():
        async with serve(make_config(h100_8b(emulator={"time_scale": 0.01}))) as s:
            for p in prompts:
                await (await s.post("/v1/completions", json={"prompt": p, "max_tokens": 1})).read()
            return counters(await (await s.get("/metrics")).text())

    c = run(go())
    emulated = c["vllm:prefix_cache_hits_total"] / c["vllm:prefix_cache_queries_total"]
    expected = expected_hit_rate(sessions, spec.block_tokens)
    print(f"EMULATED hit rate {emulated:.4f}, trace predicts {expected:.4f} over {len(prompts)} turns")
    assert expected > 0.3
    assert emulated == pytest.approx(expected, abs=0.01)
