"""Results store: atomic writes, per-point files, run index."""

from __future__ import annotations

import pandas as pd
import pytest

from bakeoff import store


def test_points_survive_and_concatenate(data_root):
    rdir = store.run_dir("demo", "manual__2026-11-29T10:00:00+00:00")
    assert "run_id=manual__2026-11-29T10_00_00_00_00" in str(rdir)
    for slug in ("a", "b"):
        tdir = store.target_dir("demo", "manual__2026-11-29T10:00:00+00:00", slug)
        for c in (1, 4):
            store.save_point(
                tdir,
                "w",
                c,
                0,
                pd.DataFrame({"target": [slug], "ttft": [0.1 * c]}),
                {"target": slug, "concurrency": c, "total_tps": 10.0 * c},
            )
    pts = store.load_points(rdir)
    assert len(pts) == 4 and sorted(pts["concurrency"].tolist()) == [1, 1, 4, 4]
    assert len(store.load_requests(rdir)) == 4


def test_failed_write_leaves_previous_file(tmp_path):
    path = tmp_path / "x.json"
    store.write_json(path, {"v": 1})

    class Boom:
        def __repr__(self):
            raise RuntimeError("boom")

    with pytest.raises(Exception):
        store.write_json(path, {"v": Boom()})
    assert store.read_json(path) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp file left behind


def test_update_run_merges_and_lists(data_root):
    rdir = store.run_dir("demo", "r1")
    store.update_run(rdir, plan="demo", run_id="r1", started_at=1.0, targets={"a": {"name": "A"}})
    store.update_run(rdir, targets={"b": {"name": "B"}}, status="success")
    store.update_run(store.run_dir("demo", "r2"), plan="demo", run_id="r2", started_at=2.0)
    store.update_run(rdir, targets={"a": {"provision": {"id": "i-1"}}})
    doc = store.read_json(rdir / "run.json")
    assert doc["targets"] == {"a": {"name": "A", "provision": {"id": "i-1"}}, "b": {"name": "B"}}
    assert doc["status"] == "success"
    assert [r["run_id"] for r in store.list_runs("demo")] == ["r2", "r1"]
    assert store.list_runs("other") == []
