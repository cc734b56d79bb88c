"""Metric definitions on hand-computed points (multi-token chunks, 1-token outputs, errors, warm-up)."""

import json
import math

import pytest

from bakeoff.bench.metrics.summary import POINT_COLUMNS, summarize
from bakeoff.plan import Slo
from tests.bench.metrics.record_fixtures import rec


def point():
    return [
        # one token per chunk: TPOT (0.5-0.1)/4 = 100 ms, gaps 4 x 100 ms
        rec(
            0,
            0.0,
            ttft=0.1,
            e2e=0.5,
            elapsed=0.5,
            output_tokens=5,
            prompt_tokens=10,
            chunk_offsets=[0.1, 0.2, 0.3, 0.4, 0.5],
            chunks=5,
        ),
        # three tokens per chunk: TPOT (0.6-0.2)/8 = 50 ms, but chunk gaps are 200 ms
        rec(
            1,
            0.1,
            ttft=0.2,
            e2e=0.6,
            elapsed=0.6,
            output_tokens=9,
            prompt_tokens=20,
            chunk_offsets=[0.2, 0.4, 0.6],
            chunks=3,
        ),
        # one output token: no TPOT, no gap; no usage for the prompt -> requested length (30)
        rec(2, 0.2, ttft=0.05, e2e=0.05, elapsed=0.05, output_tokens=1, chunk_offsets=[0.05], chunks=1),
        # a failure: counts in failed, error rate and duration, nowhere else
        rec(3, 0.3, elapsed=0.2, error_kind="http_5xx", error="HTTP 503", status_code=503),
        # warm-up: ignored entirely
        rec(
            4,
            -1.0,
            warmup=True,
            ttft=9.0,
            e2e=9.5,
            elapsed=9.5,
            output_tokens=500,
            prompt_tokens=999,
            chunk_offsets=[9.0, 9.5],
            chunks=2,
        ),
    ]


def test_hand_computed_point():
    s = summarize(point(), gpus=2, slo=Slo(ttft_p99_ms=150, tpot_p99_ms=90), emulated=True)
    assert list(s) == POINT_COLUMNS
    assert (s["completed"], s["failed"]) == (3, 1)
    assert s["error_rate"] == pytest.approx(0.25)
    assert s["duration_s"] == pytest.approx(0.7)  # first measured send 0.0 -> last end 0.1+0.6
    assert s["output_tps"] == pytest.approx(15 / 0.7)
    assert s["input_tps"] == pytest.approx(60 / 0.7)
    assert s["total_tps_per_gpu"] == pytest.approx(75 / 0.7 / 2)
    assert s["output_tps_per_gpu"] == pytest.approx(15 / 0.7 / 2)
    assert s["request_throughput"] == pytest.approx(3 / 0.7)
    assert s["ttft_ms_mean"] == pytest.approx((100 + 200 + 50) / 3)
    assert s["ttft_ms_p50"] == pytest.approx(100)
    assert s["tpot_ms_mean"] == pytest.approx(75)  # 1-token output excluded
    assert s["tpot_ms_p99"] == pytest.approx(50 + 0.99 * 50)
    assert s["itl_ms_mean"] == pytest.approx((4 * 100 + 2 * 200) / 6)
    assert s["itl_ms_p50"] == pytest.approx(100)
    assert s["e2e_ms_p50"] == pytest.approx(500)
    assert s["interactivity"] == pytest.approx(1000 / 75)
    assert s["tokens_per_chunk"] == pytest.approx(15 / 9)
    # good: only the 1-token request (r0 TPOT 100 > 90, r1 TTFT 200 > 150, r3 failed)
    assert s["good_fraction"] == pytest.approx(1 / 4)
    assert s["goodput_rps"] == pytest.approx(1 / 0.7)
    assert s["meets_slo"] is False  # TTFT p99 198 ms > 150
    assert json.loads(s["errors_by_kind"]) == {"http_5xx": 1}
    assert s["gpus"] == 2 and s["emulated"] is True and s["concurrency"] == 4


