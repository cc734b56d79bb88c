"""A time-scaled emulator's figures are on the emulated hardware's clock (bench.clock): at time_scale 0.2
its TPOT is the emulated GPU's decode step, not a fifth of it, and a rate point offers the plan's rate on
that clock, not five times it."""

from __future__ import annotations

import pytest

from bakeoff.bench.client import clock
from bakeoff.bench.metrics.records import RequestRecord
from bakeoff.plan import Workload
from bakeoff.twin.roofline import Roofline
from tests.bench.emulated_runs import emulated_target, run_points


def test_records_go_back_on_the_emulated_clock_and_arrivals_out_on_the_wall_clock():
    r = RequestRecord("r", "t", "w", 1, 0, 0, False, send_time=1e9, start_offset=0.5, ttft=0.01, e2e=0.1)
    r.chunk_offsets, r.elapsed = [0.01, 0.05, 0.1], 0.1
    clock.to_emulated([r], 0.05)
    assert (r.start_offset, r.ttft, r.e2e, r.elapsed) == pytest.approx((10.0, 0.2, 2.0, 2.0))
    assert r.chunk_offsets == pytest.approx([0.2, 1.0, 2.0]) and r.send_time == 1e9  # an epoch stays
    assert r.ttfa is None and r.scheduled_offset is None  # absent durations stay absent
    assert clock.to_wall([0.0, 2.0, 4.0], 0.05) == pytest.approx([0.0, 0.1, 0.2])
    t = emulated_target(emulator={"time_scale": 0.05})
    assert clock.time_scale(t, emulated=True) == 0.05 and clock.time_scale(t, emulated=False) == 1.0


@pytest.mark.slow
def test_a_time_scaled_emulator_reports_the_emulated_hardwares_figures(emulator, tmp_path):
    t = emulated_target(emulator={"time_scale": 0.2})
    url = emulator(t)
    w = Workload(name="w", input_len=64, output_len=32, concurrency=[4], requests_per_point=8, warmup_requests=0)
    (p,) = run_points(url, t, w, tmp_path / "c")
    # at least the emulated GPU's decode step at 4 sequences (the event loop adds to it); on the wall
    # clock the point would show a fifth of it
    step_ms = Roofline.for_target(t).decode_step_s(4, 4 * (64 + 16)) * 1000
    assert 0.7 * step_ms < p["tpot_ms_p50"] < 4 * step_ms
    # a rate point offers the plan's rate on that clock: 12 arrivals at 4 req/s span ~3 emulated seconds
    r = Workload(name="r", input_len=64, output_len=8, load="rate", rates=[4.0], requests_per_point=12)
    (q,) = run_points(url, t, r, tmp_path / "r")
    assert q["request_throughput"] == pytest.approx(4.0, rel=0.5) and q["duration_s"] > 1.5
