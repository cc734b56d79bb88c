"""Scoring the twin on rows it never saw: a fixed random hold-out, leave-one-accelerator-out, and
whether it ranks the GPUs right per model x scenario.

Every score fits on the training rows only (``fit.fit(train)``) and predicts the held-out ones;
the split functions return row indices, so a test can check that no held-out row reaches a fit.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bakeoff.twin import fit as twin_fit
from bakeoff.twin.calibration import Row

HOLDOUT_SHARE = 0.2
HOLDOUT_SEED = 2026
LOAO_GPUS = ("mi355x", "b300", "gb300")


def holdout_split(n: int, share: float = HOLDOUT_SHARE, seed: int = HOLDOUT_SEED) -> tuple[list[int], list[int]]:
    """(train, test) indices: a fixed random share held out."""
    order = np.random.default_rng(seed).permutation(n)
    k = max(1, round(n * share))
    return sorted(int(i) for i in order[k:]), sorted(int(i) for i in order[:k])


def gpu_split(rows: Sequence[Row], gpu: str) -> tuple[list[int], list[int]]:
    """(train, test) indices: every row of ``gpu`` held out."""
    test = [i for i, r in enumerate(rows) if r.gpu == gpu]
    return [i for i, r in enumerate(rows) if r.gpu != gpu], test


@dataclass(frozen=True)
class Scored:
    row: Row
    predicted: float  # tokens/s per GPU
    seen_configuration: bool = True  # the fit that predicted it had a row of its GPU x engine x precision
    band_log: float | None = None  # the band its prediction is printed with (its kind's), where known

    @property
    def ape(self) -> float:
        return abs(self.predicted - self.row.per_gpu) / self.row.per_gpu * 100


def held_out(rows: Sequence[Row], train: list[int], test: list[int]) -> tuple[twin_fit.Fit, list[Scored]]:
    f = twin_fit.fit([rows[i] for i in train], band=False)
    seen = f.seen["configuration"]
    return f, [Scored(rows[i], f.predict(rows[i]), twin_fit.configuration(rows[i]) in seen) for i in test]


def table(scored: Sequence[Scored], by: str) -> list[dict[str, Any]]:
    """Median and worst APE grouped by a row attribute (gpu, model, scenario)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for s in scored:
        groups[str(getattr(s.row, by))].append(s.ape)
    return [
        {by: k, "rows": len(v), "median_ape": float(np.median(v)), "max_ape": float(max(v))}
        for k, v in sorted(groups.items())
    ]


def summary(scored: Sequence[Scored]) -> dict[str, float]:
    apes = [s.ape for s in scored]
    return {"rows": len(apes), "median_ape": float(np.median(apes)), "max_ape": float(max(apes))}


def out_of_fold(rows: Sequence[Row], k: int = twin_fit.FOLDS, seed: int = HOLDOUT_SEED) -> list[Scored]:
    """Every row predicted by a fit on the other folds (k fixed random folds)."""
    out: list[Scored] = []
    for idx in twin_fit.folds(len(rows), k, seed):
        test = sorted(int(i) for i in idx)
        train = [i for i in range(len(rows)) if i not in set(test)]
        out += held_out(rows, train, test)[1]
    return out


def leave_each_gpu_out(rows: Sequence[Row]) -> list[Scored]:
    """Every row predicted by a fit that saw no row of its GPU."""
    out: list[Scored] = []
    for gpu in sorted({r.gpu for r in rows}):
        out += held_out(rows, *gpu_split(rows, gpu))[1]
    return out


def cell(r: Row) -> tuple[str, str, str, str]:
    """The finest term a row's efficiency has (GPU x engine x precision x scenario)."""
    return (r.gpu, r.engine, r.precision, r.scenario)


def cell_rows(rows: Sequence[Row], gpu: str, engine: str, precision: str, scenario: str) -> int:
    """Rows of ``rows`` in one cell: under two, a prediction there has no basis to separate on."""
    return sum(cell(r) == (gpu, engine, precision, scenario) for r in rows)


