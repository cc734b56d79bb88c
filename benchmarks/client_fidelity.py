"""Client fidelity: how far the benchmark client's figures are from a server's known timing.

A scripted streaming server on loopback (TTFT 100 ms, ITL 10 ms, 256 output tokens, one token per
chunk) is pinned to one core, the client to the other. At each concurrency the table prints the
client's TTFT and TPOT minus the scripted truth (mean, p99), output throughput against the ideal
(C x 256 tokens every 100 + 255 x 10 ms), the client's CPU, and the server's own lateness (how late
it wrote first chunks by its own clock, i.e. the part of the error that is not the client's).
Then a capacity run (zero TTFT and ITL, C=64): output tokens per second the client ingests.

Open loop (``--rates``): Poisson arrivals for ``--open-seconds`` s at each rate (64-word prompt, 16
output tokens, TTFT 20 ms, ITL 2 ms), through the harness's own path (Sender, open_loop, the loop
monitor). Per rate: send lag (actual send - scheduled send) p50/p99/max from the request records,
sends more than 10 ms late, the largest event-loop stall, the coefficient of variation of the
gaps between arrivals as the server's kernel stamped them (Poisson = 1.0), the realized rate at
the server against the planned one (in brackets the sampled schedule's own, what a perfect client
reproduces) with the Poisson sampling error (1/sqrt(n)), the client's CPU share (it includes the
< 0.6 ms before each send spent yielding to the loop) and how long the client waited for its CPU
while runnable (another process on its core: a stall then is not the client's own).

Workers (``--only workers``): ingest, the output tokens per second the client absorbs, closed loop
(C=64, 256 tokens per request, zero TTFT/ITL) through the harness's worker processes
(bench.workers) with 1 and then 2 processes; per-core rate (tokens per client CPU-second) and its
extrapolation to 8 cores. The scripted server stays on CPU 0 and reports its own lag (first chunk
written after it was due) and CPU, so a row where the server, not the client, set the pace shows as
such. On a 2-core machine the 2-process row shares CPU 0 with the server.

Transports compared on the same server with the same SSE accounting (bakeoff.bench.client.sse):
  bakeoff  - the harness's client (asyncio protocol + httptools on uvloop)
  aiohttp  - aiohttp ClientSession, reading resp.content.iter_any()
  httpx    - httpx.AsyncClient, reading resp.aiter_raw()
and, with --peer-guidellm PATH (a guidellm executable from a separate virtualenv), guidellm itself.

    python benchmarks/client_fidelity.py                  # full table (about 5 minutes)
    python benchmarks/client_fidelity.py --quick          # fewer requests per point
    python benchmarks/client_fidelity.py --only open      # the open-loop rows alone (about 1 minute)
    python benchmarks/client_fidelity.py --only workers   # the workers rows alone (under 1 minute)
All traffic is loopback; every point is capped in requests and seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import numpy as np

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.client.monitor import send_lag_figures
from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.client.sse import StreamState
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.fleet.workers import measure_in_workers
from bakeoff.bench.load import point
from bakeoff.bench.load.loadgen import PointId, Sender, arrival_offsets
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan.workload import Workload
from bakeoff.serving.emulator.scripted import ScriptedServerProcess
from bakeoff.tokens import VOCAB

TTFT_MS, ITL_MS, OUT = 100.0, 10.0, 256
GUIDELLM_VERSION = "0.8.1"
PROMPT = " ".join(["fidelity"] * 32)
_now = time.perf_counter


def body() -> dict:
    return {
        "model": "scripted",
        "prompt": PROMPT,
        "max_tokens": OUT,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


def _late(st: StreamState) -> float:
    """The scripted server's own lateness on this request's first chunk (ms), from its usage."""
    return (st.usage or {}).get("scripted_first_chunk_late_us", 0.0) / 1e3


# --- the three transports: each returns [(t_send, ttft_s, e2e_s, output_tokens)] for measured requests ----
async def _closed(send, total: int, concurrency: int, warmup: int):
    out, pos = [], 0

    async def worker():
        nonlocal pos
        while pos < total:
            i = pos
            pos += 1
            r = await send()
            if i >= warmup:
                out.append(r)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


async def run_bakeoff(url: str, c: int, total: int, warmup: int):
    """The harness's own path: Sender.run_closed + records, as a benchmark point runs them."""
    w = Workload(name="fidelity", input_len=32, output_len=OUT, concurrency=[c])
    client = StreamingClient(url, timeout_s=120)
    try:
        sender = Sender(
            client,
            w,
            "scripted",
            PointId("fidelity", "scripted", w.name, c, 0),
            [RequestSpec(32, OUT, prompt=PROMPT)] * total,
            warmup,
            120,
        )
        await client.warm(c)
        sender.start_clock()
        sent = await sender.run_closed(c)
    finally:
        await client.close()
    late = {x.index: _late(x.out.state) for x in sent}
    t0 = sender.t0
    return [
        (
            t0 + r.start_offset,
            r.ttft,
            r.e2e,
            r.output_tokens if r.ok else 0,
            t0 + r.start_offset + r.elapsed,
            late[r.index],
        )
        for r in sender.records(sent)
        if not r.warmup
    ]


