"""Prints how long the cost and report steps take on a run shaped like the real-cloud plan
(two targets, concurrency 4-64, 10 x concurrency requests per level, 3 repeats, two earlier runs).

Run: .venv/bin/python tests/report/time_report_step.py
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic

from bakeoff.cost import cost_run
from bakeoff.report import build_report


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plan = synthetic.make_plan(repeats=3, concurrency=(4, 8, 16, 32, 64))
        for w in plan.workloads:
            w.requests_per_point = None  # 10 x concurrency, as InferenceMAX
        rdir = None
        for i in range(3):
            rdir = synthetic.make_run(
                root, plan, run_id=f"scheduled__2026-{i + 8:02d}-01", started_at=1.78e9 + i * 2.6e6, jitter=0.03, seed=i
            )
            t0 = time.perf_counter()
            cost_run(plan, rdir)
            cost_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        paths = build_report(plan, rdir, root / "out")
        report_s = time.perf_counter() - t0
        n_req = sum(w.requests_at(c) * w.repeats for w in plan.workloads for c in w.concurrency) * len(plan.targets)
        print(
            f"run: {len(plan.targets)} targets, {n_req} requests, "
            f"{sum(len(w.concurrency) * w.repeats for w in plan.workloads) * len(plan.targets)} points"
        )
        print(f"cost step:   {cost_s:.2f} s")
        print(f"report step: {report_s:.2f} s")
        for kind in ("html", "pdf"):
            print(f"{kind}: {Path(paths[kind]).stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