def ranking(
    scored: Sequence[Scored], band_log: float = 0.0, config_band_log: float | None = None
) -> list[dict[str, Any]]:
    """Per model x scenario with two or more GPUs: each GPU's best published row (its best configuration),
    ordered by published tokens/s per GPU and by the twin's prediction for that row (``scored`` holds
    predictions from fits that did not see the row: out-of-fold or leave-the-GPU-out, never the fit's own);
    ``right`` when every pair is in the same order. A pair whose *published* gap is inside the band
    (|log ratio| < ``band_log``) is ``tied``: the twin's error cannot separate those two GPUs, so
    ``right_where_separable`` ignores a wrong order there. ``claimed_pairs`` are the pairs the twin itself
    orders, as ``bakeoff predict`` does: their predicted intervals (each row's band: ``band_log``, or
    ``config_band_log`` where its fit had no row of its configuration) do not overlap, and neither side is the
    only row of its cell (``cell``) among ``scored`` (``no_basis_pairs``: no basis to separate)."""
    best: dict[tuple[str, str], dict[str, tuple[float, float]]] = defaultdict(dict)
    best_row: dict[tuple[str, str], dict[str, Scored]] = defaultdict(dict)
    for s in scored:  # each GPU's best published row, and the prediction for that row
        key = (s.row.model, s.row.scenario)
        if s.row.per_gpu > best[key].get(s.row.gpu, (0.0, 0.0))[0]:
            best[key][s.row.gpu] = (s.row.per_gpu, s.predicted)
            best_row[key][s.row.gpu] = s
    cells = Counter(cell(s.row) for s in scored)
    out = []
    for (model, scenario), gpus in sorted(best.items()):
        if len(gpus) < 2:
            continue
        pairs = list(itertools.combinations(sorted(gpus), 2))
        wrong = [(a, b) for a, b in pairs if (gpus[a][0] - gpus[b][0]) * (gpus[a][1] - gpus[b][1]) < 0]
        tied = [(a, b) for a, b in pairs if abs(math.log(gpus[a][0] / gpus[b][0])) < band_log]
        rows_of = best_row[(model, scenario)]
        bands = {  # each best row's band, as predict gives it: its kind's, else wider where its fit had no row of
            # its configuration
            g: own
            if (own := rows_of[g].band_log) is not None
            else band_log
            if config_band_log is None or rows_of[g].seen_configuration
            else max(band_log, config_band_log)
            for g in gpus
        }
        # a side that is the only row of its cell (GPU x engine x precision x scenario) in the set has no
        # basis to separate on: nothing else tells its own efficiency from an outlier, so the twin declines
        alone = {g for g in gpus if cells[cell(rows_of[g].row)] < 2}
        within = [(a, b) for a, b in pairs if abs(math.log(gpus[a][1] / gpus[b][1])) >= bands[a] + bands[b]]
        claimed = [(a, b) for a, b in within if not {a, b} & alone]
        out.append(
            {
                "model": model,
                "scenario": scenario,
                "measured": sorted(gpus, key=lambda g: -gpus[g][0]),
                "predicted": sorted(gpus, key=lambda g: -gpus[g][1]),
                "pairs": len(pairs),
                "wrong_pairs": wrong,
                "tied_pairs": tied,
                "claimed_pairs": claimed,
                "no_basis_pairs": [(a, b) for a, b in within if {a, b} & alone],  # intervals apart, a side alone
                # each wrong pair: published and predicted gap (first GPU over second, %), the two best rows
                "wrong_detail": [
                    {
                        "pair": (a, b),
                        "published_gap_pct": 100 * (gpus[a][0] / gpus[b][0] - 1),
                        "predicted_gap_pct": 100 * (gpus[a][1] / gpus[b][1] - 1),
                        "tied": (a, b) in tied,
                        "rows": (rows_of[a].row, rows_of[b].row),
                    }
                    for a, b in wrong
                ],
                "right": not wrong,
                "right_where_separable": not set(wrong) - set(tied),
                "separable": len(tied) < len(pairs),
            }
        )
    return out


def agreement(rk: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Counts behind the ranking goal, strictly and excluding pairs the band cannot separate."""
    separable = [r for r in rk if r["separable"]]
    return {
        "cells": len(rk),
        "right": sum(r["right"] for r in rk),
        "separable_cells": len(separable),
        "right_where_separable": sum(r["right_where_separable"] for r in separable),
        "pairs": sum(r["pairs"] for r in rk),
        "wrong_pairs": sum(len(r["wrong_pairs"]) for r in rk),
        "separable_pairs": sum(r["pairs"] - len(r["tied_pairs"]) for r in rk),
        "wrong_separable_pairs": sum(len(set(r["wrong_pairs"]) - set(r["tied_pairs"])) for r in rk),
        # the twin's own claims: pairs whose predicted intervals do not overlap, and cells with a wrong one
        "claimed_pairs": sum(len(r["claimed_pairs"]) for r in rk),
        "wrong_claimed_pairs": sum(len(set(r["wrong_pairs"]) & set(r["claimed_pairs"])) for r in rk),
        "cells_right_where_claimed": sum(not set(r["wrong_pairs"]) & set(r["claimed_pairs"]) for r in rk),
    }


def configuration_rows(rows: Sequence[Row], r: Row) -> int:
    """Rows in the set with ``r``'s configuration (GPU, model, engine, precision, any scenario or scale):
    how much the fit can learn about it beyond the coarse terms when ``r`` is held out (this many less one)."""
    return sum((x.gpu, x.model, x.engine, x.precision) == (r.gpu, r.model, r.engine, r.precision) for x in rows)
