"""What the TTFT connection mode changes: warm (keep-alive connections opened before measuring, the
default) vs per_request (a new connection per request, set-up inside TTFT, as InferenceX and vLLM's
benchmark clients measure it).

The scripted server answers with a known TTFT on a core away from the client; bakeoff's own workload run
(run_workload) measures the same workload in both modes, alternating rounds so machine load hits
both alike. Every figure is EMULATED and on loopback: over a real network, per_request adds at
least one round trip (TCP), two or more with TLS.

    python benchmarks/ttft_connection.py [--requests 200] [--rounds 3] [--concurrency 1 8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload
from bakeoff.serving.emulator.scripted import ScriptedServerProcess, server_cpu

MODES = ("warm", "per_request")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="measured requests per point")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per mode")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--ttft-ms", type=float, default=20.0, help="the scripted server's TTFT")
    args = ap.parse_args()
    script = {"ttft_ms": args.ttft_ms, "itl_ms": 2, "tokens_per_chunk": 1}
    got: dict[tuple[str, int], dict[str, list[float]]] = {}
    with ScriptedServerProcess(script, cpu=server_cpu()) as srv, tempfile.TemporaryDirectory() as tmp:
        ep = Endpoint(target="t", base_url=srv.url, model="scripted", stack="scripted", emulated=True)
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                w = Workload(
                    name=f"{mode}-{r}",
                    input_len=64,
                    output_len=16,
                    concurrency=args.concurrency,
                    requests_per_point=args.requests,
                    warmup_requests=4,
                    ttft_connection=mode,
                )
                points = run_workload(
                    ep,
                    AdhocTarget("t"),
                    w,
                    Slo(),
                    Path(tmp) / f"{mode}-{r}",
                    "r",
                    None,
                    True,
                    provenance=False,
                    calibrate=False,
                )
                for p in points:
                    row = got.setdefault((mode, int(p["concurrency"])), {"p50": [], "p99": []})
                    row["p50"].append(p["ttft_ms_p50"])
                    row["p99"].append(p["ttft_ms_p99"])
    print(
        f"EMULATED (scripted server, loopback, server TTFT {args.ttft_ms:g} ms); median over {args.rounds} rounds "
        f"of {args.requests} requests"
    )
    print(f"{'C':>4} {'mode':<12} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'Δp50 ms':>9} {'Δp99 ms':>9}")
    for c in args.concurrency:
        base = {k: statistics.median(got[("warm", c)][k]) for k in ("p50", "p99")}
        for mode in MODES:
            m = {k: statistics.median(got[(mode, c)][k]) for k in ("p50", "p99")}
            print(
                f"{c:>4} {mode:<12} {m['p50']:>12.3f} {m['p99']:>12.3f} "
                f"{m['p50'] - base['p50']:>+9.3f} {m['p99'] - base['p99']:>+9.3f}"
            )


if __name__ == "__main__":
    main()
