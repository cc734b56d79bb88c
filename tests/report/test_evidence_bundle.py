"""The evidence bundle over a real stored run and its reports: everything the run stored and every
report file inside, provenance and prices per target, and the same files give the same manifest.
Tampering and secrets: tests/security/test_bundle_tampering.py."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from bakeoff.cli import main
from bakeoff.publishing import evidence

KEY_A = "a" * 64


@pytest.fixture
def bundle(built, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", KEY_A)
    return Path(str(evidence.build(built["plan"], built["run_dir"], built["paths"], tmp_path, failed_steps=[])))


def test_round_trip_holds_the_run_and_its_reports(built, bundle, capsys):
    v = evidence.verify(bundle)
    assert v.ok, v.errors
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
    rdir = built["run_dir"]
    stored = {f"results/{p.relative_to(rdir).as_posix()}" for p in rdir.rglob("*") if p.is_file()}
    assert stored <= names  # every file the run stored, Parquet included
    assert any("/requests/" in n for n in names) and any("/points/" in n for n in names)
    assert {f"report/{Path(p).name}" for p in built["paths"].values()} <= names
    assert {"results/plan.json", "results/validation.json", evidence.PRICES, evidence.PROVENANCE} <= names
    assert v.checked_files == len(names) - 2  # all but the manifest and its signature
    assert main(["verify", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "verified" in out and f"plan {built['plan'].name}" in out and "this installation's key" in out


def test_provenance_and_prices_per_target(built, bundle):
    with zipfile.ZipFile(bundle) as z:
        prov = json.loads(z.read(evidence.PROVENANCE))
        prices = json.loads(z.read(evidence.PRICES))
    for t in built["plan"].targets:
        assert prov[t.name]["instance_type"] == t.instance_type
        assert prov[t.name]["checkpoint"] == t.checkpoint_id
        assert prices["targets"][t.name]["usd_per_hour"] == pytest.approx(t.usd_per_hour)


def test_same_run_gives_the_same_files(built, bundle, tmp_path):
    """Member times are fixed: two bundles of one run differ only in the manifest's creation time."""
    again = Path(str(evidence.build(built["plan"], built["run_dir"], built["paths"], tmp_path / "again")))
    with zipfile.ZipFile(bundle) as a, zipfile.ZipFile(again) as b:
        fa, fb = (json.loads(z.read(evidence.MANIFEST))["files"] for z in (a, b))
    assert fa == fb


def test_the_approval_is_in_the_report_and_the_bundle(built, tmp_path, monkeypatch):
    from bakeoff import store
    from bakeoff.report import gather
    from bakeoff.spend import approval

    monkeypatch.setenv("BAKEOFF_SECRET_KEY", KEY_A)
    rec = store.record_path(built["run_dir"], approval.RECORD)
    who = {"id": "alice", "name": "Alice"}
    approval.record(built["run_dir"], approval.APPROVED, by=who, at=1.7e9, spend_usd=331.24, shown={"body": "…"})
    try:
        line = "Spend approval: approved by Alice at 2023-11-14 22:13 UTC; shown: 331.24 USD estimated."
        assert line in gather.gather(built["plan"], built["run_dir"]).caveats
        path = evidence.build(built["plan"], built["run_dir"], built["paths"], tmp_path)
        text = evidence.describe(evidence.verify(str(path)))
        assert "approval: approved by Alice at 2023-11-14 22:13 UTC" in text
    finally:
        rec.unlink()
