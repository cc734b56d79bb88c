"""Worker processes share one point: one schedule dealt out once, one concurrency budget, one clock;
and the plan check says when one client core cannot carry a workload's top load."""

import numpy as np
import pandas as pd
import pytest
import yaml

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.client import client_cores
from bakeoff.bench.load.loadgen import arrival_offsets
from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import Slo, Workload, plan_from_dict, plans_dir
from bakeoff.serving.emulator.scripted import ScriptedServerProcess


@pytest.fixture(scope="module")
def server():
    # every request takes ~30 ms + 1 ms: long enough that slots stay busy, short enough for a fast test
    with ScriptedServerProcess({"ttft_ms": 30, "itl_ms": 1, "tokens_per_chunk": 1, "output_tokens": 2}) as s:
        yield s


def _run(server, w, tmp_path, key):
    ep = Endpoint(target="t", base_url=server.url, model="scripted", stack="scripted", emulated=True)
    (s,) = run_workload(ep, AdhocTarget("t"), w, Slo(), tmp_path, "r", None, True, provenance=False, calibrate=False)
    return s, pd.read_parquet(tmp_path / "requests" / f"{w.name}-c{key}-r0.parquet")


def _levels(df):
    """In-flight level after each send and the time-weighted mean level between the first and the
    last send, from the records' [start, end] intervals (all on the one shared clock)."""
    ev = sorted(
        [(t, 1) for t in df["start_offset"]] + [(t, -1) for t in df["start_offset"] + df["elapsed"]],
        key=lambda e: (e[0], e[1]),
    )
    first, last = df["start_offset"].min(), df["start_offset"].max()
    level = peak = 0
    area, prev = 0.0, first
    for t, d in ev:
        if first <= t <= last:
            area += level * (t - prev)
            prev = t
        level += d
        peak = max(peak, level)
    return peak, area / (last - first)


@pytest.mark.slow
def test_closed_loop_workers_keep_one_concurrency_budget(server, tmp_path):
    # C = 3 over 2 processes: 2 + 1 slots. One budget means 3 in flight until the requests run out,
    # whichever process's slots free up first; a fixed half of the requests per process would leave
    # the 1-slot process alone at 1 in flight for the second half of the point.
    w = Workload(
        name="cl", input_len=8, output_len=2, concurrency=[3], requests_per_point=24, warmup_requests=0, workers=2
    )
    s, df = _run(server, w, tmp_path, 3)
    assert s["completed"] == 24 and sorted(df["index"]) == list(range(24))
    peak, mean = _levels(df)
    assert peak == 3, "more (or fewer) requests in flight than the one budget of 3"
    assert mean >= 0.85 * 3, f"mean in flight {mean:.2f}: the budget was not shared"


@pytest.mark.slow
def test_open_loop_workers_send_the_one_schedule_once_within_one_cap(server, tmp_path):
    w = Workload(
        name="ol",
        input_len=8,
        output_len=2,
        load="rate",
        rates=[400],
        requests_per_point=40,
        max_concurrency=3,
        workers=2,
    )
    s, df = _run(server, w, tmp_path, 400_000)
    planned = arrival_offsets(40, 400, "poisson", 1.0, seed=0)
    assert s["completed"] == 40 and sorted(df["index"]) == list(range(40))
    # every scheduled offset sent once, none twice, each by request index as the schedule dealt it
    assert np.array_equal(df.sort_values("index")["scheduled_offset"].to_numpy(), planned)
    assert (df["start_offset"] >= df["scheduled_offset"]).all()  # one clock: never before its time
    peak, _ = _levels(df)
    assert peak == 3, f"peak in flight {peak}: max_concurrency 3 must be split 2 + 1, not 1 + 1"


def _plan(**workload):
    raw = yaml.safe_load((plans_dir() / "local-demo.yaml").read_text())
    raw["workloads"] = [{"name": "top", "input_len": 64, "output_len": 16, **workload}]
    return plan_from_dict(raw, source="t.yaml")


@pytest.mark.slow
def test_plan_check_warns_when_one_core_cannot_carry_the_top_load(capsys, tmp_path):
    heavy = _plan(load="rate", rates=[100, 5000])
    need = client_cores.cores_needed(heavy.workloads[0])
    assert need >= 3  # 5,000 requests/s over ~2,000 per core at 80% busy
    (msg,) = client_cores.warnings(heavy)
    assert msg.startswith("workloads[0].workers:") and f"set workers: {need}" in msg
    assert client_cores.warnings(_plan(load="rate", rates=[5000], workers=need)) == []
    assert client_cores.warnings(_plan(load="rate", rates=[100])) == []
    # closed loop: C sequences streaming fast need C x FAST_STREAM_TOKENS_S tokens/s
    assert client_cores.warnings(_plan(concurrency=[1, 4096]))
    from bakeoff.cli import main

    p = plans_dir() / "local-demo.yaml"
    assert main(["plan", "check", str(p)]) == 0
    out = capsys.readouterr().out
    assert "client for chat-1k-128:" in out and "needs 1 core(s)" in out and "warning" not in out
    raw = yaml.safe_load(p.read_text())
    raw["workloads"][0].update(load="rate", rates=[5000])
    (tmp_path / "heavy.yaml").write_text(yaml.safe_dump(raw))
    assert main(["plan", "check", str(tmp_path / "heavy.yaml")]) == 0
    assert "warning: workloads[0].workers: chat-1k-128's top load" in capsys.readouterr().out


def test_run_start_logs_the_client_core_warning(caplog):
    from bakeoff.spend import budget

    with caplog.at_level("WARNING", logger="bakeoff.spend.budget"):
        budget.check(_plan(load="rate", rates=[5000], requests_per_point=1000))
    assert "workloads[0].workers: top's top load" in caplog.text
