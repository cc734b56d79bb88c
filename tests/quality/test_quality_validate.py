"""GX suites and compliance: clean data passes, each planted defect is caught by name."""

from __future__ import annotations

import json

import pytest
from quality_fixtures import make_plan, summarise, write_run

from bakeoff.quality.validate import ValidationFailed, raise_if_failed, validate_run

# slow (make test runs it, make test-unit leaves it out): each test validates a whole stored run
# with Great Expectations, 10-47 s a test on the 2-core machine
pytestmark = pytest.mark.slow

NO_GATE = {"accuracy": {"enabled": False}}


def failures(summary, slug="mi355x-vllm"):
    return "\n".join(summary["targets"][slug]["failures"])


def run_with(tmp_path, plan=None, **kw):
    plan = plan or make_plan(**NO_GATE)
    write_run(tmp_path, plan, **kw)
    return validate_run(plan, tmp_path)


def only(slug, c, r, fn):
    """A mutate hook that plants fn's defect into one point and leaves the rest clean."""

    def mutate(t, cc, rr, req):
        if (t, cc, rr) == (slug, c, r):
            return fn(req)
        return req, None

    return mutate


def test_clean_run_passes_and_writes_summary_and_gx_results(tmp_path):
    s = run_with(tmp_path)
    assert s["passed"], s
    stored = json.loads((tmp_path / "validation.json").read_text())
    assert stored["passed"] and set(stored["targets"]) == {"mi355x-vllm", "b200-vllm"}
    for t in stored["targets"].values():
        assert set(t["suites"]) == {"requests", "compliance", "points", "pacing", "coverage", "repeats"}
        assert t["pacing"]["client_bound"] == 0 and t["pacing"]["points"] > 0 and not t["warnings"]
        raw = json.loads((tmp_path / t["suites"]["requests"]["result_file"]).read_text())
        assert raw["success"] and len(raw["results"]) == t["suites"]["requests"]["expectations"] > 5
    assert stored["pacing"]["client_bound_share"] == 0.0
    raise_if_failed(s)  # does not raise


def test_negative_latency_is_caught(tmp_path):
    def plant(req):
        req.loc[3, "ttft"] = -0.004
        return req, None

    s = run_with(tmp_path, mutate=only("mi355x-vllm", 2, 1, plant))
    assert not s["passed"] and s["targets"]["b200-vllm"]["passed"]
    text = failures(s)
    assert "expect_column_values_to_be_between(column=ttft)" in text
    assert "request=w c=2 r=1 #3" in text and "-0.004" in text


def test_infinite_latency_and_ttft_after_e2e_are_caught(tmp_path):
    def plant(req):
        point = summarise(req)  # the point's statistics stay finite; only the rows are bad
        req.loc[0, "e2e"] = float("inf")
        req.loc[1, "ttft"] = req.loc[1, "e2e"] + 0.5
        return req, point

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 1, 0, plant)))
    assert "non-negative and finite" in text and "column=e2e" in text
    assert "TTFT <= E2E" in text


def test_missing_point_is_caught(tmp_path):
    s = run_with(tmp_path, skip={("b200-vllm", 2, 1)})
    assert s["targets"]["mi355x-vllm"]["passed"] and not s["passed"]
    text = failures(s, "b200-vllm")
    assert "every planned workload x concurrency x repeat is present" in text and "point=w c=2" in text


def test_target_without_results_fails_as_no_results(tmp_path):
    plan = make_plan(**NO_GATE)
    s = run_with(tmp_path, plan, skip={("b200-vllm", c, r) for c in (1, 2) for r in (0, 1)})
    assert s["targets"]["b200-vllm"]["failures"][0].startswith("no results")
    with pytest.raises(ValidationFailed) as e:
        raise_if_failed(s)
    assert "b200-vllm" in str(e.value) and "no results" in str(e.value) and "mi355x-vllm:" not in str(e.value)


def test_error_burst_fails_error_rate(tmp_path):
    def plant(req):
        req.loc[2:4, "error_kind"] = "http_5xx"
        req.loc[2:4, ["ttft", "e2e", "output_tokens"]] = None
        return req, summarise(req)

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 2, 0, plant)))
    assert "column=error_rate" in text and "point=w c=2 r=0" in text
    assert "ttft" not in text  # failed requests are not latency defects


def test_unordered_percentiles_are_caught(tmp_path):
    def plant(req):
        point = summarise(req)
        point["tpot_ms_p90"] = point["tpot_ms_p99"] + 5
        return req, point

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 1, 1, plant)))
    assert "tpot percentiles ordered: p90 <= p99" in text and "column_A=tpot_ms_p99" in text


def test_a_p95_out_of_order_is_caught(tmp_path):
    def plant(req):
        point = summarise(req)
        point["e2e_ms_p95"] = point["e2e_ms_p99"] + 5  # p95 is an SLO's bound now: held in order too
        return req, point

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 1, 1, plant)))
    assert "e2e percentiles ordered: p95 <= p99" in text and "column_B=e2e_ms_p95" in text


