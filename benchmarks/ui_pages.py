"""How long each dashboard page takes at 200 (and 2,000) stored runs: server work, and first render
in headless Chromium when it is installed. Goal: at most 1 s per page at 200 runs.

Seeding: two real EMULATED runs (synthetic points through the results store, the cost step and
publish, as in the tests), one per plan; then N published runs in the reports store, each a copy
of one of them with its own run id, start time (one a week) and its figures scaled by a drift, and
each plan's index rebuilt by ``publish.write_indexes``. The pages read only what publish writes,
so this is the store a UI meets after N monthly runs. Local disk, and S3 through moto's server.

    python benchmarks/ui_pages.py [--runs 200 2000] [--s3-runs 200] [--repeat 5] [--no-s3] [--no-browser]
        [--screenshots DIR]

"first s" is a fresh process's first request (the index read and parsed); "median s" the later ones
(an unchanged index is kept parsed); "browser s" navigation start to the load event, charts drawn.
--screenshots DIR keeps each page as Chromium drew it (1400x1000), at the first local run count.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import boto3
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from bakeoff import durable
from bakeoff.cost import cost_run
from bakeoff.paths import at, safe_name
from bakeoff.publishing.publish import MANIFEST, list_published, publish, write_indexes
from bakeoff_sandbox.ec2 import MotoServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "report"))  # the tests' synthetic-run builder
import synthetic  # noqa: E402

PAGES = ("runs", "trend", "compare", "explore")
WEEK = 7 * 86_400


def _seed_templates(base: Path) -> list[tuple[str, dict]]:
    """Two real published runs (plan name, manifest)."""

    os.environ["BAKEOFF_REPORTS"] = str(base / "seed-reports")
    out = []
    for i, (name, targets) in enumerate(
        (("mi355x-vs-b200", ("mi355x-vllm", "b200-vllm", "h200-vllm")), ("monthly-chat", ("mi355x-sglang", "b200-trt")))
    ):
        d = synthetic.plan_dict(names=targets, repeats=2)
        d["name"] = name
        plan = synthetic.plan_from_dict(d)
        rdir = synthetic.make_run(base / "seed-results", plan, run_id=f"seed-{i}", jitter=0.05, seed=i)
        cost_run(plan, rdir)
        md = base / f"seed-{i}.md"
        md.write_text("report")
        publish(plan, rdir, {"markdown": str(md)})
        out.append((name, list_published(base / "seed-reports", name)[0]))
    return out


def _scaled(doc: dict, k: float) -> dict:
    """A manifest whose cost and throughput figures are scaled (cost by k, throughput by 1/k)."""
    doc = copy.deepcopy(doc)
    for t in (doc.get("dashboard") or {}).get("targets", {}).values():
        for w in (t.get("workloads") or {}).values():
            if w.get("usd_per_m") is not None:
                w["usd_per_m"] *= k
                w["ci"] = [c * k if c is not None else None for c in w.get("ci") or []]
                w["tps_per_gpu"] = (w.get("tps_per_gpu") or 0) / k
                w["tco"] = {tier: (v * k if v is not None else None) for tier, v in (w.get("tco") or {}).items()}
            for p in w.get("frontier") or []:
                for col in ("output_tps_per_gpu", "total_tps_per_gpu"):
                    if p.get(col) is not None:
                        p[col] /= k
                for col in ("usd_per_m_output", "usd_per_m_total"):
                    if p.get(col) is not None:
                        p[col] *= k
    return doc


def seed(root, templates: list[tuple[str, dict]], n: int) -> None:
    """n published runs under `root` (a local path or an s3:// URL), spread over the template plans."""

    root = at(root)
    start = time.time() - n * WEEK
    for i in range(n):
        plan, doc = templates[i % len(templates)]
        run_id = f"scheduled__{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(start + i * WEEK))}+00:00"
        m = _scaled(doc, 1 + 0.15 * ((i * 7919) % 100) / 100)
        m.update(run_id=run_id, started_at=start + i * WEEK, published_at=start + i * WEEK + 3600)
        if i % 17 == 0:
            m.update(status="failed", failed_steps=["evaluate_on_local.evaluate.benchmark_1"])
        m.pop("plan_dir", None)
        m.pop("run_dir", None)
        durable.write_atomic(root / safe_name(plan) / safe_name(run_id) / MANIFEST, json.dumps(m).encode())
    for plan, _ in templates:
        write_indexes(root, plan)


def _client(root: str):
    os.environ["BAKEOFF_REPORTS"] = root
    spec = importlib.util.spec_from_file_location("bakeoff_ui_bench", ROOT / "plugins" / "bakeoff_ui.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.app.dependency_overrides[mod.require_run_read] = lambda: None  # auth is Airflow's, timed elsewhere
    return mod, TestClient(mod.app)


def time_server(root: str, repeat: int) -> dict[str, tuple[float, float, int]]:
    """Per page: (first call s, median of `repeat` calls s, HTML bytes)."""
    _, client = _client(root)
    out = {}
    for page in PAGES:
        times = []
        size = 0
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            r = client.get(f"/{page}")
            times.append(time.perf_counter() - t0)
            assert r.status_code == 200, (page, r.status_code, r.text[:300])
            size = len(r.content)
        out[page] = (times[0], statistics.median(times[1:]), size)
    return out


def time_browser(root: str, shots: Path | None = None) -> dict[str, float] | None:
    """Per page: navigation start to the last chart drawn (or load end), in headless Chromium; with
    ``shots``, each page's screenshot as <page>.png there."""
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_bin):
        return None
    mod, _ = _client(root)
    outer = FastAPI()
    outer.mount("/bakeoff", mod.app)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(outer, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
    out = {}
    try:
        for page in PAGES:
            driver.get(f"http://127.0.0.1:{port}/bakeoff/{page}")  # returns after the load event
            out[page] = driver.execute_script(
                "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd / 1000;"
            )
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                time.sleep(1.5)  # after the timing: Chart.js animates its first draw for about a second
                driver.save_screenshot(str(shots / f"{page}.png"))
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(timeout=10)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, nargs="+", default=[200, 2000])
    ap.add_argument("--s3-runs", type=int, nargs="+", default=[200], help="run counts for S3 (seeding is slow)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--screenshots", type=Path, help="folder for each page's screenshot (first local run count)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ui-pages-"))
    moto = None
    try:
        t0 = time.perf_counter()
        templates = _seed_templates(base)
        print(f"seeded 2 real EMULATED runs in {time.perf_counter() - t0:.1f} s")
        stores = [("local", lambda n: str(base / f"reports-{n}"), args.runs)]
        if not args.no_s3:
            moto = MotoServer(None).start()
            os.environ["AIRFLOW_CONN_BAKEOFF_BENCH"] = json.dumps(
                {
                    "conn_type": "aws",
                    "login": "testing",
                    "password": "testing",
                    "extra": {"endpoint_url": moto.url, "region_name": "us-east-1"},
                }
            )
            s3 = boto3.client(
                "s3",
                region_name="us-east-1",
                endpoint_url=moto.url,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            s3.create_bucket(Bucket="bench")
            stores.append(("s3 (moto)", lambda n: f"s3://bakeoff_bench@bench/reports-{n}", args.s3_runs))
        print(
            f"\n{'store':<10} {'runs':>5} {'page':<8} {'first s':>8} {'median s':>9} {'HTML KB':>8} {'browser s':>10}"
        )
        for label, where, counts in stores:
            for n in counts:
                root = where(n)
                t0 = time.perf_counter()
                seed(root, templates, n)
                seeded = time.perf_counter() - t0
                server = time_server(root, args.repeat)
                shots = args.screenshots if label == "local" and n == counts[0] else None
                browser = None if args.no_browser or label != "local" else time_browser(root, shots)
                for page, (first, med, size) in server.items():
                    b = f"{browser[page]:.3f}" if browser else "-"
                    print(f"{label:<10} {n:>5} {page:<8} {first:>8.3f} {med:>9.3f} {size / 1024:>8.0f} {b:>10}")
                print(f"{'':<10} {'':>5} (seeding {n} runs took {seeded:.1f} s)")
    finally:
        if moto is not None:
            moto.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
