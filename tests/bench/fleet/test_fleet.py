"""A point's client over a fleet of member processes that share no clock: the one schedule dealt
once, clock offsets measured and corrected, client-bound from any member, one concurrency budget.

The members are real processes talking real HTTP to a loopback server that logs when each request
arrived on its own (true) clock, so a member's corrected send times can be held against it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from bakeoff.bench.cli import AdhocTarget
from bakeoff.bench.fleet import members as fleet
from bakeoff.bench.load.loadgen import arrival_offsets
from bakeoff.bench.load.point import Ctx
from bakeoff.bench.run import run_workload
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import PlanError, Slo, Workload, plan_from_dict, plans_dir
from tests.fleet_fixtures import ArrivalServer

SKEW_S = 5.0


@pytest.fixture
def server():
    with ArrivalServer() as s:
        yield s


def _ctx(server, w: Workload, tmp_path) -> Ctx:
    ep = Endpoint(target="t", base_url=server.url, model="m", stack="scripted", emulated=True)
    return Ctx(ep, AdhocTarget("t"), w, Slo(), tmp_path, "r", None, True, provenance=False)


def test_deal_splits_the_budget_and_the_schedule_exactly():
    assert fleet.shares(5, 2) == [3, 2] and sum(fleet.shares(7, 3)) == 7
    closed = [fleet.dealt(20, 2, m, 5) for m in range(2)]
    assert sorted(closed[0] + closed[1]) == list(range(20)) and len(closed[0]) == 12  # 3 of 5 slots
    opened = [fleet.dealt(9, 4, m, None) for m in range(4)]
    assert sorted(sum(opened, [])) == list(range(9)) and opened[1] == [1, 5]
    # NTP: member clock 2 s behind, 10 ms each way, 1 ms in the coordinator
    s = fleet.clock_sample(100.0, 102.010, 102.011, 100.021)
    assert s.offset_s == pytest.approx(2.0) and s.rtt_s == pytest.approx(0.020)
    assert fleet.best_sample([fleet.ClockSample(9.0, 0.5), s]).offset_s == pytest.approx(2.0)


@pytest.mark.slow
def test_open_loop_fleet_sends_the_schedule_once_and_corrects_a_skewed_clock(server, tmp_path):
    w = Workload(name="ol", input_len=8, output_len=2, load="rate", rates=[200], requests_per_point=40)
    offsets = [float(o) for o in arrival_offsets(40, 200, "poisson", 1.0, seed=0)]
    works = fleet.member_works(_ctx(server, w, tmp_path), key=200_000, repeat=0, offsets=offsets, members=2)
    works[1].clock_skew_s = SKEW_S  # member 1's clock runs 5 s ahead
    point = fleet.run_fleet(works)
    recs = point.records
    assert [r.index for r in recs] == list(range(40)), "every scheduled request once, none twice"
    assert [r.scheduled_offset for r in recs] == offsets
    by = {r.member: r for r in point.members}
    assert by[1].offset_s == pytest.approx(-SKEW_S, abs=0.005) and abs(by[0].offset_s) < 0.005
    assert point.figures["clock_offset_ms_max"] == pytest.approx(SKEW_S * 1e3, abs=5)
    # corrected send times on the coordinator's clock are when the server saw the requests arrive
    # (the tolerance is for a busy test machine: uncorrected, member 1's would be 5 s off) ...
    sent = np.sort([r.send_time for r in recs])
    arrived = np.sort(server.arrivals)
    assert np.abs(sent - arrived).max() < 0.1, "a member's send times were not put on the one clock"
    # ... and every member's clock started at the one shared start, member 1's skew or not
    started = np.asarray([r.send_time - r.start_offset for r in recs])
    assert np.abs(started - point.start_time).max() < 0.01
    assert all(r.start_offset >= r.scheduled_offset for r in recs)


@pytest.mark.slow
def test_closed_loop_fleet_keeps_one_budget_and_a_slow_member_marks_the_point(server, tmp_path):
    w = Workload(name="cl", input_len=8, output_len=2, concurrency=[5], requests_per_point=40, warmup_requests=0)
    works = fleet.member_works(_ctx(server, w, tmp_path), key=5, repeat=0, concurrency=5, members=2)
    works[0].stall_ms = 150  # member 0's loop blocks once for 150 ms: that member falls behind
    point = fleet.run_fleet(works)
    assert [r.index for r in point.records] == list(range(40))
    assert server.peak <= 5, f"{server.peak} requests in flight at the server: over the point's budget of 5"
    assert server.peak >= 4, f"peak {server.peak}: the members did not fill the one budget"
    by = {r.member: r for r in point.members}
    assert by[0].figures["client_stalled"] and by[0].figures["loop_stall_ms_max"] >= 150
    assert point.figures["client_bound"] and point.figures["client_stalled"]
    assert point.figures["loop_stall_ms_max"] >= 150 and point.figures["client_fleet"] == 2
    assert by[0].records + by[1].records == 40 and by[0].dealt == 24  # 3 of the 5 slots, 3/5 of the requests


def test_the_point_is_client_bound_when_any_member_was():
    def report(m: int, bound: bool) -> fleet.MemberReport:
        figs = {"client_cpu_pct": 50.0, "loop_lag_ms_p99": 1.0, "loop_stall_ms_max": 2.0, "client_stalled": False}
        return fleet.MemberReport(m, 10, 0.001 * m, 0.0002, {**figs, "client_bound": bound}, 10)

    for bound_one in range(3):
        figs = fleet.fleet_figures([report(m, m == bound_one) for m in range(3)], [])
        assert figs["client_bound"], f"member {bound_one} was client-bound and the point is not"
    assert not fleet.fleet_figures([report(m, False) for m in range(3)], [])["client_bound"]
    figs = fleet.fleet_figures([report(m, False) for m in range(3)], [])
    assert figs["client_fleet"] == 3 and figs["clock_offset_ms_max"] == pytest.approx(2.0)


@pytest.mark.slow
def test_a_workload_with_client_fleet_runs_through_the_benchmark_step(server, tmp_path):
    w = Workload(
        name="fl", input_len=8, output_len=2, concurrency=[3], requests_per_point=24, warmup_requests=0, client_fleet=2
    )
    ep = Endpoint(target="t", base_url=server.url, model="m", stack="scripted", emulated=True)
    (s,) = run_workload(ep, AdhocTarget("t"), w, Slo(), tmp_path, "r", None, True, provenance=False, calibrate=False)
    df = pd.read_parquet(tmp_path / "requests" / "fl-c3-r0.parquet")
    assert s["completed"] == 24 and sorted(df["index"]) == list(range(24))
    assert s["client_fleet"] == 2 and s["clock_rtt_ms_max"] > 0
    assert server.peak <= 3


def _plan_error(**workload) -> str:
    raw = yaml.safe_load((plans_dir() / "local-demo.yaml").read_text())
    raw["workloads"] = [{"name": "top", **workload}]
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw, source="t.yaml")
    return str(e.value)


def test_a_fleet_the_benchmark_cannot_run_is_refused_naming_the_field():
    msg = _plan_error(input_len=8, output_len=2, concurrency=[4], workers=2, client_fleet=2)
    assert "workloads[0]" in msg and "client_fleet: 2 members with workers: 2" in msg and "set one of them to 1" in msg
    sessions = {"concurrent_sessions": [4]}
    assert "client_fleet: not used by kind sessions" in _plan_error(kind="sessions", sessions=sessions, client_fleet=2)
    assert "client_fleet" in _plan_error(input_len=8, output_len=2, client_fleet=0)


@pytest.mark.slow
def test_a_member_that_fails_fails_the_point(tmp_path):
    w = Workload(name="x", input_len=8, output_len=2, concurrency=[2], requests_per_point=4)
    ep = Endpoint(target="t", base_url="http://127.0.0.1:9/", model="m", stack="scripted", emulated=True)
    works = fleet.member_works(
        Ctx(ep, AdhocTarget("t"), w, Slo(), tmp_path, "r", None, True, provenance=False),
        key=2,
        repeat=0,
        concurrency=2,
        members=2,
    )
    works[1].specs = ["not a request"]  # member 1 cannot build its requests
    # the member's own error, not one its clean-up raised on the way out
    with pytest.raises(fleet.FleetError, match="member 1 failed: AttributeError"):
        fleet.run_fleet(works)
