"""The hourly reaper: expired or ended-run nodes go, live runs and unknown runs stay, errors are isolated.
Whether a run ended is Airflow's to say: the reaper is handed a run_state callable (plan, run_id) -> state."""

from __future__ import annotations

import time

from cloud_helpers import launch_args, make_target, new_run_id

from bakeoff.cleanup import reaper


def _launch(creds, run_id, plan, expires_in):
    t = make_target("vultr")
    args = launch_args(run_id, t)
    args["tags"].update({"bakeoff:plan": plan, "bakeoff:expires_at": str(int(time.time() + expires_in))})
    from bakeoff.providers.vultr import VultrProvider

    return VultrProvider(creds).create(t, run_id, **args)


def test_reap_expired_and_ended_keeps_running_and_unknown(rest_creds, data_root):
    creds = rest_creds("vultr")
    ended, live, queued, unknown, expired, broken = (new_run_id() for _ in range(6))
    states = {ended: "failed", live: "running", queued: "queued", expired: "running"}
    asked = []

    def run_state(plan, run_id):
        asked.append((plan, run_id))
        if run_id == broken:
            raise RuntimeError("API server unreachable")
        return states.get(run_id)  # None: a run Airflow does not know

    nodes = {
        "ended": _launch(creds, ended, "p", 3600),
        "live": _launch(creds, live, "p", 3600),
        "queued": _launch(creds, queued, "p", 3600),
        "unknown": _launch(creds, unknown, "p", 3600),
        "expired": _launch(creds, expired, "p", -5),
        "broken": _launch(creds, broken, "p", 3600),
    }
    out = reaper.reap(provider_names=["vultr"], credentials_fn=lambda name: creds, run_state=run_state)
    gone = {r["id"]: r["reason"] for r in out["terminated"]}
    assert set(gone) == {nodes["ended"].id, nodes["expired"].id}
    assert "ended (failed)" in gone[nodes["ended"].id] and "expired" in gone[nodes["expired"].id]
    kept = {r["id"] for r in out["kept"]}
    assert {nodes[k].id for k in ("live", "queued", "unknown", "broken")} <= kept
    assert ("p", ended) in asked and not out["errors"]  # a failed question keeps the node, it is no error
    # without Airflow to ask, only expiry decides: the ended run's node would stay until it expires
    assert reaper.verdict_for_tags({"bakeoff:plan": "p", "bakeoff:run_id": ended}, time.time()) is None
    # an hour later everything has expired
    out = reaper.reap(
        now=time.time() + 7200, provider_names=["vultr"], credentials_fn=lambda name: creds, run_state=run_state
    )
    assert {nodes[k].id for k in ("live", "queued", "unknown", "broken")} <= {r["id"] for r in out["terminated"]}


def test_each_run_is_asked_once_per_pass():
    calls = []
    ask = reaper.cached(lambda plan, run_id: calls.append(run_id) or "success")
    tags = {"bakeoff:plan": "p", "bakeoff:run_id": "r1", "bakeoff:installation": "bi-own"}
    assert reaper.verdict_for_tags(tags, time.time(), ask, "bi-own") == "run r1 ended (success)"
    assert reaper.verdict_for_tags(tags, time.time(), ask, "bi-own") == "run r1 ended (success)"
    assert calls == ["r1"]


def test_an_unreachable_cloud_does_not_stop_the_others(rest_creds, data_root):
    creds = rest_creds("vultr")
    run = new_run_id()
    node = _launch(creds, run, "p", -5)
    bad = {"token": "t", "base_url": "http://127.0.0.1:9/v2", "backoff_s": 0.001}
    out = reaper.reap(
        provider_names=["digitalocean", "vultr"], credentials_fn=lambda name: creds if name == "vultr" else bad
    )
    assert "digitalocean" in out["errors"] and node.id in {r["id"] for r in out["terminated"]}


def _no_aws_chain(monkeypatch, tmp_path):
    """boto3's own chain finds nothing: no keys in the environment, no profile files, no instance role."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_loop_skips_clouds_without_credentials_with_one_info_line(data_root, monkeypatch, tmp_path, caplog):
    _no_aws_chain(monkeypatch, tmp_path)
    caplog.set_level("INFO", logger="bakeoff.cleanup.reaper")
    names = ["local", "aws", "vultr", "digitalocean", "oci"]
    passes = reaper.reap_loop(300, names, lambda name: {}, wait=lambda s: False, max_passes=2)
    assert passes == 2
    assert [r.levelname for r in caplog.records if r.levelname in ("WARNING", "ERROR")] == []
    skips = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert skips == ["reaper: skipping aws, vultr, digitalocean, oci: no credentials configured"]
    assert sum("0 errors" in r.getMessage() for r in caplog.records if "reaper loop: pass" in r.getMessage()) == 2


def test_loop_logs_an_error_when_a_configured_cloud_cannot_be_listed(data_root, monkeypatch, tmp_path, caplog):
    _no_aws_chain(monkeypatch, tmp_path)
    caplog.set_level("INFO", logger="bakeoff.cleanup.reaper")
    bad = {"token": "t", "base_url": "http://127.0.0.1:9/v2", "backoff_s": 0.001}
    creds = {"vultr": bad}
    reaper.reap_loop(
        300, ["vultr", "digitalocean"], lambda name: creds.get(name, {}), wait=lambda s: True, max_passes=1
    )
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors and all("vultr" in e for e in errors)
    assert any("skipping digitalocean" in r.getMessage() for r in caplog.records)