async def run_aiohttp(url: str, c: int, total: int, warmup: int):
    conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    payload = json.dumps(body()).encode()
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120), read_bufsize=2**18) as s:

        async def send():
            t = _now()
            async with s.post(url + "/v1/completions", data=payload, headers={"Content-Type": "application/json"}) as r:
                st = StreamState(t)
                async for data in r.content.iter_any():
                    st.feed(data, _now())
            end = _now()
            ok = st.verdict() is None
            return (
                t,
                st.ttft if ok else None,
                (end - t) if ok else None,
                (st.usage or {}).get("completion_tokens", 0),
                end,
                _late(st),
            )

        await asyncio.gather(*(send() for _ in range(c)))  # open and warm c connections
        return await _closed(send, total, c, warmup)


async def run_httpx(url: str, c: int, total: int, warmup: int):
    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    payload = json.dumps(body()).encode()
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as s:

        async def send():
            t = _now()
            async with s.stream(
                "POST", "/v1/completions", content=payload, headers={"Content-Type": "application/json"}
            ) as r:
                st = StreamState(t)
                async for data in r.aiter_raw():
                    st.feed(data, _now())
            end = _now()
            ok = st.verdict() is None
            return (
                t,
                st.ttft if ok else None,
                (end - t) if ok else None,
                (st.usage or {}).get("completion_tokens", 0),
                end,
                _late(st),
            )

        await asyncio.gather(*(send() for _ in range(c)))
        return await _closed(send, total, c, warmup)


CLIENTS = {"bakeoff": run_bakeoff, "aiohttp": run_aiohttp, "httpx": run_httpx}


def measure(kind: str, url: str, c: int, total: int, warmup: int) -> dict:
    cpu0, w0 = time.process_time(), _now()
    rows = run_async(CLIENTS[kind](url, c, total, warmup))
    cpu = (time.process_time() - cpu0) / (_now() - w0) * 100
    ok = [r for r in rows if r[1] is not None and r[2] is not None]
    ttft = np.array([r[1] for r in ok]) * 1e3
    tpot = np.array([(r[2] - r[1]) / (r[3] - 1) for r in ok if r[3] > 1]) * 1e3
    tokens = sum(r[3] for r in ok)
    own = ttft - TTFT_MS - np.array([r[5] for r in ok])
    duration = max(r[4] for r in rows) - min(r[0] for r in rows) if rows else float("nan")
    return {
        "client": kind,
        "c": c,
        "requests": len(rows),
        "ok": len(ok),
        "ttft": ttft,
        "tpot": tpot,
        "tps": tokens / duration if duration > 0 else float("nan"),
        "cpu": cpu,
        "own": own,
    }


OPEN_IN, OPEN_OUT = 64, 16


