"""Client placement: what the network adds to a remote client's figures, and what co-location removes.

A scripted streaming server with known timing (TTFT 50 ms, ITL 5 ms, 32 output tokens) is measured
twice per network round trip: by the client on this process through a loopback proxy that delays
every byte by half the round trip each way (a remote client on the Airflow worker), and by the node
agent's client next to the server (co-located: ``python -m bakeoff agent`` runs ``bakeoff bench``
against the server directly, and the results are mirrored back as the DAG does). The table prints
TTFT, TPOT and E2E against the scripted truth. All traffic is loopback; figures are from a scripted
server, not a GPU.

    python benchmarks/client_placement.py [--rtt-ms 0 20 80]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload
from bakeoff.serving.agent_client import AgentClient, run_job
from bakeoff.serving.emulator.scripted import ScriptedServerProcess

TTFT_MS, ITL_MS, OUT = 50, 5, 32
KEY = "client-placement-benchmark-key"
WORKLOAD = {
    "name": "placement",
    "input_len": 64,
    "output_len": OUT,
    "concurrency": [1, 8],
    "requests_per_point": 32,
    "warmup_requests": 4,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proxy(listen: int, upstream: int, one_way_s: float) -> None:
    """A TCP proxy delaying every chunk by one_way_s in each direction, order kept (a WAN link)."""

    async def pump(reader, writer):
        q: asyncio.Queue = asyncio.Queue()

        async def deliver():
            while (item := await q.get()) is not None:
                due, data = item
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()
            writer.close()

        task = asyncio.create_task(deliver())
        while data := await reader.read(65536):
            q.put_nowait((time.monotonic() + one_way_s, data))
        q.put_nowait(None)
        await task

    async def handle(cr, cw):
        await asyncio.sleep(2 * one_way_s)  # the TCP handshake crosses the link too
        ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(pump(cr, uw), pump(ur, cw), return_exceptions=True)

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", listen)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def remote(server_url: str, rtt_ms: float, out: Path) -> pd.DataFrame:
    port = _free_port()
    proc = multiprocessing.get_context("spawn").Process(
        target=_proxy, args=(port, int(server_url.rsplit(":", 1)[1]), rtt_ms / 2000), daemon=True
    )
    proc.start()
    deadline = time.monotonic() + 30
    while True:  # the spawned proxy imports this module first
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("the delay proxy did not start") from None
            time.sleep(0.1)
    try:
        ep = Endpoint(
            target="remote", base_url=f"http://127.0.0.1:{port}", model="scripted", stack="scripted", emulated=True
        )
        run_workload(
            ep,
            AdhocTarget("remote", 1),
            Workload(**WORKLOAD),
            Slo(),
            out,
            "placement",
            None,
            True,
            provenance=False,
            calibrate=False,
        )
    finally:
        proc.terminate()
        proc.join(5)
    return pd.read_parquet(out / "points")


def colocated(server_url: str, out: Path) -> pd.DataFrame:
    node = Path(tempfile.mkdtemp(prefix="bakeoff-node-"))
    (node / "api_key").write_text(KEY)
    port = _free_port()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bakeoff",
            "agent",
            "--serve-url",
            server_url,
            "--key-file",
            str(node / "api_key"),
            "--log-dir",
            str(node),
            "--work-dir",
            str(node / "work"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with AgentClient(f"http://127.0.0.1:{port}", KEY) as c:
            c.wait_healthy(30, poll_s=0.1)
            run_job(
                c,
                {
                    "job_id": f"placement-{time.time_ns()}",
                    "run_id": "placement",
                    "target": "colocated",
                    "model": "scripted",
                    "gpus": 1,
                    "emulated": True,
                    "slo": {},
                    "workloads": [WORKLOAD],
                },
                out,
                timeout_s=600,
                poll_s=0.2,
            )
    finally:
        agent.terminate()
        agent.wait(10)
    return pd.read_parquet(out / "points")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtt-ms", type=float, nargs="+", default=[0, 20, 80])
    args = ap.parse_args()
    truth_e2e = TTFT_MS + (OUT - 1) * ITL_MS
    rows = []
    with (
        ScriptedServerProcess({"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "tokens_per_chunk": 1}) as server,
        tempfile.TemporaryDirectory(prefix="bakeoff-placement-") as tmp,
    ):
        pts = colocated(server.url, Path(tmp) / "colocated")
        rows += [("co-located (node agent)", "-", r) for _, r in pts.iterrows()]
        for rtt in args.rtt_ms:
            pts = remote(server.url, rtt, Path(tmp) / f"remote-{rtt:g}")
            rows += [("remote (Airflow worker)", f"{rtt:g}", r) for _, r in pts.iterrows()]
    print(
        f"\nScripted server truth: TTFT {TTFT_MS} ms, TPOT {ITL_MS} ms, E2E {truth_e2e} ms "
        f"({OUT} tokens, one per chunk). Loopback only; not GPU figures.\n"
    )
    print(
        "| client | link RTT ms | concurrency | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | E2E p50 ms "
        "| TTFT p50 error ms |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode, rtt, r in rows:
        print(
            f"| {mode} | {rtt} | {int(r['concurrency'])} | {r['ttft_ms_p50']:.1f} | {r['ttft_ms_p99']:.1f} | "
            f"{r['tpot_ms_p50']:.2f} | {r['e2e_ms_p50']:.1f} | {r['ttft_ms_p50'] - TTFT_MS:+.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
