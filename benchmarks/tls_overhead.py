"""What TLS with a pinned per-node certificate costs the benchmark: TTFT on loopback, plain vs https.

Two scripted servers (the emulator's scripted mode, no modelled delay, so the figure is the
transport's own cost), one plain and one serving a node certificate from serving/tls.py; the benchmark's own
StreamingClient sends the same requests to each, one at a time over a warmed keep-alive
connection (as the benchmark measures: connection set-up is never inside a TTFT), interleaved so
machine load hits both alike. Also times a fresh connection (TCP, plus the TLS handshake).

    python benchmarks/tls_overhead.py [--requests 400]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bakeoff.bench.client.transport import StreamingClient
from bakeoff.serving import tls
from bakeoff.serving.emulator.scripted import ScriptedServerProcess

KEY = "bk-" + "0" * 40


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _measure(clients: dict[str, StreamingClient], n: int) -> dict[str, dict]:
    out: dict[str, dict] = {name: {"ttft_ms": [], "connect_ms": []} for name in clients}
    body = {"model": "scripted", "prompt": "hello " * 64, "max_tokens": 8, "stream": True}
    for name, c in clients.items():
        for _ in range(20):  # fresh connections: TCP (+ TLS handshake)
            t0 = time.perf_counter()
            conn = await c._open()
            out[name]["connect_ms"].append((time.perf_counter() - t0) * 1000)
            conn.close()
        await c.warm(1)
    for i in range(n):
        for name in list(clients) if i % 2 else list(clients)[::-1]:
            c = clients[name]
            o = await c.stream(c.build("/v1/completions", body))
            if o.error is None and o.state.ttft is not None:
                out[name]["ttft_ms"].append(o.state.ttft * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    ident = tls.node_identity("tls-overhead", "bench")
    script = {"ttft_ms": 0, "itl_ms": 0}
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "node.crt", Path(tmp) / "node.key"
        cert.write_text(ident.cert_pem)
        key.write_text(ident.key_pem)
        with (
            ScriptedServerProcess(script, api_key=KEY) as plain,
            ScriptedServerProcess(script, api_key=KEY, tls=(str(cert), str(key))) as secure,
        ):
            clients = {
                "plain": StreamingClient(plain.url, api_key=KEY, timeout_s=30),
                "tls": StreamingClient(secure.url, api_key=KEY, timeout_s=30, tls_cert=ident.cert_pem),
            }
            res = asyncio.run(_measure(clients, args.requests))
    print(f"{'transport':<10}{'n':>6}{'TTFT p50 ms':>13}{'p99 ms':>9}{'mean ms':>9}{'connect p50 ms':>16}")
    for name, r in res.items():
        t = r["ttft_ms"]
        print(
            f"{name:<10}{len(t):>6}{statistics.median(t):>13.3f}{_pct(t, 0.99):>9.3f}{statistics.fmean(t):>9.3f}"
            f"{statistics.median(r['connect_ms']):>16.3f}"
        )
    a, b = res["plain"]["ttft_ms"], res["tls"]["ttft_ms"]
    print(
        f"TLS overhead: TTFT p50 {statistics.median(b) - statistics.median(a):+.3f} ms, "
        f"mean {statistics.fmean(b) - statistics.fmean(a):+.3f} ms; new connection "
        f"{statistics.median(res['tls']['connect_ms']) - statistics.median(res['plain']['connect_ms']):+.3f} ms "
        "(outside every TTFT: connections are opened before measuring)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
