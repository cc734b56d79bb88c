"""The start record's budget and approval need and an endpoint's provenance are typed values that read
every version's JSON and write it back byte for byte (old run folders load; reports do not change)."""

from __future__ import annotations

import json

from bakeoff.core import facts
from bakeoff.core.endpoint import Endpoint, Provenance


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


ROW = {
    "target": "mi355x",
    "provider": "oci",
    "usd_per_hour": 40.0,
    "contract_usd_per_hour": 32.5,
    "boot_h": 0.25,
    "load_h": 0.4,
    "download_h": 0.1,
    "checkpoint_gb": 700.0,
    "gate_h": 0.05,
    "bench_h": 0.6,
    "serving_margin": 0.3,
    "basis": "twin (calibrated)",
    "hours": 1.6,
    "usd": 64.0,
    "usd_low": 52.0,
    "spends": True,
    "kill_switch_s": 5760,
}


def test_a_start_record_of_this_version_and_an_earlier_one_reads_and_writes_back_unchanged():
    now = {
        "plan": "p",
        "budget": {"cap_usd": 100.0, "estimate_usd": 64.0, "estimate_low_usd": 52.0, "margin": 0.25, "targets": [ROW]},
        "approval_needed": {
            "required": True,
            "spend_usd": 64.0,
            "threshold_usd": 10.0,
            "plan_sha256": "ab" * 32,
            "reason": "over",
        },
    }
    old_row = {k: v for k, v in ROW.items() if k not in ("usd_low", "basis", "kill_switch_s")}
    before = {"plan": "p", "budget": {"cap_usd": 100.0, "estimate_usd": 64.0, "targets": [old_row]}}
    for doc in (now, before, {"plan": "p"}):
        start = facts.parse(facts.Start, doc, "start.json")
        assert _same(start.to_json(), {**facts.Start().to_json(), **doc})
    old = facts.parse(facts.Start, before, "start.json")
    assert old.budget.targets[0].usd_low is None and old.budget.margin == 0.0 and not old.approval_needed.required
    assert isinstance(facts.parse(facts.Start, now, "start.json").budget.targets[0].kill_switch_s, int)


def test_an_endpoint_reads_its_stored_provenance_and_writes_it_back_byte_for_byte():
    stored = {
        "target": "t",
        "base_url": "https://203.0.113.7:8000",
        "model": "m",
        "stack": "vllm",
        "emulated": False,
        "api_key_env": None,
        "agent_url": None,
        "tls_cert": None,
        "power_csv": None,
        "provenance": {
            "models": {"data": [{"id": "m", "owned_by": "vllm"}]},
            "version": None,
            "stack": "vllm",
            "image": "vllm/vllm-openai@sha256:" + "0" * 64,
            "entrypoint": "vllm serve",
            "engine_args": ["--port", "8000"],
            "env": {"VLLM_X": "1"},
            "extra_files": {},
            "client_mode": "remote",
            "network": {"rtt_ms": 1.5, "samples": 5},
            "node": {"driver": {"version": "570"}, "gpus": 8},
            "roles": [{"role": "prefill", "node": 0}],
            "custom": {"tokenize_route": "/tok", "port": 9000},
        },
    }
    ep = Endpoint.from_dict(stored)
    assert ep.provenance.stack == "vllm" and ep.provenance.node == {"driver": {"version": "570"}, "gpus": 8}
    assert json.dumps(ep.to_dict(), sort_keys=True) == json.dumps(stored, sort_keys=True)
    assert ep.route("tokenize", "/tokenize") == "/tok" and ep.route("metrics", "/metrics") is None
    bare = Endpoint.from_dict({k: v for k, v in stored.items() if k != "provenance"})
    assert bare.provenance == Provenance() and bare.to_dict()["provenance"] == {}
    assert bare.route("metrics", "/metrics") == "/metrics"
