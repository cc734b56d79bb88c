"""Agentic session replay: how fast long prompts are built, and the prefix-cache hit rate a trace
predicts.

Parts (each a function printing its own table; ``--parts`` picks them):

- ``prompts``: build time of one prompt of 32k, 128k and 256k tokens from its hash ids, cold (no
  block text cached) and warm (the session's context already built, as every later turn finds it).
  Goal: a 256k-token prompt in <= 20 ms.
- ``trace``: a generated trace of ``--sessions`` sessions (seeded); its shape and the hit rate
  ``expected_hit_rate`` predicts for an unbounded cache and for smaller ones (in 16-token blocks).
- ``replay``: the trace (answers shortened to tens of tokens and tool time to tenths of a second,
  so a point takes seconds) replayed through the bench's session runner at each ``--concurrency``
  against the emulator (roofline, prefix cache; EMULATED) and the scripted server: turn send
  lateness (actual send - due time) p50/p99, the client's CPU share, and the emulator's own hit
  rate (its /metrics counters over the point) beside the trace's expected rate. Goals: p99
  lateness <= 1 ms at 64 concurrent sessions; hit rate within 1 percentage point of the expected.

    python benchmarks/session_replay.py [--sessions 200] [--seed 15] [--parts prompts trace replay]
        [--concurrency 8 32 64]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bakeoff import tokens
from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.load.loadgen import PointId
from bakeoff.bench.load.point import measure_sessions
from bakeoff.bench.load.session_load import SessionSender, point_seed
from bakeoff.bench.metrics import server_metrics
from bakeoff.bench.sessions.session_sources import Spread, SyntheticSpec, generate
from bakeoff.bench.sessions.workload import PromptBlocks, Session, expected_hit_rate
from bakeoff.plan import Workload
from bakeoff.plan.target import Target
from bakeoff.serving.emulator.scripted import ScriptedServerProcess

BLOCK_TOKENS = 512  # the trace's block (mooncake/AIPerf)
PROMPT_SIZES = (32_000, 128_000, 256_000)


# --- the trace ------------------------------------------------------------------------------------
def make_trace(sessions: int, seed: int) -> list[Session]:
    """The benchmark's sessions: the generator's stated defaults, ``sessions`` top-level sessions."""
    return generate(SyntheticSpec(sessions=sessions, block_tokens=BLOCK_TOKENS), seed)


# --- prompt build ---------------------------------------------------------------------------------
def prompt_build(repeats: int = 5) -> list[dict]:
    """Cold and warm build times per prompt size (median of ``repeats``; every cold build uses fresh
    hash ids, so no block text is cached)."""
    rows = []
    next_id = 10**9
    for size in PROMPT_SIZES:
        n_blocks = -(-size // BLOCK_TOKENS)
        cold, warm = [], []
        for _ in range(repeats):
            pb = PromptBlocks(BLOCK_TOKENS)
            ids = list(range(next_id, next_id + n_blocks))
            next_id += n_blocks
            t = time.perf_counter()
            text = pb.prompt(ids, size)
            cold.append(time.perf_counter() - t)
            t = time.perf_counter()
            pb.prompt(ids, size)
            warm.append(time.perf_counter() - t)
            if tokens.count(text) != size:
                raise SystemExit(f"prompt of {size} tokens came out {tokens.count(text)} words long")
        rows.append(
            {
                "tokens": size,
                "cold_ms": statistics.median(cold) * 1e3,
                "cold_min_ms": min(cold) * 1e3,
                "warm_ms": statistics.median(warm) * 1e3,
                "warm_min_ms": min(warm) * 1e3,
            }
        )
    return rows


def print_prompt_build() -> None:
    print("prompt build from hash ids (words convention, 1 word = 1 token), median and best of 5")
    print(f"{'tokens':>8} {'cold ms':>8} {'best':>6} {'warm ms':>8} {'best':>6}")
    for r in prompt_build():
        cold, warm = f"{r['cold_ms']:>8.1f} {r['cold_min_ms']:>6.1f}", f"{r['warm_ms']:>8.1f} {r['warm_min_ms']:>6.1f}"
        print(f"{r['tokens']:>8} {cold} {warm}")
    print("goal: 256k tokens in <= 20 ms")


# --- expected hit rate ----------------------------------------------------------------------------
def print_trace(sessions: list[Session]) -> None:
    top = [s for s in sessions if s.parent is None]
    turns = [t for s in sessions for t in s.turns]
    prompt = sum(t.input_tokens for t in turns)
    print(
        f"trace: {len(top)} sessions + {len(sessions) - len(top)} subagents, {len(turns)} turns, "
        f"{prompt / 1e6:.1f}M prompt tokens, longest context {max(t.input_tokens + t.output_tokens for t in turns)}"
    )
    t = time.perf_counter()
    unbounded = expected_hit_rate(sessions, BLOCK_TOKENS)
    took = time.perf_counter() - t
    print(f"expected hit rate, unbounded cache: {unbounded:.1%} (computed in {took * 1e3:.0f} ms)")
    for blocks in (1_000_000, 100_000, 10_000):
        rate = expected_hit_rate(sessions, BLOCK_TOKENS, capacity_blocks=blocks)
        print(f"expected hit rate, LRU of {blocks} 16-token blocks ({blocks * 16 / 1e6:.1f}M tokens): {rate:.1%}")


# --- replay against servers -------------------------------------------------------------------------
REPLAY_OUTPUT = Spread(mean=16, max=32)  # answers: tens of tokens, so a point takes seconds
REPLAY_THINK = Spread(mean=0.1, max=0.5)  # tool time, seconds
SCRIPT = {"ttft_ms": 20, "itl_ms": 5, "tokens_per_chunk": 1}  # the scripted server: known timing, no cache


def replay_trace(sessions: int, seed: int) -> list[Session]:
    spec = SyntheticSpec(
        sessions=sessions, block_tokens=BLOCK_TOKENS, output_tokens=REPLAY_OUTPUT, think_s=REPLAY_THINK
    )
    return generate(spec, seed)


@contextlib.contextmanager
def roofline_emulator(target: Target):
    """The emulator's roofline server for ``target`` on a free loopback port (EMULATED figures)."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-replay-") as tmp:
        cfg, port_file = Path(tmp) / "config.json", Path(tmp) / "port"
        cfg.write_text(json.dumps({"mode": "roofline", "target": target.model_dump(mode="json"), "api_key_env": None}))
        cmd = [sys.executable, "-m", "bakeoff.serving.emulator", "--config", str(cfg)]
        cmd += ["--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the emulator did not start")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{int(port_file.read_text())}"
        finally:
            proc.kill()
            proc.wait()


