"""``bakeoff bench`` as a new user meets it: its own --help example, what it prints, what it records."""

import json
import os
import subprocess
import sys

import pytest

from bakeoff.bench.cli import _mapping
from bakeoff.bench.load import calibration
from bakeoff.bench.metrics.records import RequestRecord
from bakeoff.bench.metrics.summary import summarize
from bakeoff.plan import Slo
from bakeoff.serving.emulator import scripted
from bakeoff.serving.provenance import identify_engine

KEY = "sekrit-key"


def bench(url, *args, key=True, timeout=120):
    env = {**os.environ, "BENCH_CLI_KEY": KEY}
    cmd = [sys.executable, "-m", "bakeoff", "bench", "--endpoint", url, *args]
    if key:
        cmd += ["--api-key-env", "BENCH_CLI_KEY"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_the_help_example_parses_and_bad_yaml_is_a_clear_error():
    raw = _mapping("name=w,input_len=1024,output_len=128,concurrency=[1,4,16]", "workload")
    assert raw == {"name": "w", "input_len": 1024, "output_len": 128, "concurrency": [1, 4, 16]}
    assert _mapping("sla={over: rate, start: 1},load=sla", "workload")["sla"] == {"over": "rate", "start": 1}
    r = bench("http://127.0.0.1:9", "--model", "m", "--workload", "name=w,concurrency=[1,4", key=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--workload" in r.stderr and "concurrency=[1,4,16]" in r.stderr


@pytest.mark.slow
def test_help_lists_the_workload_and_slo_keys():
    r = subprocess.run([sys.executable, "-m", "bakeoff", "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for key in ("input_len", "output_len", "concurrency", "requests_per_point", "prefix_ratio", "ttft_p99_ms"):
        assert f"\n  {key} (" in r.stdout, key
    assert "load (default 'concurrency'; one of concurrency, rate, trace, sla)" in r.stdout


@pytest.mark.slow
def test_no_slo_no_verdict_and_the_engine_is_named(faulty_server, tmp_path):
    """The server says vLLM through /v1/models (its /version has a number only): stack is recorded."""
    r = bench(
        faulty_server.url,
        "--model",
        "ok",
        "--workload",
        "name=w,input_len=7,output_len=8,concurrency=[1,2],requests_per_point=4,warmup_requests=0",
        "--no-calibrate",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if " r0: " in ln]
    assert len(lines) == 2 and all("no SLO given" in ln and "SLO met" not in ln for ln in lines)
    assert "warning" not in r.stdout
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert (doc["stack"], doc["engine_version"], doc["identified_from"]) == ("vllm", "0.32.0", "/v1/models")


@pytest.mark.slow
def test_an_all_failed_point_says_so_and_mismatches_are_printed(faulty_server, tmp_path):
    r = bench(
        faulty_server.url,
        "--model",
        "fault:http_503",
        "--workload",
        "name=w,input_len=4,output_len=4,concurrency=[2],requests_per_point=4,warmup_requests=0",
        "--slo",
        "ttft_p99_ms=500",
        "--no-calibrate",
        "--out",
        str(tmp_path / "a"),
    )
    assert r.returncode == 0, r.stderr
    assert "ALL REQUESTS FAILED (http_5xx x4)" in r.stdout and "CLIENT-BOUND" not in r.stdout
    # usage reports twice the tokens streamed, and 7 prompt tokens for 4 requested
    r = bench(
        faulty_server.url,
        "--model",
        "fault:mismatch",
        "--workload",
        "name=w,input_len=4,output_len=8,concurrency=[2],requests_per_point=4,warmup_requests=0",
        "--no-calibrate",
        "--out",
        str(tmp_path / "b"),
    )
    assert r.returncode == 0, r.stderr
    assert "4 of 4 requests: the server's usage and the client's own count" in r.stdout
    assert "prompts measured 7.0 tokens on average by the server's usage, 4.0 requested (+75.0%)" in r.stdout


def test_a_point_with_nothing_measured_is_never_client_bound():
    recs = [
        RequestRecord(
            run_id="r",
            target="t",
            workload="w",
            concurrency=2,
            repeat=0,
            index=i,
            warmup=False,
            send_time=0.0,
            start_offset=0.0,
            elapsed=0.01,
            error_kind="connect_error",
        )
        for i in range(4)
    ]
    s = summarize(
        recs,
        gpus=1,
        emulated=False,
        client={"client_cpu_pct": 99.0, "loop_lag_ms_p99": 9.0, "send_lag_ms_p99": None, "client_bound": True},
    )
    assert s["completed"] == 0 and s["client_bound"] is False


def test_identify_engine_from_what_the_server_says():
    def snap(version=None, owner=None, metrics=None):
        return {
            "version": {"status": 200, "json": version} if version else {"status": 404},
            "models": {"status": 200, "json": {"data": [{"id": "m", "owned_by": owner}]}},
            "metrics": {"status": 200, "text": metrics or ""},
        }

    assert identify_engine(snap({"version": "0.5.4"}, "sglang"))["stack"] == "sglang"
    assert identify_engine(snap(None, "x", "# HELP vllm:num_requests_running n\nvllm:num_requests_running 0\n")) == {
        "stack": "vllm",
        "engine_version": None,
        "identified_from": "/metrics",
    }
    assert identify_engine(snap({"version": "bakeoff-emulator-1"}, "bakeoff-emulator"))["stack"] == "emulator"
    assert identify_engine(snap({"version": "1.0"}, "someone"))["stack"] == "unknown"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_calibration_server_runs_off_the_clients_core(monkeypatch):
    seen = {}
    enter = scripted.ScriptedServerProcess.__enter__

    def spy(self):
        out = enter(self)
        seen["server"] = os.sched_getaffinity(self.proc.pid)
        return out

    monkeypatch.setattr(scripted.ScriptedServerProcess, "__enter__", spy)
    before = os.sched_getaffinity(0)
    client = {min(before)}
    os.sched_setaffinity(0, client)  # a client pinned to one core (taskset -c)
    try:
        cal = calibration.calibrate(concurrency=2, requests=4, ttft_ms=5, itl_ms=1, output_tokens=4)
    finally:
        os.sched_setaffinity(0, before)
    assert seen["server"] and not seen["server"] & client
    assert cal["server_cpu"] in seen["server"] and cal["client_cpus"] == sorted(client)
    line = calibration.calibration_line(cal)
    assert f"on CPU {cal['server_cpu']}" in line and "C=2" in line and "not a measurement of the endpoint" in line


def test_an_slo_mapping_longer_than_a_file_name_is_read_as_the_mapping():
    """The co-located job passes the plan's whole SLO inline (every bound a key): longer than a file name
    may be, it must be parsed, not looked up on disk."""
    slo = Slo(ttft_p95_ms=2000, per_request={"ttft_ms": 2000, "tpot_ms": 50, "min_share": 0.95})
    text = json.dumps(slo.model_dump(mode="json"))
    assert len(text) > 255
    assert Slo(**_mapping(text, "slo")) == slo


def test_a_throttled_point_says_so_on_its_line_as_a_client_bound_one_does():
    from bakeoff.bench.console import point_line

    s = {
        "load_mode": "concurrency",
        "concurrency": 8,
        "repeat": 0,
        "completed": 10,
        "failed": 0,
        "meets_slo": True,
        "ttft_ms_p99": 120.0,
        "tpot_ms_p50": 20.0,
        "output_tps_per_gpu": 300.0,
        "client_bound": False,
        "power_w_per_gpu": 700.0,
    }
    assert "THROTTLED" not in point_line(s, judged=True, emulated=False)
    line = point_line(s | {"throttled": True, "throttle_reasons": "hw_thermal"}, judged=True, emulated=False)
    assert "THROTTLED (hw_thermal)" in line and "700 W/GPU" in line
