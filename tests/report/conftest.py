import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic
from synthetic import XSS


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """A realistic three-target run (one quarantined, named like an XSS probe) with two earlier
    runs for the trend, costed and reported once for the whole module."""
    from bakeoff.cost import cost_run
    from bakeoff.report import build_report

    root = tmp_path_factory.mktemp("results")
    plan = synthetic.make_plan(
        names=("mi355x-vllm", "b200-vllm", XSS),
        repeats=2,
        concurrency=(1, 2, 4, 8, 16),
        notes="<b>bold</b> & <img src=x onerror=alert(2)>",
    )
    slug = plan.targets[2].slug
    rdir = None
    for i in range(3):
        rdir = synthetic.make_run(
            root,
            plan,
            run_id=f"scheduled__2026-0{i + 7}-01",
            started_at=1.78e9 + i * 2.6e6,
            jitter=0.03,
            seed=i,
            quarantine={slug},
        )
        cost_run(plan, rdir)
    out = tmp_path_factory.mktemp("report")
    paths = build_report(plan, rdir, out)
    return {"plan": plan, "run_dir": rdir, "paths": paths, "out": out, "quarantined": slug}
