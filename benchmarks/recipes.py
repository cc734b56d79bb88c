"""Every vendored InferenceX recipe through the path a real run takes, without spending anything.

    .venv/bin/python benchmarks/recipes.py [--requests 20] [--time-scale 0.02] [--only SUBSTRING]

Per recipe: the target a plan gets from ``recipe:`` alone on a cloud provider (OCI, the catalog's node for
the GPU) and on the local provider; plan validation; the budget estimate; the cloud node's user-data (it
must stay under the clouds' 16 KB limit); then a short run against the hardware emulator (the roofline the
local provider serves) at the recipe's middle published concurrency, sped up by --time-scale and rescaled
back (tokens/s x time_scale). One row per recipe; throughput is the emulator's (EMULATED), never a
measurement of the recipe on real hardware; "per 8-GPU node" is per-GPU x 8 (two TP4 servers fill a node).
Fixed-seq-len recipes run at their ISL/OSL (output capped by --max-output); agentic ones at 8k in / 512 out
single turns.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import PlanError, plan_from_dict, recipes
from bakeoff.plan.settings import MAX_BUDGET_USD, Slo
from bakeoff.serving import userdata
from bakeoff.serving.emulator.config import config_from_dict
from bakeoff.serving.emulator.server import build_app
from bakeoff.spend import budget

AGENTIC_LEN = (8192, 512)


class Emulators:
    """Roofline emulators served in-process on loopback (one event loop in a thread), one per target."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def start(self, target) -> tuple[str, web.AppRunner]:
        async def up() -> tuple[str, web.AppRunner]:
            cfg = config_from_dict({"mode": "roofline", "target": target.model_dump(mode="json"), "api_key_env": None})
            runner = web.AppRunner(build_app(cfg), access_log=None, shutdown_timeout=0.5)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            return f"http://127.0.0.1:{runner.addresses[0][1]}", runner

        return asyncio.run_coroutine_threadsafe(up(), self.loop).result(30)

    def stop(self, runner: web.AppRunner) -> None:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), self.loop).result(30)


def _plan(r: recipes.Recipe, provider: str, requests: int, time_scale: float, max_output: int) -> dict[str, Any]:
    isl, osl = (r.isl, r.osl) if r.isl and r.osl else AGENTIC_LEN
    target: dict[str, Any] = {"name": r.name[:80], "provider": provider, "recipe": r.name}
    if provider == "local":
        target["emulator"] = {"time_scale": time_scale, "max_num_seqs": max(256, r.middle_concurrency)}
    return {
        "name": "recipes-benchmark",
        "budget_usd": MAX_BUDGET_USD,
        "targets": [target],
        "workloads": [
            {
                "name": "recipe-point",
                "input_len": isl,
                "output_len": min(osl, max_output),
                "range_ratio": 1.0,
                "concurrency": [r.middle_concurrency],
                "requests_per_point": max(requests, r.middle_concurrency),
                "warmup_requests": 0,
            }
        ],
    }


def check(r: recipes.Recipe, args, emulators: Emulators, out: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"recipe": r.name, "model": r.model, "gpu": r.gpu, "engine": r.engine, "prec": r.precision}
    row["spec"], row["conc"] = r.spec_label, r.middle_concurrency
    try:
        cloud = plan_from_dict(_plan(r, "oci", args.requests, args.time_scale, args.max_output), source=r.name)
    except PlanError as e:
        row["status"] = "refused: " + str(e).splitlines()[-1].strip()
        return row
    t = cloud.targets[0]
    row["usd"] = budget.estimate(cloud)["estimate_usd"]
    spec = {"api_key": "k" * 43, "expires_at": time.time() + 3600, "shutdown_after_s": 3600}
    script = userdata.render_for(t, spec)
    row["userdata_b"] = len(script.encode())
    assert row["userdata_b"] < userdata.MAX_BYTES, f"{r.name}: user-data {row['userdata_b']} bytes"
    local = plan_from_dict(_plan(r, "local", args.requests, args.time_scale, args.max_output), source=r.name)
    lt = local.targets[0]
    base_url, runner = emulators.start(lt)
    try:
        endpoint = Endpoint(target=lt.slug, base_url=base_url, model=lt.served_model_id, stack=lt.stack, emulated=True)
        points = run_workload(
            endpoint,
            lt,
            local.workloads[0],
            Slo(),
            out / lt.slug,
            "recipes-benchmark",
            None,
            True,
            provenance=False,
            calibrate=False,
        )
    finally:
        emulators.stop(runner)
    p = points[0]
    # the client measures wall time; the emulator ran time_scale x faster than the emulated GPU
    scale = lt.emulator.time_scale
    row["tps"] = float(p.get("output_tps") or 0.0) * scale
    row["tps_node"] = float(p.get("output_tps_per_gpu") or 0.0) * scale * lt.instance.gpus
    row["errors"] = p.get("errors", p.get("error_count", 0))
    row["status"] = "ok"
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20, help="requests per recipe (at least its concurrency)")
    ap.add_argument("--time-scale", type=float, default=0.02, help="emulator delay multiplier (figures rescaled)")
    ap.add_argument("--max-output", type=int, default=256, help="cap on output tokens per request")
    ap.add_argument("--only", default="", help="only recipes whose name contains this")
    args = ap.parse_args(argv)
    emulators = Emulators()
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for r in recipes.recipes().values():
            if args.only in r.name:
                rows.append(check(r, args, emulators, Path(tmp)))
    head = f"{'recipe':42} {'model':18} {'gpu':6} {'engine':6} {'prec':5} {'spec':14} {'conc':>4} "
    print(head + f"{'rendered':>15} {'budget $':>9}  EMULATED tok/s (server | per 8-GPU node)")
    for row in rows:
        line = (
            f"{row['recipe']:42} {row['model']:18} {row['gpu']:6} {row['engine']:6} {row['prec']:5} "
            f"{row['spec']:14} {row['conc']:>4} "
        )
        if row["status"] != "ok":
            print(line + row["status"])
            continue
        print(
            line + f"{'OK ' + str(row['userdata_b']) + ' B':>15} {row['usd']:>9.2f}  "
            f"{row['tps']:>8.0f} | {row['tps_node']:>8.0f} EMULATED"
        )
    ok = sum(1 for r in rows if r["status"] == "ok")
    print(
        f"{ok} of {len(rows)} recipes rendered and ran on the emulator; "
        f"{len(rows) - ok} refused before spend; {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
