"""The hourly reaper: expired or ended-run nodes go, live runs and unknown runs stay, errors are isolated."""

from __future__ import annotations

import time

from cloud_helpers import launch_args, make_target, new_run_id

from bakeoff import reaper, store


def _launch(creds, run_id, plan, expires_in):
    t = make_target("vultr")
    args = launch_args(run_id, t)
    args["tags"].update({"bakeoff:plan": plan, "bakeoff:expires_at": str(int(time.time() + expires_in))})
    from bakeoff.providers.vultr import VultrProvider

    return VultrProvider(creds).create(t, run_id, **args)


def test_reap_expired_and_ended_keeps_running_and_unknown(rest_creds, data_root):
    creds = rest_creds("vultr")
    ended, live, unknown, expired = (new_run_id() for _ in range(4))
    store.update_run(store.run_dir("p", ended), run_id=ended, status="failed")
    store.update_run(store.run_dir("p", live), run_id=live, status="running")
    nodes = {
        "ended": _launch(creds, ended, "p", 3600),
        "live": _launch(creds, live, "p", 3600),
        "unknown": _launch(creds, unknown, "p", 3600),
        "expired": _launch(creds, expired, "p", -5),
    }
    out = reaper.reap(provider_names=["vultr"], credentials_fn=lambda name: creds)
    gone = {r["id"]: r["reason"] for r in out["terminated"]}
    assert set(gone) == {nodes["ended"].id, nodes["expired"].id}
    assert "ended (failed)" in gone[nodes["ended"].id] and "expired" in gone[nodes["expired"].id]
    kept = {r["id"] for r in out["kept"]}
    assert {nodes["live"].id, nodes["unknown"].id} <= kept
    # an hour later everything has expired
    out = reaper.reap(now=time.time() + 7200, provider_names=["vultr"], credentials_fn=lambda name: creds)
    assert {nodes["live"].id, nodes["unknown"].id} <= {r["id"] for r in out["terminated"]}


def test_an_unreachable_cloud_does_not_stop_the_others(rest_creds, data_root):
    creds = rest_creds("vultr")
    run = new_run_id()
    node = _launch(creds, run, "p", -5)
    bad = {"token": "t", "base_url": "http://127.0.0.1:9/v2", "backoff_s": 0.001}
    out = reaper.reap(
        provider_names=["digitalocean", "vultr"], credentials_fn=lambda name: creds if name == "vultr" else bad
    )
    assert "digitalocean" in out["errors"] and node.id in {r["id"] for r in out["terminated"]}
