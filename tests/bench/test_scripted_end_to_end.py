"""Against the scripted server process: known timing measured back, SLA knee, CLI, worker processes."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.client.monitor import LoopMonitor
from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.load.calibration import calibrate
from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload
from bakeoff.serving.emulator.scripted import ScriptedServerProcess


@pytest.fixture(scope="module")
def knee_server():
    # TTFT = 5 ms + 4 ms x requests in flight: at concurrency C about 5 + 4C ms
    with ScriptedServerProcess({"ttft_ms": 5, "itl_ms": 1, "tokens_per_chunk": 1, "ttft_per_inflight_ms": 4}) as s:
        yield s


def _ep(url):
    return Endpoint(target="t", base_url=url, model="scripted", stack="scripted", emulated=True)


@pytest.mark.slow
def test_known_timing_is_measured_back(knee_server, tmp_path):
    w = Workload(name="w", input_len=16, output_len=21, concurrency=[1, 4], requests_per_point=12, warmup_requests=2)
    out = run_workload(_ep(knee_server.url), AdhocTarget("t", 2), w, Slo(), tmp_path, "r", None, True, provenance=False)
    one, four = out
    cal = json.loads((tmp_path / "client_calibration.json").read_text())
    assert cal["concurrency"] == 4 and cal["ok"] == 8 and abs(cal["ttft_error_ms_mean"]) < 25
    assert one["ttft_ms_p50"] == pytest.approx(9, abs=3)  # 5 + 4 x 1
    assert four["ttft_ms_p50"] == pytest.approx(21, abs=3.5)  # 5 + 4 x 4
    assert one["tpot_ms_p50"] == pytest.approx(1.0, abs=0.5)
    assert one["completed"] == 12 and one["output_tps"] == pytest.approx(one["output_tps_per_gpu"] * 2)
    df = pd.read_parquet(tmp_path / "requests" / "w-c4-r0.parquet")
    assert len(df) == 14 and df["warmup"].sum() == 2 and (df["output_tokens"] == 21).all()
    assert (df["prompt_tokens"] == df["requested_input_len"]).all()
    # the closed loop keeps exactly 4 in flight: count overlapping [send, end] intervals
    ev = sorted(
        [(t, 1) for t in df["start_offset"]] + [(t, -1) for t in df["start_offset"] + df["elapsed"]],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, d in ev:
        level += d
        peak = max(peak, level)
    assert peak == 4


@pytest.mark.slow
def test_sla_search_finds_the_knee_within_one_step(tmp_path):
    # every token gap = 1 ms + 2 ms x requests in flight, so at concurrency C TPOT ~ 1 + 2C ms:
    # median TPOT <= 26 ms holds up to C = 12 (25 ms) and fails from C = 13 (27 ms). InferenceMAX
    # point sizes (10 x C measured after 2 x C warm-up) keep every round full.
    script = {"ttft_ms": 2, "itl_ms": 1, "tokens_per_chunk": 1, "itl_per_inflight_ms": 2}
    w = Workload(name="sla", input_len=8, output_len=4, load="sla", concurrency=[1, 32], sla={"start": 1, "max": 32})
    with ScriptedServerProcess(script) as srv:
        out = run_workload(
            _ep(srv.url),
            AdhocTarget("t"),
            w,
            Slo(tpot_p50_ms=26),
            tmp_path,
            "r",
            None,
            True,
            provenance=False,
            calibrate=False,
        )
    res = json.loads((tmp_path / "sla-sla.json").read_text())
    assert abs(res["best"] - 12) <= 1, res["probes"]
    assert res["first_failing"] - res["best"] == 1 and res["best_output_tps_per_gpu"] > 0
    assert [p["load"] for p in res["probes"]][:5] == [1, 2, 4, 8, 16]
    assert len(out) == len(res["probes"]) and res["monotone"]


@pytest.mark.slow
def test_worker_processes_share_a_point(knee_server, tmp_path):
    w = Workload(
        name="mp", input_len=8, output_len=5, concurrency=[4], requests_per_point=16, warmup_requests=4, workers=2
    )
    (s,) = run_workload(
        _ep(knee_server.url), AdhocTarget("t"), w, Slo(), tmp_path, "r", None, True, provenance=False, calibrate=False
    )
    df = pd.read_parquet(tmp_path / "requests" / "mp-c4-r0.parquet")
    assert s["completed"] == 16 and sorted(df["index"]) == list(range(20))
    assert s["ttft_ms_p50"] == pytest.approx(21, abs=4)  # still 4 in flight overall
    assert df["start_offset"].min() >= 0 and s["duration_s"] < 5


def test_rate_mode_records_schedule(knee_server, tmp_path):
    w = Workload(
        name="rate",
        input_len=8,
        output_len=3,
        load="rate",
        rates=[50],
        requests_per_point=30,
        arrival="gamma",
        burstiness=0.5,
    )
    (s,) = run_workload(
        _ep(knee_server.url), AdhocTarget("t"), w, Slo(), tmp_path, "r", None, True, provenance=False, calibrate=False
    )
    assert s["load_mode"] == "rate" and s["rate"] == 50 and s["concurrency"] == 50000 and s["completed"] == 30
    df = pd.read_parquet(tmp_path / "requests" / "rate-c50000-r0.parquet")
    assert ((df["start_offset"] - df["scheduled_offset"]) < 0.05).all()


@pytest.mark.slow
def test_cli_writes_parquet_and_summary(knee_server, tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_TEST_KEY", "k-123")
    out = tmp_path / "cli"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bakeoff.bench.cli",
            "bench",
            "--endpoint",
            knee_server.url,
            "--model",
            "scripted",
            "--workload",
            "name=cli,input_len=8,output_len=4,concurrency=[2],requests_per_point=6,warmup_requests=0",
            "--slo",
            "ttft_p99_ms=500",
            "--gpus",
            "8",
            "--api-key-env",
            "BENCH_TEST_KEY",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert doc["points"][0]["completed"] == 6 and doc["gpus"] == 8 and "k-123" not in (out / "summary.json").read_text()
    assert (out / "points" / "cli-c2-r0.parquet").exists() and "SLO met" in r.stdout
    # the calibration is told once (logged as it is measured), never printed again
    assert doc["calibration"]["ok"] > 0 and (r.stdout + r.stderr).count("client self-calibration") == 1
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "bakeoff.bench.cli",
            "bench",
            "--endpoint",
            knee_server.url,
            "--model",
            "m",
            "--workload",
            "name=x,concurrency=[0]",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "concurrency" in bad.stderr


@pytest.mark.slow
def test_self_calibration_reports_small_error():
    cal = calibrate(concurrency=4, requests=16, ttft_ms=50, itl_ms=2, output_tokens=10)
    assert cal["ok"] == 16 and cal["truth_ttft_ms"] == 50
    # the truth is subtracted (a raw TTFT would read ~50) and the error is small but not absurdly so
    assert -1 < cal["ttft_error_ms_mean"] < 25 and abs(cal["tpot_error_ms_mean"]) < 2


def test_blocked_event_loop_marks_the_point_client_bound():
    import asyncio
    import time

    async def busy():
        with LoopMonitor(period=0.005) as mon:
            for _ in range(10):
                t = time.perf_counter()
                while time.perf_counter() - t < 0.02:  # the client hogging its own loop and core
                    pass
                await asyncio.sleep(0)
        return mon.figures()

    async def idle():
        with LoopMonitor(period=0.005) as mon:
            await asyncio.sleep(0.2)
        return mon.figures()

    hog, calm = run_async(busy()), run_async(idle())
    assert hog["client_bound"] is True and hog["loop_lag_ms_p99"] > 15
    assert calm["client_cpu_pct"] < hog["client_cpu_pct"] and calm["loop_lag_ms_p99"] < hog["loop_lag_ms_p99"]


def test_client_bound_rules():
    from bakeoff.bench.client.monitor import client_verdict

    assert client_verdict(20, 1.0, None)["client_bound"] is False
    assert client_verdict(95, 1.0, None)["client_bound"] is True  # a saturated core
    assert client_verdict(150, 1.0, None, workers=2)["client_bound"] is False
    assert client_verdict(20, 8.0, None)["client_bound"] is True  # late wake-ups
    assert client_verdict(20, 1.0, 25.0)["client_bound"] is True  # open-loop sends behind schedule


def test_kernel_receive_timestamps_survive_a_blocked_event_loop():
    """The first chunk arrives at ~50 ms while the client's loop is stuck until ~160 ms: the
    recorded TTFT is the arrival time, not the time the client got round to reading it."""
    import asyncio
    import time

    from bakeoff.bench.client.transport import StreamingClient

    async def go(url):
        c = StreamingClient(url, timeout_s=10)
        await c.warm(1)
        raw = c.build(
            "/v1/completions",
            {
                "model": "scripted",
                "prompt": "a b",
                "max_tokens": 3,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        asyncio.get_running_loop().call_later(0.01, time.sleep, 0.15)
        t = time.perf_counter()
        out = await c.stream(raw)
        waited = time.perf_counter() - t
        await c.close()
        return out, waited

    with ScriptedServerProcess({"ttft_ms": 50, "itl_ms": 1, "tokens_per_chunk": 1}) as srv:
        out, waited = run_async(go(srv.url))
    assert out.error is None and waited > 0.15
    assert 0.045 < out.state.ttft < 0.08