def test_meets_slo_and_error_rate_gate():
    loose = Slo(ttft_p99_ms=250, tpot_p50_ms=80)
    assert summarize(point(), gpus=1, slo=loose, emulated=False)["meets_slo"] is True
    assert summarize(point(), gpus=1, slo=loose, emulated=False, max_error_rate=0.1)["meets_slo"] is False
    assert summarize(point(), gpus=1, slo=Slo(tpot_p50_ms=70), emulated=False)["meets_slo"] is False


def test_mean_interactivity_statistic():
    s = summarize(point(), gpus=1, slo=Slo(interactivity_stat="mean"), emulated=False)
    assert s["interactivity"] == pytest.approx(1000 / 75)


def test_all_failed_point_has_no_latency_and_never_meets_slo():
    recs = [rec(i, 0.1 * i, elapsed=1.0, error_kind="timeout") for i in range(3)]
    s = summarize(recs, gpus=8, slo=Slo(), emulated=False)
    assert s["completed"] == 0 and s["error_rate"] == 1.0
    assert math.isnan(s["ttft_ms_p50"]) and math.isnan(s["interactivity"])
    assert s["meets_slo"] is False and s["good_fraction"] == 0.0


def test_client_count_fallback_is_reported():
    r = point()[:2]
    r[1].tokens_source = "client"
    r[0].token_mismatch = True
    s = summarize(r, gpus=1, emulated=False)
    assert (s["usage_missing"], s["token_mismatches"]) == (1, 1)


def test_counting_method_is_recorded_per_point():
    r = point()[:3]
    assert summarize(r, gpus=1, emulated=False)["token_count_method"] == "usage"
    r[1].tokens_source, r[1].client_count_method = "client", "words"
    r[2].tokens_source, r[2].client_count_method = "client", "chunks"
    assert summarize(r, gpus=1, emulated=False)["token_count_method"] == "client-chunks+client-words+usage"


def test_bad_gpu_count_names_the_field():
    with pytest.raises(ValueError, match="gpus"):
        summarize(point(), gpus=0, emulated=False)


def test_same_summary_from_records_and_from_the_parquet_table(tmp_path):
    import pandas as pd

    from bakeoff.bench.run import records_frame

    recs = point()
    records_frame(recs).to_parquet(tmp_path / "r.parquet")
    back = pd.read_parquet(tmp_path / "r.parquet")
    a = summarize(recs, gpus=2, slo=Slo(ttft_p99_ms=150, tpot_p99_ms=90), emulated=True)
    b = summarize(back, gpus=2, slo=Slo(ttft_p99_ms=150, tpot_p99_ms=90), emulated=True)
    for k, v in a.items():
        assert (v == b[k]) or (isinstance(v, float) and math.isnan(v) and math.isnan(b[k])), k


def test_all_failed_point_round_trips_with_typed_columns(tmp_path):
    import pandas as pd

    from bakeoff.bench.run import records_frame

    bad = [rec(i, 0.1 * i, elapsed=1.0, error_kind="timeout") for i in range(2)]
    records_frame(bad).to_parquet(tmp_path / "a.parquet")
    records_frame(point()).to_parquet(tmp_path / "b.parquet")
    both = pd.read_parquet(tmp_path)  # one dataset: the all-null columns kept their types
    assert len(both) == 7 and both["ttft"].dtype == "float64" and both["error_kind"].isna().sum() == 4


def test_requested_and_measured_input_lengths():
    """Means over succeeded requests; the error only over requests with usage, and only for prompts
    bakeoff wrote (a user's file states no length in tokens)."""
    prompts = {"prompt_seed": 7, "prompt_sizing": "tokenize", "input_len_tolerance": 0.02}
    s = summarize(point(), gpus=1, emulated=False, prompts={**prompts, "sized": True})
    assert s["input_len_requested_mean"] == 30 and s["input_len_measured_mean"] == 15
    assert s["input_len_error"] == pytest.approx(30 / 60 - 1)  # (10 + 20) / (30 + 30) - 1
    assert (s["prompt_seed"], s["prompt_sizing"], s["input_len_tolerance"]) == (7, "tokenize", 0.02)
    user = summarize(point(), gpus=1, emulated=False, prompts={**prompts, "sized": False})
    assert math.isnan(user["input_len_error"]) and user["input_len_measured_mean"] == 15