async def run_open(url: str, rate: float, seconds: float, seed: int = 0) -> dict:
    """One open-loop point through the harness's one measurement loop (bench.point.measure)."""
    n = max(2, int(rate * seconds))
    w = Workload(name="fidelity-open", input_len=OPEN_IN, output_len=OPEN_OUT, load="rate", rates=[rate])
    prompt = " ".join(["fidelity"] * OPEN_IN)
    client = StreamingClient(url, timeout_s=60)
    offsets = arrival_offsets(n, rate, "poisson", seed=seed)
    try:
        sender = Sender(
            client,
            w,
            "scripted",
            PointId("fidelity", "scripted", w.name, int(rate), 0),
            [RequestSpec(OPEN_IN, OPEN_OUT, prompt=prompt)] * n,
            0,
            60,
        )
        waited0 = run_queue_wait_s()
        recs, mon = await point.measure(sender, warm=min(1024, max(64, int(rate * 0.1))), offsets=offsets)
        waited = run_queue_wait_s() - waited0
    finally:
        await client.close()
    lags = [r.send_lag for r in recs]
    return {
        "rate": rate,
        "n": n,
        "ok": sum(r.ok for r in recs),
        "late10": sum(x > 0.010 for x in lags),
        "cpu": mon["client_cpu_pct"],
        "loop_max": mon["loop_stall_ms_max"],
        "waited_ms": waited * 1e3,
        "schedule_rate": (n - 1) / float(offsets[-1]),
        **send_lag_figures(lags),
    }


