"""Results store: Parquet tables and JSON documents under results_root(), written atomically.

Layout, partitioned by run and target (hive-style, so pandas/pyarrow read a whole run at once):
  <root>/<plan>/run_id=<run>/run.json                       status, timings, errors
  <root>/<plan>/run_id=<run>/plan.json                      the resolved plan
  <root>/<plan>/run_id=<run>/target=<slug>/requests/<workload>-c<C>-r<R>.parquet
  <root>/<plan>/run_id=<run>/target=<slug>/points/<workload>-c<C>-r<R>.parquet
  <root>/<plan>/run_id=<run>/target=<slug>/<name>.json      instance, endpoint, provenance, gates
  <root>/<plan>/run_id=<run>/<name>.json / <name>.parquet   run-level outputs (validation, cost)
Each point is its own file, so nothing measured is lost when a later point or step fails.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from bakeoff import durable
from bakeoff.paths import results_root, safe_name


def run_dir(plan_name: str, run_id: str, root: Path | None = None) -> Path:
    return (root or results_root()) / safe_name(plan_name) / f"run_id={safe_name(run_id)}"


def target_dir(plan_name: str, run_id: str, target_slug: str, root: Path | None = None) -> Path:
    return run_dir(plan_name, run_id, root) / f"target={safe_name(target_slug)}"


def _atomic_write(path: Path, write) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        durable.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: Path, obj: Any) -> Path:
    def w(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True, default=str)

    return _atomic_write(Path(path), w)


def write_bytes(path: Path, data: bytes) -> Path:
    return _atomic_write(Path(path), lambda tmp: Path(tmp).write_bytes(data))


def read_json(path: Path, default: Any = None) -> Any:
    path = Path(path)
    if not path.exists():
        return default
    return json.loads(path.read_text())


def write_frame(path: Path, df: pd.DataFrame) -> Path:
    return _atomic_write(Path(path), lambda tmp: df.to_parquet(tmp, index=False))


def point_file(tdir: Path, kind: str, workload: str, concurrency: int, repeat: int) -> Path:
    return tdir / kind / f"{safe_name(workload)}-c{concurrency}-r{repeat}.parquet"


def save_point(
    tdir: Path, workload: str, concurrency: int, repeat: int, requests: pd.DataFrame, summary: dict[str, Any]
) -> None:
    """Persist one measured point: its raw requests first, then its summary row."""
    write_frame(point_file(tdir, "requests", workload, concurrency, repeat), requests)
    write_frame(point_file(tdir, "points", workload, concurrency, repeat), pd.DataFrame([summary]))


def _concat(files: list[Path]) -> pd.DataFrame:
    frames = [pd.read_parquet(f) for f in sorted(files)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_requests(rdir: Path) -> pd.DataFrame:
    return _concat(list(Path(rdir).glob("target=*/requests/*.parquet")))


def load_points(rdir: Path) -> pd.DataFrame:
    return _concat(list(Path(rdir).glob("target=*/points/*.parquet")))


def update_run(rdir: Path, **fields: Any) -> dict[str, Any]:
    """Merge fields into run.json (status, step outcomes), stamping updated_at. Mappings merge
    recursively, so one target's step never overwrites another's or an earlier step.

    Targets run in parallel (several workers), so the read-merge-write holds an exclusive lock."""
    path = Path(rdir) / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(".run.json.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = _merge(read_json(path, {}) or {}, fields)
        doc["updated_at"] = time.time()
        write_json(path, doc)
    return doc


def _merge(doc: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    for k, v in fields.items():
        doc[k] = _merge(doc[k], v) if isinstance(v, dict) and isinstance(doc.get(k), dict) else v
    return doc


def list_runs(plan_name: str | None = None, root: Path | None = None) -> list[dict[str, Any]]:
    """Every stored run (newest first), from run.json files: the history trends read."""
    base = root or results_root()
    pattern = f"{safe_name(plan_name)}/run_id=*/run.json" if plan_name else "*/run_id=*/run.json"
    runs = []
    for f in base.glob(pattern):
        doc = read_json(f, {}) or {}
        doc.setdefault("run_dir", str(f.parent))
        runs.append(doc)
    return sorted(runs, key=lambda d: d.get("started_at") or 0, reverse=True)
