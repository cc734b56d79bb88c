"""Honest hold-outs: identical setups merged before any split, each scheme's held-out groups kept out of
its fit, each band measured on its own kind of extrapolation, and coverage counted against it."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest

from bakeoff.twin import calibration, holdout
from bakeoff.twin import fit as twin_fit


def test_identical_setups_are_merged_into_one_row_with_the_geometric_mean_and_every_submitter():
    raw = calibration.rows()
    merged = holdout.setups()
    assert len(merged) == len({holdout.setup_key(r) for r in raw}) < len(raw)
    assert len({holdout.setup_key(r) for r in merged}) == len(merged)
    # the setup most often resubmitted: one row, its figure the geometric mean of its copies
    key, n = Counter(holdout.setup_key(r) for r in raw).most_common(1)[0]
    copies = [r for r in raw if holdout.setup_key(r) == key]
    (one,) = [r for r in merged if holdout.setup_key(r) == key]
    assert n > 1 and one.tokens_s == pytest.approx(math.exp(sum(math.log(c.tokens_s) for c in copies) / n))
    assert set(one.organization.split("+")) == {c.organization for c in copies}


# slow: refits the twin once per hold-out scheme (39 s)
@pytest.mark.slow
def test_every_scheme_keeps_its_held_out_group_out_of_the_fit():
    rows = holdout.setups()
    scored = holdout.held_out(rows, "leave-one-submitter-out")
    nvidia = [h for h in scored if h.group == "NVIDIA"]
    # every setup NVIDIA sent is held out, also those an OEM resubmitted (no identical twin left in training)
    assert {h.row.row for h in nvidia} == {r.row for r in rows if "NVIDIA" in r.organization.split("+")}
    for h in holdout.held_out(rows, "leave-one-accelerator-out"):
        assert h.kind == holdout.NEW_GPU and h.group == h.row.gpu
    loso = holdout.held_out(rows, "leave-one-setup-out")
    assert len(loso) == len(rows)
    # a held-out setup ten times larger moves only its own prediction's error, never its prediction
    bent = list(rows)
    bent[0] = dataclasses.replace(rows[0], tokens_s=rows[0].tokens_s * 10)
    before = {h.row.row: h for h in loso}
    after = {h.row.row: h for h in holdout.held_out(bent, "leave-one-setup-out")}
    first = rows[0].row
    assert after[first].predicted == pytest.approx(before[first].predicted)
    assert after[first].log_error != pytest.approx(before[first].log_error)
    # ... while other setups, whose fits trained on it, move (the check can fail)
    assert any(after[k].predicted != pytest.approx(before[k].predicted) for k in before if k != first)


def test_a_model_with_no_calibrated_kind_is_not_scored_and_others_are_read_through_their_nearest_kind():
    scored = holdout.held_out(holdout.setups(), "leave-one-model-out")
    assert {h.row.model for h in scored} == {"llama-2-70b", "llama-3.1-8b"}  # dense GQA: each other's kind
    assert {h.kind for h in scored} == {holdout.NEW_KIND}


def test_the_kind_of_a_prediction_follows_what_its_fit_saw():
    seen = {
        "model": frozenset({"llama-2-70b", "deepseek-r1"}),
        "configuration": frozenset({"b200:trtllm:fp4"}),
        "setup": frozenset({"b200:trtllm:fp4:llama-2-70b"}),
        "gpu_scenario": frozenset({"b200:Server", "mi355x:Server"}),
    }
    assert holdout.kind_of("b200", "llama-2-70b", "trtllm", "fp4", "Server", seen) == holdout.SAME_SETUP
    assert holdout.kind_of("b200", "deepseek-r1", "trtllm", "fp4", "Server", seen) == holdout.NEW_MODEL
    # its GPU ran, but not on this engine x precision: coarser terms stand in beside the GPU's own
    assert holdout.kind_of("b200", "deepseek-r1", "vllm", "fp4", "Server", seen) == holdout.NEW_CONFIG
    assert holdout.kind_of("mi355x", "llama-2-70b", "vllm", "fp8", "Server", seen) == holdout.NEW_CONFIG
    # a GPU the fit has no row of at all: a different extrapolation, measured apart
    assert holdout.kind_of("gb300", "llama-2-70b", "trtllm", "fp4", "Server", seen) == holdout.NEW_GPU
    assert holdout.kind_of("b200", "glm-5.2", "trtllm", "fp4", "Server", seen) == holdout.NEW_KIND
    # a scenario the GPU never ran: its efficiency there is borrowed from other GPUs, so the wider band
    assert holdout.kind_of("b200", "llama-2-70b", "trtllm", "fp4", "Interactive", seen) == holdout.NEW_CONFIG


def test_bands_are_quantiles_of_their_kind_and_coverage_counts_rows_inside_them():
    scored = list(holdout.all_held_out())
    bands = holdout.bands()
    assert set(bands) == set(holdout.KINDS)
    # wider the further the extrapolation reaches
    assert bands[holdout.SAME_SETUP].band_log < bands[holdout.NEW_GPU].band_log < bands[holdout.NEW_KIND].band_log
    cov = holdout.coverage(scored, bands)
    for kind, (inside, n) in cov.items():
        errs = sorted(h.log_error for h in scored if h.kind == kind)
        assert n == len(errs) == bands[kind].rows
        assert inside == sum(e <= bands[kind].band_log for e in errs)
        assert abs(inside / n - twin_fit.BAND_Q) < 0.05  # a quantile of the same errors: near nominal
    # a band too narrow for its rows covers fewer of them (the count can fail)
    narrow = {k: dataclasses.replace(b, band_log=b.band_log / 4) for k, b in bands.items()}
    assert all(holdout.coverage(scored, narrow)[k][0] < cov[k][0] for k in cov)
    # cross coverage: a scheme's rows against bands from the other schemes only
    cross = holdout.cross_coverage(scored)
    assert set(cross) == set(holdout.SCHEMES)
    assert holdout.NEW_KIND not in cross["leave-one-model-out"]  # no other scheme measures that kind

    # a band the other schemes measured on too few rows is no band to judge a scheme against
    def band_rows(scheme, kind):
        return holdout.kind_bands(h for h in scored if h.scheme != scheme)[kind].rows

    judged = holdout.cross_coverage(scored, min_band_rows=10)
    for scheme, by in cross.items():
        assert set(judged[scheme]) == {k for k in by if band_rows(scheme, k) >= 10}
    assert holdout.NEW_CONFIG in cross["leave-one-submitter-out"]
    assert holdout.NEW_CONFIG not in judged["leave-one-submitter-out"]  # one other held-out row: no band