def run_queue_wait_s() -> float:
    """Seconds this thread has waited for a CPU while runnable (Linux schedstat; NaN elsewhere):
    a stall the loop monitor sees while this grows is another process taking the core."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


def open_rows(rates: list[float], seconds: float, two: bool) -> None:
    script = {"ttft_ms": 20.0, "itl_ms": 2.0, "tokens_per_chunk": 1, "output_tokens": OPEN_OUT, "precise": False}
    print(
        f"\nOpen loop: Poisson arrivals, {OPEN_IN} in / {OPEN_OUT} out, {seconds:g} s per rate, "
        f"server {'on CPU 0, client on CPU 1' if two else 'sharing the client CPU'}"
    )
    print(
        "| rate | requests | ok | send lag p50 / p99 / max (ms) | sends > 10 ms late | loop stall max (ms) "
        "| arrival CV at server (Poisson = 1.0) | realized rate at server (schedule's own) | Poisson sampling "
        "error (1 sigma) | client CPU | client waited for its CPU (ms) | server's own lag p99 / max (ms) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    goals: list[str] = []
    with ScriptedServerProcess(script, cpu=0 if two else None) as srv:
        run_async(run_open(srv.url, 50, 1.0))  # warm the server and the imports
        for rate in rates:
            server_stats(srv.url)
            m = run_open_sync(srv.url, rate, seconds)
            s = server_stats(srv.url)
            realized = (s["arrival_rate_rps"] or float("nan")) / rate - 1
            print(
                f"| {rate:,.0f}/s | {m['n']:,} | {m['ok']:,} | "
                f"{m['send_lag_ms_p50']:.3f} / {m['send_lag_ms_p99']:.3f} / {m['send_lag_ms_max']:.2f} | "
                f"{m['late10']} | {m['loop_max']:.2f} | {s['arrival_cv'] or float('nan'):.3f} | "
                f"{realized * 100:+.2f}% ({(m['schedule_rate'] / rate - 1) * 100:+.2f}%) | "
                f"±{100 / np.sqrt(m['n']):.2f}% | {m['cpu']:.0f}% | {m['waited_ms']:.0f} | "
                f"{s['first_chunk_late_ms_p99'] or 0:.2f} / {s['first_chunk_late_ms_max'] or 0:.2f} |",
                flush=True,
            )
            if rate == 1000:
                goals.append(
                    f"goals at 1,000/s: send lag p99 {m['send_lag_ms_p99']:.3f} ms (<= 1: "
                    f"{'met' if m['send_lag_ms_p99'] <= 1 else 'missed'}), max {m['send_lag_ms_max']:.2f} ms "
                    f"(<= 5: {'met' if m['send_lag_ms_max'] <= 5 else 'missed'}), arrival CV "
                    f"{s['arrival_cv']:.3f} (1.0 +/- 0.05: {'met' if abs(s['arrival_cv'] - 1) <= 0.05 else 'missed'}), "
                    f"realized rate {realized * 100:+.2f}% (within +/-{200 / np.sqrt(m['n']):.2f}%, 2 sigma: "
                    f"{'met' if abs(realized) <= 2 / np.sqrt(m['n']) else 'missed'})"
                )
    for g in goals:
        print(g)


INGEST_OUT, INGEST_C = 256, 64


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc (NaN where there is none)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def run_ingest(url: str, workers: int, requests: int) -> dict:
    """One closed-loop point through the harness's worker processes (bench.workers): every worker
    takes the next request of the one shared queue, C slots split between them, one clock."""
    w = Workload(
        name="ingest",
        input_len=8,
        output_len=INGEST_OUT,
        concurrency=[INGEST_C],
        requests_per_point=requests,
        warmup_requests=INGEST_C,
        workers=workers,
        request_timeout_s=120,
    )
    ep = Endpoint(target="scripted", base_url=url, model="scripted", stack="scripted", emulated=True)
    ctx = point.Ctx(
        ep,
        AdhocTarget("scripted"),
        w,
        None,
        Path(tempfile.gettempdir()),
        "ingest",
        None,
        True,
        provenance=False,
        prompt_seed=0,
    )
    recs, figs = run_async(measure_in_workers(ctx, key=INGEST_C, repeat=0, concurrency=INGEST_C))
    ok = [r for r in recs if r.ok and not r.warmup]
    span = max(r.start_offset + r.elapsed for r in ok) - min(r.start_offset for r in ok)
    return {
        "workers": figs["workers"],
        "ok": len(ok),
        "n": sum(not r.warmup for r in recs),
        "tps": sum(r.output_tokens for r in ok) / span,
        "span": span,
        "cpu": figs["client_cpu_pct"],
    }


def workers_rows(requests: int, two: bool) -> None:
    """Ingest (output tokens/s the client absorbs) with 1 and 2 worker processes, closed loop, C=64,
    against the scripted server with zero TTFT/ITL on its own core; the server's own lag and CPU
    say whether it, not the client, set the pace."""
    cpus = sorted(os.sched_getaffinity(0))
    print(
        f"\nWorkers: ingest, closed loop C={INGEST_C}, {requests} requests x {INGEST_OUT} output tokens "
        f"(1 token per SSE chunk), scripted server with zero TTFT/ITL "
        f"{'on CPU 0' if two else 'sharing the client CPU'}; "
        f"{os.cpu_count()} CPUs on this machine; EMULATED, loopback"
    )
    print(
        "| worker processes | client CPUs | ok | output tokens/s ingested | client CPU (all workers) "
        "| tokens per client CPU-second | server CPU | server's own lag p50 / p99 / max (ms) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    with ScriptedServerProcess(
        {"ttft_ms": 0, "itl_ms": 0, "tokens_per_chunk": 1, "output_tokens": INGEST_OUT}, cpu=0 if two else None
    ) as srv:
        run_ingest(srv.url, 1, 256)  # warm the server and the imports
        for n, mine in ((1, {1} if two else None), (2, set(range(os.cpu_count() or 1)))):
            if mine:
                os.sched_setaffinity(0, mine)  # worker processes inherit it
            try:
                server_stats(srv.url)
                s0, t0 = _proc_cpu_s(srv.proc.pid), _now()
                best = max((run_ingest(srv.url, n, requests) for _ in range(2)), key=lambda m: m["tps"])
                server_cpu = (_proc_cpu_s(srv.proc.pid) - s0) / (_now() - t0) * 100
                s = server_stats(srv.url)
            finally:
                os.sched_setaffinity(0, set(cpus))
            rows.append(best)
            where = ",".join(map(str, sorted(mine or cpus)))
            print(
                f"| {best['workers']} | {where} | {best['ok']:,}/{best['n']:,} | {best['tps']:,.0f} | "
                f"{best['cpu']:.0f}% | "
                f"{best['tps'] / (best['cpu'] / 100):,.0f} | {server_cpu:.0f}% | "
                f"{s['first_chunk_late_ms_p50'] or 0:.2f} / {s['first_chunk_late_ms_p99'] or 0:.2f} / "
                f"{s['first_chunk_late_ms_max'] or 0:.2f} |",
                flush=True,
            )
    one, two_w = rows
    per_core = one["tps"] / max(one["cpu"] / 100, 1e-9)
    print(
        f"per core: {per_core:,.0f} output tokens per client CPU-second (1 worker); 2 workers / 1 worker = "
        f"{two_w['tps'] / one['tps']:.2f}x wall throughput; extrapolated to 8 client cores (a server that "
        f"keeps up assumed): {8 * per_core:,.0f} tokens/s; goal >= 250,000 tokens/s with this machine's cores: "
        f"{'met' if max(one['tps'], two_w['tps']) >= 250_000 else 'missed'}"
    )


def run_open_sync(url: str, rate: float, seconds: float) -> dict:
    return run_async(run_open(url, rate, seconds))


def server_stats(url: str) -> dict:
    return httpx.get(url + "/stats?reset=1", timeout=5).json()


def requests_for(c: int, quick: bool) -> int:
    rounds = 2 if quick else 3
    return max(c * rounds, 4 if quick else 6)


# --- a peer client from PyPI -----------------------------------------------------------------------
def run_guidellm(exe: str, url: str, c: int, total: int) -> dict | None:
    """guidellm at fixed concurrency against the same server, pinned to the client's core; its JSON
    report. guidellm needs a tokenizer for synthetic prompts: a word-level one (one whitespace word =
    one token, the emulator's convention) is built with the peer's own ``tokenizers``."""
    with tempfile.TemporaryDirectory(prefix="bk-guidellm-") as d:
        out, tok = Path(d) / "report.json", Path(d) / "tok"
        py = str(Path(exe).with_name("python"))
        subprocess.run([py, "-c", TOKENIZER_SRC, str(tok), ",".join(["[UNK]", "fidelity", *VOCAB])], check=True)
        cmd = [
            exe,
            "run",
            "--backend",
            f"kind=openai_http,target={url},model=scripted",
            "--profile",
            f"kind=concurrent,streams={c}",
            "--constraint",
            f"kind=max_requests,count={total}",
            "--data",
            f"kind=synthetic_text,prompt_tokens=32,output_tokens={OUT}",
            "--tokenizer",
            f"kind=huggingface_auto,model={tok}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console",
        ]
        t0, c0 = time.time(), os.times()
        p = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            preexec_fn=(lambda: os.sched_setaffinity(0, {1})) if (os.cpu_count() or 1) > 1 else None,
        )
        c1 = os.times()
        if p.returncode != 0 or not out.exists():
            print(f"guidellm failed ({p.returncode}): {p.stderr[-800:]}", file=sys.stderr)
            return None
        b = json.loads(out.read_text())["benchmarks"][0]
        m = b["metrics"]
        ttft = m["time_to_first_token_ms"]["successful"]
        return {
            "ttft_mean": ttft["mean"],
            "ttft_p99": ttft["percentiles"]["p99"],
            "itl_mean": m["inter_token_latency_ms"]["successful"]["mean"],
            "tps": m["output_token_count"]["successful"]["total_sum"] / b["duration"],
            "ok": m["output_token_count"]["successful"]["count"],
            "wall": time.time() - t0,
            "cpu": (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system),
        }


TOKENIZER_SRC = """
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers
path, words = Path(sys.argv[1]), sys.argv[2].split(",")
path.mkdir(parents=True, exist_ok=True)
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.save(str(path / "tokenizer.json"))
config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
(path / "tokenizer_config.json").write_text(json.dumps(config))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--clients", default="bakeoff,aiohttp,httpx")
    ap.add_argument("--levels", default="1,16,64,256,512")
    ap.add_argument("--capacity-requests", type=int, default=2048)
    ap.add_argument("--rates", default="100,400,1000,2000", help="open-loop rates (requests/s)")
    ap.add_argument("--open-seconds", type=float, default=8.0, help="seconds of arrivals per open-loop rate")
    ap.add_argument("--only", choices=["closed", "open", "workers"], help="print only these tables")
    ap.add_argument("--ingest-requests", type=int, default=4096, help="measured requests per workers row")
    ap.add_argument("--peer-guidellm", help="path to a guidellm executable (installed in its own virtualenv)")
    a = ap.parse_args()
    two = (os.cpu_count() or 1) > 1
    if two:
        os.sched_setaffinity(0, {1})
    if a.only == "workers":
        workers_rows(a.ingest_requests, two)
        return 0
    if a.only != "closed":
        open_rows([float(x) for x in a.rates.split(",")], a.open_seconds, two)
    if a.only == "open":
        return 0
    clients = a.clients.split(",")
    levels = [int(x) for x in a.levels.split(",")]
    results = []
    script = {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "tokens_per_chunk": 1, "output_tokens": OUT, "precise": two}
    print(f"server pinned to CPU 0, client to CPU 1: {two}; server precise timing: {two}", flush=True)
    with ScriptedServerProcess(script, cpu=0 if two else None) as srv:
        for kind in clients:
            for c in levels:
                n = requests_for(c, a.quick)
                server_stats(srv.url)
                m = measure(kind, srv.url, c, n + c, c)
                m["server"] = server_stats(srv.url)
                results.append(m)
                print(f"  measured {kind} C={c}: {m['ok']}/{m['requests']} ok", flush=True)
        peer = None
        if a.peer_guidellm:
            c = 256 if 256 in levels else levels[-1]
            peer = (c, run_guidellm(a.peer_guidellm, srv.url, c, requests_for(c, a.quick) + c))

    print("\nFidelity vs scripted truth (TTFT 100 ms, ITL 10 ms, 256 tokens, 1 token/chunk)")
    print(
        "| client | C | ok | TTFT err mean | TTFT err p99 | TPOT err mean | TPOT err p99 | throughput vs ideal "
        "| client CPU | server late mean / p99 | client's own TTFT err mean / p99 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in results:
        ideal = m["c"] * OUT / ((TTFT_MS + (OUT - 1) * ITL_MS) / 1e3)
        e = m["ttft"] - TTFT_MS
        t = m["tpot"] - ITL_MS
        s = m["server"]
        print(
            f"| {m['client']} | {m['c']} | {m['ok']}/{m['requests']} | "
            f"{e.mean():+.2f} ms | {np.percentile(e, 99):+.2f} ms | "
            f"{t.mean():+.4f} ms | {np.percentile(t, 99):+.4f} ms | {(m['tps'] / ideal - 1) * 100:+.2f}% | "
            f"{m['cpu']:.0f}% | "
            f"{s['first_chunk_late_ms_mean'] or 0:.2f} / {s['first_chunk_late_ms_p99'] or 0:.2f} ms | "
            f"{m['own'].mean():+.2f} / {np.percentile(m['own'], 99):+.2f} ms |"
        )

    if peer and peer[1]:
        c, g = peer
        ours = next((m for m in results if m["client"] == "bakeoff" and m["c"] == c), None)
        print(f"\nPeer: guidellm {GUIDELLM_VERSION} at C={c}, same server, pinned to the client's core")
        print_guidellm(g, ours)

    print(f"\nCapacity: zero TTFT/ITL, C=64, {a.capacity_requests} requests x {OUT} tokens")
    print("| client | output tokens/s ingested (wall) | client CPU | tokens per client CPU-second |")
    print("| --- | --- | --- | --- |")
    with ScriptedServerProcess(
        {"ttft_ms": 0, "itl_ms": 0, "tokens_per_chunk": 1, "output_tokens": OUT}, cpu=0 if two else None
    ) as srv:
        for kind in clients:
            best = None
            for _ in range(2):
                m = measure(kind, srv.url, 64, a.capacity_requests + 64, 64)
                best = m if best is None or m["tps"] > best["tps"] else best
            print(
                f"| {kind} | {best['tps']:,.0f} | {best['cpu']:.0f}% | {best['tps'] / (best['cpu'] / 100):,.0f} |",
                flush=True,
            )
    if a.only is None:
        workers_rows(a.ingest_requests, two)
    return 0


def print_guidellm(g: dict, ours: dict | None) -> None:
    e = g["ttft_mean"] - TTFT_MS
    print(
        f"| guidellm | {g['ok']} ok | TTFT err mean {e:+.2f} ms | TTFT p99 {g['ttft_p99']:.1f} ms | "
        f"ITL (= TPOT) mean {g['itl_mean']:.3f} ms | {g['tps']:,.0f} out tok/s | "
        f"CPU {g['cpu'] / g['wall'] * 100:.0f}% |"
    )
    if ours:
        o = ours["ttft"].mean() - TTFT_MS
        print(
            f"guidellm vs bakeoff: TTFT error {e:+.2f} vs {o:+.2f} ms, "
            f"TTFT p99 ratio {g['ttft_p99'] / np.percentile(ours['ttft'], 99):.3f}x, "
            f"throughput ratio {g['tps'] / ours['tps']:.3f}x"
        )


if __name__ == "__main__":
    sys.exit(main())
