"""How much CPU the emulator needs, and how closely it keeps its schedule, at a given load.

The emulator shares the machine with the benchmark client it serves, so its own cost must be
known: this starts one emulator process (optionally pinned to a core), drives it with C
concurrent streaming requests from a minimal aiohttp client, and prints the emulator's CPU share,
its throughput and, in scripted mode, how late first chunks and the last chunk arrive against the
script (an upper bound on the emulator's own timing error: the client adds its share; the
server's own lateness is counted per first chunk in scripted mode, per step in roofline mode).

  python -m bakeoff.serving.emulator.loadcheck --mode scripted --ttft-ms 100 --itl-ms 10 \\
      --max-tokens 256 --concurrency 512 --requests 1024 --server-cpu 0 --client-cpu 1
  python -m bakeoff.serving.emulator.loadcheck --plan local-demo --target mi355x-vllm --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bakeoff.plan import load_plan


def _start(config: dict[str, Any], workdir: Path, cpu: int | None) -> tuple[subprocess.Popen[bytes], int]:
    cfg, port_file = workdir / "config.json", workdir / "port"
    cfg.write_text(json.dumps(config))
    cmd = [sys.executable, "-m", "bakeoff.serving.emulator", "--config", str(cfg)]
    cmd += ["--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("emulator did not start")
        time.sleep(0.05)
    return proc, int(port_file.read_text())


async def _drive(url: str, body: dict[str, Any], concurrency: int, requests: int) -> list[tuple[float, float, int]]:
    """(ttft, e2e, chunks) per request, timed at the client."""
    out: list[tuple[float, float, int]] = []
    todo = iter(range(requests))
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as s:

        async def worker() -> None:
            for _ in todo:
                t0 = time.perf_counter()
                first, chunks = None, 0
                async with s.post(url, json=body) as r:
                    async for line in r.content:
                        if line.startswith(b"data: {"):
                            chunks += 1
                            if first is None:
                                first = time.perf_counter() - t0
                out.append((first or 0.0, time.perf_counter() - t0, chunks))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["scripted", "roofline"], default="scripted")
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--plan", default="local-demo", help="roofline mode: plan to take the target from")
    ap.add_argument("--target", help="roofline mode: target name (default: the plan's first)")
    ap.add_argument("--time-scale", type=float, help="roofline mode: override the target's time_scale")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--requests", type=int, default=0, help="default: 2 x concurrency")
    ap.add_argument("--server-cpu", type=int, help="pin the emulator to this core")
    ap.add_argument("--client-cpu", type=int, help="pin this client to this core")
    args = ap.parse_args(argv)
    requests = args.requests or 2 * args.concurrency

    if args.mode == "scripted":
        config = {"mode": "scripted", "scripted": {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms}}
    else:
        plan = load_plan(args.plan)
        target = plan.target(args.target) if args.target else plan.targets[0]
        if args.time_scale:
            target = target.model_copy(
                update={"emulator": target.emulator.model_copy(update={"time_scale": args.time_scale})}
            )
        config = {"mode": "roofline", "target": target.model_dump(mode="json")}
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})

    with tempfile.TemporaryDirectory(prefix="bakeoff-loadcheck-") as tmp:
        proc, port = _start(config, Path(tmp), args.server_cpu)
        try:
            server = psutil.Process(proc.pid)
            body = {
                "prompt": " ".join(["w"] * args.prompt_tokens),
                "max_tokens": args.max_tokens,
                "ignore_eos": True,
                "stream": True,
            }
            url = f"http://127.0.0.1:{port}/v1/completions"
            asyncio.run(_drive(url, body, min(args.concurrency, 8), 8))  # warm-up
            s0, c0, w0 = server.cpu_times(), time.process_time(), time.perf_counter()
            rows = asyncio.run(_drive(url, body, args.concurrency, requests))
            s1, c1, wall = server.cpu_times(), time.process_time(), time.perf_counter() - w0
            base = f"http://127.0.0.1:{port}"
            version = json.loads(urllib.request.urlopen(f"{base}/version").read())
            metrics = urllib.request.urlopen(f"{base}/metrics").read().decode()
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    server_cpu = (s1.user + s1.system - s0.user - s0.system) / wall
    tokens = sum(r[2] for r in rows)
    ttft = [r[0] * 1000 for r in rows]
    print(
        f"emulator {version['version']} mode={args.mode} time_scale={version['time_scale']} "
        f"C={args.concurrency} requests={len(rows)} output_tokens={args.max_tokens} (EMULATED)"
    )
    print(
        f"wall {wall:.2f} s | chunks/s {tokens / wall:,.0f} | emulator CPU {server_cpu:.1%} of one core "
        f"({1e6 * server_cpu * wall / max(1, tokens):.1f} us per chunk) | client CPU {(c1 - c0) / wall:.1%}"
    )
    late = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("bakeoff_emulator_emi")
    }
    mean_late = late["bakeoff_emulator_emit_lateness_seconds_total"] / max(1, late["bakeoff_emulator_emissions_total"])
    print(
        f"emulator's own lateness: mean {1000 * mean_late:.3f} ms, "
        f"max {1000 * late['bakeoff_emulator_emit_lateness_max_seconds']:.2f} ms (warm-up included)"
    )
    p99 = statistics.quantiles(ttft, n=100)[98] if len(ttft) >= 2 else ttft[0]
    print(f"TTFT ms: mean {statistics.fmean(ttft):.2f} p50 {statistics.median(ttft):.2f} p99 {p99:.2f}")
    if args.mode == "scripted":
        ideal_e2e = args.ttft_ms + (args.max_tokens - 1) * args.itl_ms
        e2e = [r[1] * 1000 for r in rows]
        print(
            f"vs script: TTFT error mean {statistics.fmean(ttft) - args.ttft_ms:+.2f} ms, "
            f"E2E error mean {statistics.fmean(e2e) - ideal_e2e:+.2f} ms (ideal E2E {ideal_e2e:.0f} ms)"
        )
    else:
        tpot = [(r[1] - r[0]) * 1000 / max(1, r[2] - 1) for r in rows]
        print(f"TPOT ms: mean {statistics.fmean(tpot):.2f} (divide by time_scale for the emulated GPU's figure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
