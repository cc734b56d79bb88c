"""Runs and installations cannot collide (second review, N2 and N3).

Each test is an attempt that worked before: two run ids Airflow accepts (``...T09:00:00+00:00`` and
``...T09_00_00_00_00``) shared one results folder and the second ``start_run`` overwrote the first
run's start record; and the reaper terminated another installation's node because its run id (the
same ``scheduled__<date>`` on both) had ended here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from bakeoff import secrets, store
from bakeoff.cleanup import reaper
from bakeoff.core.instance import Instance
from bakeoff.paths import run_folder
from bakeoff.plan import plans_dir
from bakeoff.providers.base import TAG_EXPIRES, TAG_INSTALLATION, TAG_PLAN, TAG_RUN
from bakeoff.run import pipeline, provisioning, step_context

FIRST, SECOND = "manual__2026-12-01T09:00:00+00:00", "manual__2026-12-01T09_00_00_00_00"


def _plan(tmp_path: Path) -> str:
    raw = yaml.safe_load((plans_dir() / "local-demo.yaml").read_text())
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


# --- N2: one folder per run -----------------------------------------------------------------------


def test_run_ids_that_look_alike_get_their_own_folders(data_root, tmp_path):
    assert run_folder(FIRST) != run_folder(SECOND)
    assert run_folder(FIRST).startswith("manual__2026-12-01T09_00_00_00_00.")  # still readable
    a = pipeline.start_run(_plan(tmp_path), FIRST)
    b = pipeline.start_run(_plan(tmp_path), SECOND)
    assert a["run_dir"] != b["run_dir"]
    assert store.read_record(a["run_dir"], store.START)["run_id"] == FIRST
    assert store.read_record(b["run_dir"], store.START)["run_id"] == SECOND
    assert step_context.serving_key(
        step_context.run_plan(a["run_dir"]).targets[0], step_context.run_id_of(a["run_dir"])
    ) == (secrets.api_key(FIRST, step_context.run_plan(a["run_dir"]).targets[0].slug))


def test_start_run_never_takes_over_a_folder_that_holds_a_run(data_root, tmp_path):
    a = pipeline.start_run(_plan(tmp_path), FIRST)
    before = Path(a["run_dir"], store.STEPS, f"{store.START}.json").read_bytes()
    with pytest.raises(FileExistsError, match=r"already holds a run .*trigger a new run"):
        pipeline.start_run(_plan(tmp_path), FIRST)
    assert Path(a["run_dir"], store.STEPS, f"{store.START}.json").read_bytes() == before


def test_the_start_record_is_created_exclusively(data_root, tmp_path):
    rdir = store.run_dir("p", "r")
    store.create_record(rdir, store.START, {"run_id": "r"})
    with pytest.raises(FileExistsError):
        store.create_record(rdir, store.START, {"run_id": "other"})
    assert store.read_record(rdir, store.START) == {"run_id": "r"}
    assert [p.name for p in (rdir / store.STEPS).iterdir()] == [f"{store.START}.json"]  # no temporary file left


# --- N3: an installation judges only its own nodes by their run ------------------------------------


def _node(installation: str | None, run_id: str = "scheduled__2026-12-01", expires_in: float = 3600) -> Instance:
    tags = {TAG_PLAN: "p", TAG_RUN: run_id, TAG_EXPIRES: str(int(time.time() + expires_in))}
    if installation:
        tags[TAG_INSTALLATION] = installation
    return Instance(
        provider="vultr",
        id=f"n-{installation}",
        target="t",
        run_id=run_id,
        state="running",
        expires_at=time.time() + expires_in,
        tags=tags,
    )


def test_the_installation_id_comes_from_the_secret_and_differs_between_installations(monkeypatch):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", "a" * 64)
    ours = secrets.installation_id()
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", "b" * 64)
    theirs = secrets.installation_id()
    assert ours != theirs and ours.startswith("bi-") and "a" * 8 not in ours
    monkeypatch.setenv(secrets.INSTALLATION_ID_ENV, ours)  # the independent reaper holds no secret
    assert secrets.installation_id() == ours


def test_another_installations_node_with_an_ended_run_id_is_kept_until_it_expires(monkeypatch):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", "a" * 64)
    ours = secrets.installation_id()
    ended = lambda plan, run_id: "success"  # noqa: E731 - this installation's run of the same id ended
    now = time.time()
    assert reaper.verdict(_node(ours), now, ended, ours) == "run scheduled__2026-12-01 ended (success)"
    assert reaper.verdict(_node("bi-another"), now, ended, ours) is None
    assert reaper.verdict(_node(None), now, ended, ours) is None  # untagged: nobody's to judge by run
    assert "expired" in reaper.verdict(_node("bi-another", expires_in=-5), now, ended, ours)
    powered_off = _node("bi-another")
    powered_off.state = "failed"
    assert "powered off" in reaper.verdict(powered_off, now, ended, ours)


def test_provision_tags_the_node_with_this_installation(data_root, tmp_path, monkeypatch):
    seen: dict = {}

    class Spy:
        def create(self, target, run_id, *, tags, spec):
            seen.update(tags)
            raise RuntimeError("stop here: nothing launched")

    run = pipeline.start_run(_plan(tmp_path), "manual__tagged")
    monkeypatch.setattr(provisioning, "provider_for", lambda *a, **k: Spy())
    with pytest.raises(RuntimeError, match="stop here"):
        provisioning.provision(run["run_dir"], run["targets"][0])
    assert seen[TAG_INSTALLATION] == secrets.installation_id() and seen[TAG_RUN] == "manual__tagged"


def test_production_docs_say_how_two_installations_share_an_account():
    text = (Path(__file__).resolve().parents[2] / "docs" / "production.md").read_text()
    section = text[text.index("## Two installations in one cloud account") :]
    assert "BAKEOFF_INSTALLATION_ID" in section and "installation-id" in section
    assert json.dumps(TAG_INSTALLATION)[1:-1] in section


@pytest.mark.parametrize(
    ("run_id", "target", "derived"),
    [
        ("derive", "installation-id", "installation-id"),
        ("derive/tls/r1", "t", "tls/r1/t"),  # a node's TLS private key seed
        ("derive", "evidence-signing/v1", "evidence-signing/v1"),  # the bundle signing key
    ],
)
def test_a_serving_key_never_reveals_a_derived_or_fleet_key(monkeypatch, run_id, target, derived):
    """Each kind of key has its own HMAC domain: a run id and target chosen to spell a derived key's
    label get a serving key unrelated to it (it used to be its first 160 bits)."""
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", "d" * 64)
    served = secrets.api_key(run_id, target).removeprefix("bk-")
    for key in (secrets.derive(derived), secrets.fleet_key(derived), secrets.fleet_key(f"{run_id}/{target}")):
        assert not key.hex().startswith(served[:16])
    assert secrets.derive(derived) != secrets.fleet_key(derived)