def test_inconsistent_repeats_fail_cv(tmp_path):
    def plant(req):
        point = summarise(req)
        point["output_tps"] *= 3
        return req, point

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 1, 1, plant)))
    assert "CV of output_tps" in text and "point=w c=1" in text


def test_zero_throughput_and_too_few_completed(tmp_path):
    plan = make_plan(min_completed_per_point=9, **NO_GATE)

    def plant(req):
        point = summarise(req)
        point["output_tps"] = 0.0
        return req, point

    text = failures(run_with(tmp_path, plan, mutate=only("mi355x-vllm", 1, 0, plant)))
    assert "output throughput > 0" in text and "at least 9 completed requests per point" in text


def test_output_length_outside_tolerance_when_eos_ignored(tmp_path):
    def plant(req):
        req.loc[5, "output_tokens"] = 12  # 25% short of 16
        req.loc[5, "finish_reason"] = "stop"
        return req, None

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 1, 0, plant)))
    assert "within +-10% of the requested length" in text
    assert "early stop" in text  # compliance sees the same request


def test_compliance_catches_dropped_usage(tmp_path):
    def plant(req):
        req["tokens_source"] = "client"
        return req, None

    s = run_with(tmp_path, mutate=only("b200-vllm", 2, 0, plant))
    text = failures(s, "b200-vllm")
    assert "usage present" in text and "column=tokens_source" in text
    assert not s["targets"]["b200-vllm"]["suites"]["compliance"]["passed"]
    assert s["targets"]["b200-vllm"]["suites"]["requests"]["passed"]


def test_compliance_catches_early_stop_within_tolerance(tmp_path):
    """15 of 16 tokens passes the +-10% length check but not 'exactly max_tokens'."""

    def plant(req):
        req.loc[0, "output_tokens"] = 15
        req.loc[0, "finish_reason"] = "stop"
        return req, None

    s = run_with(tmp_path, mutate=only("mi355x-vllm", 1, 0, plant))
    t = s["targets"]["mi355x-vllm"]
    assert t["suites"]["requests"]["passed"] and not t["suites"]["compliance"]["passed"]
    assert "exactly max_tokens tokens when EOS is ignored" in failures(s)


def test_compliance_catches_length_finish_with_wrong_count_and_no_text(tmp_path):
    def plant(req):
        req["ignore_eos"] = False
        req.loc[0, "output_tokens"] = 9  # said 'length' but stopped at 9 of 16
        req.at[1, "chunk_offsets"] = []  # 'succeeded' without streaming any text
        return req, None

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 1, 0, plant)))
    assert "finish_reason 'length' means exactly max_tokens" in text
    assert "first chunk carries text" in text


def test_invalid_finish_reason(tmp_path):
    def plant(req):
        req.loc[0, "finish_reason"] = "abort"
        return req, None

    assert "column=finish_reason" in failures(run_with(tmp_path, mutate=only("mi355x-vllm", 2, 1, plant)))


def test_thresholds_come_from_the_plan(tmp_path):
    def plant(req):
        req.loc[2, "error_kind"] = "http_5xx"
        req.loc[2, ["ttft", "e2e", "output_tokens"]] = None
        return req, summarise(req)

    mutate = only("mi355x-vllm", 2, 0, plant)
    assert "column=error_rate" in failures(run_with(tmp_path / "strict", mutate=mutate))
    lenient = make_plan(max_error_rate=0.2, **NO_GATE)
    assert run_with(tmp_path / "lenient", lenient, mutate=mutate)["passed"]


def test_validation_is_quiet_and_repeatable(tmp_path, capfd):
    plan = make_plan(**NO_GATE)
    write_run(tmp_path, plan)
    first = validate_run(plan, tmp_path)
    out, err = capfd.readouterr()
    assert "Calculating Metrics" not in out + err and "%|" not in err
    assert validate_run(plan, tmp_path)["targets"] == first["targets"]


def test_table_missing_contract_columns_is_a_readable_failure(tmp_path):
    s = run_with(tmp_path, mutate=lambda t, c, r, req: (req.drop(columns=["tokens_source", "finish_reason"]), None))
    (msg,) = s["targets"]["b200-vllm"]["failures"]
    assert msg.startswith("unreadable results") and "['finish_reason', 'tokens_source']" in msg


def test_null_usage_source_and_finish_reason_are_not_silently_accepted(tmp_path):
    """One target's files lack the columns, so the run-wide table holds nulls there."""
    s = run_with(
        tmp_path,
        mutate=lambda t, c, r, req: (
            req.drop(columns=["tokens_source", "finish_reason"]) if t == "b200-vllm" else req,
            None,
        ),
    )
    text = failures(s, "b200-vllm")
    assert "expect_column_values_to_not_be_null(column=tokens_source)" in text
    assert "expect_column_values_to_not_be_null(column=finish_reason)" in text
    assert s["targets"]["mi355x-vllm"]["passed"]


