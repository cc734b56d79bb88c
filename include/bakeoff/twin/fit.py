"""The fitted part of the twin: how far each GPU x engine x precision (and model, scenario) falls short of
the roofline, learned from published rows only.

log(published tokens/s per GPU) = log(roofline tokens/s per GPU at the scenario's operating point)
                                 + intercept + sum of the row's fitted terms

Terms are one-hot groups (TERMS), fitted by ridge regression: a group seen in few rows stays near
zero, and a key never seen in training (a GPU left out, an engine no row used) contributes exactly
zero, so the prediction falls back to the coarser terms (vendor, engine, precision) that were seen.
efficiency(row) = exp(intercept + terms) is the fraction of the roofline the row reaches.

Only the rows passed to ``fit`` reach the parameters: nothing here reads the calibration file.
The error band comes from the training rows alone (k-fold inside them): ``Fit.band_log`` is the 80th
percentile of |log error| of out-of-fold predictions, ``Fit.margin_log`` the 90th.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from bakeoff.twin import calibration, operating

# (attributes that make a key, ridge penalty). Coarse groups are cheap to use, fine ones must earn it.
TERMS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("model",), 0.1),
    (("scenario",), 0.1),
    (("model", "scenario"), 0.3),
    (("vendor",), 1.0),
    (("engine",), 1.0),
    (("precision",), 1.0),
    (("multinode",), 1.0),
    (("vendor", "model"), 1.0),
    (("gpu",), 1.0),
    (("gpu", "engine", "precision"), 1.0),
    (("gpu", "model"), 2.0),
    (("gpu", "scenario"), 2.0),  # no (vendor, scenario): it lent GB200/GB300's Interactive (~5x) to other GPUs
    (("model", "precision"), 1.0),  # a model's FP4 and FP8 kernels differ in maturity
    (("vendor", "precision"), 1.0),  # MXFP4 on AMD and NVFP4 on NVIDIA reach different shares of their peak
)
FOLDS = 5
BAND_Q, MARGIN_Q = 0.8, 0.9


class Keyed(Protocol):
    """A calibration row or a query: what the fit keys on (frozen, so hashable)."""

    def __hash__(self) -> int: ...
    @property
    def gpu(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def scenario(self) -> str: ...
    @property
    def vendor(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def quantization(self) -> str: ...
    @property
    def multinode(self) -> str: ...


@lru_cache(maxsize=65536)
def keys(r: Keyed) -> tuple[str, ...]:
    """The row's key in every term group (rows and queries are frozen, so this is cached)."""
    return tuple(":".join((*names, *(str(getattr(r, n)) for n in names))) for names, _ in TERMS)


@lru_cache(maxsize=65536)
def ideal_per_gpu(r: Keyed) -> float:
    """The roofline's tokens/s per GPU for a row's configuration at its scenario's operating point (a run
    row carries its own, prediction.runs)."""
    own = getattr(r, "roofline_tokens_s_per_gpu", None)
    if own is not None:
        return float(own)
    i, o = calibration.lengths(r.model)
    return operating.ideal(
        r.gpu, r.model, r.quantization, i, o, calibration.tpot_limit_s(r.model, r.scenario)
    ).tokens_s_per_gpu


def configuration(r: Keyed) -> str:
    """'b200:trtllm:fp4': the GPU x engine x precision a row or query runs (what the band widens for when
    no calibration row ran it)."""
    return f"{r.gpu}:{r.engine}:{r.precision}"


def _penalties() -> dict[str, float]:
    return {":".join(names): lam for names, lam in TERMS}


@dataclass(frozen=True)
class Fit:
    intercept: float
    coef: dict[str, float]
    band_log: float = 0.0
    margin_log: float = 0.0
    trained_on: tuple[int | str, ...] = ()  # source row numbers (run rows: their provenance) of the training rows
    seen: dict[str, frozenset[str]] = field(default_factory=dict)  # attribute -> values seen in training

    def log_efficiency(self, r: Keyed) -> float:
        return self.intercept + sum(self.coef.get(k, 0.0) for k in keys(r))

    def efficiency(self, r: Keyed) -> float:
        return math.exp(self.log_efficiency(r))

    def predict(self, r: Keyed) -> float:
        """Predicted tokens/s per GPU."""
        return ideal_per_gpu(r) * self.efficiency(r)

    def parameters(self) -> dict[str, Any]:
        return {"intercept": self.intercept, **self.coef}


def _solve(train: Sequence[Any]) -> tuple[float, dict[str, float]]:
    cols: dict[str, int] = {}
    pen = _penalties()
    row_keys = [keys(r) for r in train]
    for ks in row_keys:
        for k in ks:
            cols.setdefault(k, len(cols) + 1)
    x = np.zeros((len(train), len(cols) + 1))
    x[:, 0] = 1.0
    for i, ks in enumerate(row_keys):
        for k in ks:
            x[i, cols[k]] = 1.0
    y = np.array([math.log(r.per_gpu / ideal_per_gpu(r)) for r in train])
    lam = np.zeros(len(cols) + 1)
    for k, j in cols.items():
        lam[j] = pen[_group(k)]
    beta = np.linalg.solve(x.T @ x + np.diag(lam), x.T @ y)
    return float(beta[0]), {k: float(beta[j]) for k, j in cols.items()}


def _group(key: str) -> str:
    """'gpu:engine:precision:b300:trtllm:fp4' -> 'gpu:engine:precision'."""
    parts = key.split(":")
    return ":".join(parts[: len(parts) // 2])


def folds(n: int, k: int = FOLDS, seed: int = 0) -> list[np.ndarray]:
    """k fixed random folds of range(n)."""
    order = np.random.default_rng(seed).permutation(n)
    return [order[i::k] for i in range(k)]


def _errors(train: Sequence[Any]) -> np.ndarray:
    """|log error| of out-of-fold predictions inside the training rows."""
    out = []
    for idx in folds(len(train)):
        held = set(int(i) for i in idx)
        inner = [r for i, r in enumerate(train) if i not in held]
        if not inner:
            continue
        b0, coef = _solve(inner)
        f = Fit(b0, coef)
        out += [abs(math.log(f.predict(train[i]) / train[i].per_gpu)) for i in held]
    return np.array(out)


def fit(train: Sequence[Any], band: bool = True) -> Fit:
    """Fit on ``train`` (calibration rows) only; the band from k-fold inside them."""
    if not train:
        raise ValueError("the twin needs at least one calibration row to fit")
    b0, coef = _solve(train)
    err = _errors(train) if band and len(train) >= 2 * FOLDS else np.array([])
    seen = {a: frozenset(str(getattr(r, a)) for r in train) for a in ("gpu", "model", "engine", "vendor")}
    seen["configuration"] = frozenset(configuration(r) for r in train)
    seen["setup"] = frozenset(f"{configuration(r)}:{r.model}" for r in train)
    seen["gpu_scenario"] = frozenset(f"{r.gpu}:{r.scenario}" for r in train)
    return Fit(
        intercept=b0,
        coef=coef,
        band_log=float(np.quantile(err, BAND_Q)) if err.size else 0.0,
        margin_log=float(np.quantile(err, MARGIN_Q)) if err.size else 0.0,
        trained_on=tuple(r.row for r in train),
        seen=seen,
    )