def replay_point(url: str, model: str, sessions: list[Session], concurrency: int, seed: int) -> dict:
    """One closed-loop point of every session at ``concurrency``, as the bench runs it."""
    w = Workload(name="replay", kind="sessions", sessions={"concurrent_sessions": [concurrency]})

    async def go() -> dict:
        client = StreamingClient(url, timeout_s=600)
        try:
            blocks = PromptBlocks(BLOCK_TOKENS, seed=point_seed(seed, concurrency, 0))
            t = time.perf_counter()
            sender = SessionSender(
                client,
                w,
                model,
                PointId("replay", "t", "replay", concurrency, 0),
                sessions,
                blocks,
                block_tokens=BLOCK_TOKENS,
                timeout_s=600,
            )
            build_s = time.perf_counter() - t
            before = server_metrics.scrape(url, None)
            t = time.perf_counter()
            recs, figures, sent = await measure_sessions(
                sender, warm=min(2 * concurrency, 1024), concurrency=concurrency
            )
            wall = time.perf_counter() - t
            server = server_metrics.point_figures(before, server_metrics.scrape(url, None))
        finally:
            await client.close()
        lags = np.asarray([r.send_lag for r in recs if r.send_lag is not None]) * 1e3
        return {
            "concurrency": concurrency,
            "turns": len(recs),
            "failed": sum(not r.ok for r in recs),
            "lag_p50_ms": float(np.percentile(lags, 50)),
            "lag_p99_ms": float(np.percentile(lags, 99)),
            "client_cpu_pct": figures.get("client_cpu_pct"),
            "hit_rate": server["prefix_cache_hit_rate"],
            "expected": sender.expected_hit_rate(sent),
            "build_s": build_s,
            "wall_s": wall,
        }

    return run_async(go())


def print_replay(sessions: list[Session], levels: list[int], seed: int) -> None:
    top = sum(1 for s in sessions if s.parent is None)
    turns = sum(len(s.turns) for s in sessions)
    print(
        f"replay: {top} sessions + {len(sessions) - top} subagents, {turns} turns; answers "
        f"{REPLAY_OUTPUT.mean:g} tokens mean, tool time {REPLAY_THINK.mean:g} s mean"
    )
    head = f"{'server':<22} {'sessions':>8} {'turns':>6} {'failed':>6} {'lag p50 ms':>10} {'lag p99 ms':>10} "
    print(head + f"{'client CPU':>10} {'hit rate':>8} {'expected':>8} {'build s':>7} {'wall s':>7}")

    def row(name: str, r: dict) -> None:
        hit = "–" if r["hit_rate"] is None else f"{r['hit_rate']:.1%}"
        exp = "–" if r["expected"] is None else f"{r['expected']:.1%}"
        print(
            f"{name:<22} {r['concurrency']:>8} {r['turns']:>6} {r['failed']:>6} {r['lag_p50_ms']:>10.3f} "
            f"{r['lag_p99_ms']:>10.3f} {r['client_cpu_pct']:>9.0f}% {hit:>8} {exp:>8} {r['build_s']:>7.1f} "
            f"{r['wall_s']:>7.1f}"
        )

    target = Target(
        name="mi355x-replay",
        provider="local",
        instance_type="BM.GPU.MI355X.8",
        model="llama-3.1-70b",
        quantization="fp8",
        kv_cache_dtype="fp8",
        tensor_parallel=8,
    )
    with roofline_emulator(target) as url:
        for c in levels:
            row("emulator (EMULATED)", replay_point(url, target.served_model_id, sessions, c, seed))
    with ScriptedServerProcess(SCRIPT) as srv:
        for c in levels:
            row("scripted", replay_point(srv.url, "scripted", sessions, c, seed))
    print("goals: lag p99 <= 1 ms at 64 sessions; emulator hit rate within 1 point of the expected")


PARTS = ("prompts", "trace", "replay")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200, help="top-level sessions in the generated trace")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--concurrency", nargs="+", type=int, default=[8, 32, 64], help="replay: concurrent sessions")
    args = ap.parse_args()
    sessions = make_trace(args.sessions, args.seed)
    if "prompts" in args.parts:
        print_prompt_build()
    if "trace" in args.parts:
        print_trace(sessions)
    if "replay" in args.parts:
        print_replay(replay_trace(args.sessions, args.seed), args.concurrency, args.seed)


if __name__ == "__main__":
    main()