def test_chunk_timeline_defects(tmp_path):
    def plant(req):
        req.at[0, "chunk_offsets"] = [0.05, 0.07, 0.06] + [0.08] * 13  # a chunk from the past
        req.at[1, "ttft"] = req.at[1, "chunk_offsets"][0] - 0.02  # TTFT before any text arrived
        req.at[2, "e2e"] = req.at[2, "chunk_offsets"][-1] - 0.01  # last chunk after the end
        return req, None

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 1, 0, plant)))
    assert "ITL >= 0" in text and "request=w c=1 r=0 #0" in text
    assert "TTFT is the first text chunk's arrival" in text
    assert "the last chunk arrives no later than E2E" in text


def test_prompt_length_off_the_request_fails_the_point(tmp_path):
    """The issue's case: "ISL 128" measured 350 by the server's usage; a point within tolerance passes."""

    def plant(req):
        point = summarise(req)
        point.update(input_len_requested_mean=128.0, input_len_measured_mean=350.3, input_len_error=350.3 / 128 - 1)
        return req, point

    def near(req):
        point = summarise(req)
        point["input_len_error"] = 0.015  # inside the default 2%
        return req, point

    s = run_with(
        tmp_path,
        mutate=lambda t, c, r, req: (
            plant(req) if (t, c, r) == ("mi355x-vllm", 1, 0) else near(req) if t == "b200-vllm" else (req, None)
        ),
    )
    assert s["targets"]["b200-vllm"]["passed"], failures(s, "b200-vllm")
    text = failures(s)
    assert "column=input_len_error" in text and "within +-2% of the requested length" in text
    assert "point=w c=1 r=0" in text


def test_server_figures_out_of_range_are_caught(tmp_path):
    def plant(req):
        point = summarise(req)
        point["prefix_cache_hit_rate"], point["spec_acceptance_length"] = 1.5, 0.5
        return req, point

    text = failures(run_with(tmp_path, mutate=only("mi355x-vllm", 1, 1, plant)))
    assert "prefix_cache_hit_rate is a share in [0, 1]" in text
    assert "at least one token per verification step" in text


def test_gx_sees_only_the_columns_its_suite_reads():
    """GX filters rows with DataFrame.query over every column of the frame it gets: each check hands it
    the columns its expectations and row conditions read, the row label, and nothing else."""
    import great_expectations.expectations as gxe
    import pandas as pd
    from great_expectations.expectations.row_conditions import Column

    from bakeoff.quality import gx

    gx.GxSession()  # a suite needs an active context
    frame = pd.DataFrame({"request": ["a", "b"], "ok": [True, False], "ttft": [0.1, -1.0], "e2e": [1, 2], "x": [0, 0]})
    by_column = gx.make_suite(
        "s",
        [gxe.ExpectColumnValuesToBeBetween(column="ttft", min_value=0, row_condition=Column("ok") == True)],  # noqa: E712
    )
    check = gx.Check("c", frame, by_column, "request")
    assert list(gx.narrowed(check).columns) == ["request", "ok", "ttft"]
    assert gx.GxSession().validate(check)["success"]  # the failing row is not ok: filtered out as before
    table_level = gx.make_suite("t", [gxe.ExpectTableRowCountToBeBetween(min_value=1)])
    assert gx.narrowed(gx.Check("t", frame, table_level, "request")) is frame  # a table check sees it whole


def _client_bound_at(slug, c, r):
    def plant(req):
        point = summarise(req)
        point["client_bound"] = True  # the loop monitor's verdict for this repeat
        return req, point

    return only(slug, c, r, plant)


def test_client_bound_points_warn_by_default_and_the_share_is_reported(tmp_path):
    s = run_with(tmp_path, mutate=_client_bound_at("mi355x-vllm", 2, 1))
    assert s["passed"], s  # quality.client_bound: warn
    t = s["targets"]["mi355x-vllm"]
    assert not t["failures"] and len(t["warnings"]) == 1
    assert "[pacing] the server, not the client, set the pace" in t["warnings"][0]
    assert "point=w c=2 r=1" in t["warnings"][0] and "client_fleet" in t["warnings"][0]
    n = t["pacing"]["points"]
    assert t["pacing"]["client_bound"] == 1 and s["pacing"]["client_bound"] == 1
    assert s["pacing"]["client_bound_share"] == pytest.approx(
        1 / (n + s["targets"]["b200-vllm"]["pacing"]["points"]), abs=1e-4
    )
    assert s["thresholds"]["client_bound"] == "warn"


def test_client_bound_points_fail_the_target_when_the_plan_says_fail(tmp_path):
    plan = make_plan(client_bound="fail", **NO_GATE)
    s = run_with(tmp_path, plan=plan, mutate=_client_bound_at("mi355x-vllm", 2, 1))
    assert not s["passed"] and s["targets"]["b200-vllm"]["passed"]
    assert "[pacing]" in failures(s) and "quality.client_bound: fail" in failures(s)
