"""Results store: atomic writes, per-point files, run index."""

from __future__ import annotations

import pandas as pd
import pytest

from bakeoff import store
from bakeoff.core import facts
from bakeoff.paths import run_folder


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

    with pytest.raises(RuntimeError, match="boom"):
        store.write_json(path, {"v": Boom()})
    assert store.read_json(path) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp file left behind


def test_each_step_writes_its_own_record_and_the_run_facts_assemble_them(data_root):
    rdir = store.run_dir("demo", "r1")
    store.record(
        rdir, store.START, {"plan": "demo", "run_id": "r1", "started_at": 1.0, "targets": {"a": {"name": "A"}}}
    )
    store.record(rdir, "provision", {"instance_id": "i-1", "launched_at": 5.0}, slug="a")
    store.record(rdir, "provision", {"instance_id": "i-2", "launched_at": 6.0}, slug="a")  # a retry: its own again
    store.record(rdir, "deploy", {"ready": True, "emulated": True}, slug="b")
    store.record(rdir, "sweep", {"errors": []})
    store.record(store.run_dir("demo", "r2"), store.START, {"plan": "demo", "run_id": "r2", "started_at": 2.0})
    run = store.run_facts(str(rdir))  # what tasks pass around: the run dir as a string
    assert {s: (t.name, t.provision, t.deploy) for s, t in run.targets.items()} == {
        "a": ("A", facts.Provision(instance_id="i-2", launched_at=6.0), None),
        "b": (None, None, facts.Deploy(ready=True, emulated=True)),
    }
    assert run.sweep == facts.Sweep(errors=()) and run.emulated is True and not hasattr(run, "status")
    assert store.read_record(rdir, "provision", "a") == {"instance_id": "i-2", "launched_at": 6.0}
    assert store.read_record(rdir, "terminate", "a") is None
    assert sorted(p.name for p in (rdir / "target=a" / "steps").iterdir()) == ["provision.json"]
    assert [r.run_id for r in store.list_runs("demo")] == ["r2", "r1"]
    assert store.list_runs("other") == []
    assert not hasattr(store, "update_run")


def test_a_run_in_s3_through_an_airflow_connection(s3_store, moto_s3):
    """Workers on two hosts share a run through object storage: records, points and the view."""
    rdir = store.run_dir("demo", "manual__2026-11-29T10:00:00+00:00")
    assert str(rdir).startswith(f"s3://bakeoff_store_test@{s3_store}/results/demo/run_id=")
    store.record(rdir, store.START, {"plan": "demo", "run_id": "r-s3", "started_at": 3.0, "targets": {"a": {}}})
    store.record(str(rdir), "provision", {"instance_id": "i-9"}, slug="a")
    tdir = store.target_dir("demo", "manual__2026-11-29T10:00:00+00:00", "a")
    store.save_point(tdir, "w", 4, 0, pd.DataFrame({"ttft": [0.2]}), {"target": "a", "concurrency": 4})
    again = store.at(str(rdir))  # as the next task, on another host, gets it
    assert store.run_facts(again).target("a").provision == facts.Provision(instance_id="i-9")
    assert store.load_points(again)["concurrency"].tolist() == [4]
    assert store.load_requests(again)["ttft"].tolist() == [0.2]
    assert [r.run_id for r in store.list_runs("demo")] == ["r-s3"]
    s3 = moto_s3
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=s3_store)["Contents"]}
    base = f"results/demo/run_id={run_folder('manual__2026-11-29T10:00:00+00:00')}/"
    assert {
        base + "steps/start.json",
        base + "target=a/steps/provision.json",
        base + "target=a/points/w-c4-r0.parquet",
    } <= keys


def test_the_atomic_writer_keeps_the_old_file_and_no_temp_when_a_write_fails(tmp_path):
    from bakeoff import durable

    path = tmp_path / "deep" / "x.json"
    durable.write_atomic(path, b"old")
    with pytest.raises(TypeError):
        durable.write_atomic(path, "not bytes")  # fails inside the temporary file's write
    assert path.read_bytes() == b"old" and [p.name for p in path.parent.iterdir()] == ["x.json"]
    assert path.stat().st_mode & 0o777 == 0o600  # owner-only, so secrets can use it too
