"""Honest hold-outs: identical setups merged before any split, the twin scored on setups, submitters,
accelerators and models it never saw, and each band it prints derived from those errors for its kind.

Many published rows are one setup resubmitted (an OEM's copy of the vendor's system), so a random split
leaves an identical twin in training and measures lookup. ``merge_setups`` keeps one row per setup
(GPU, GPU count, model, precision, scenario, engine; its figure the geometric mean of the copies, its
submitter every organisation that sent it). The schemes then hold out whole groups of merged rows:

- leave-one-setup-out: each setup alone;
- leave-one-submitter-out: every setup an organisation sent (with every copy of it, whoever else sent it);
- leave-one-accelerator-out: every setup of one GPU;
- leave-one-model-out: every setup of one model, predicted through its nearest calibrated kind
  (``near_model``), as a plan target of an uncalibrated model is;
- round-to-round: fit on the older MLPerf round, score the newer (only where both are in the data).

Every held-out row is given the band kind its prediction was (``kind_of``, against what its fit saw), and
the band of a kind is the BAND_Q quantile of |log error| over every held-out row of that kind
(``kind_bands``). The deployed twin classifies a plan target with the same ``kind_of`` against every
calibration row, so the band it prints is the one measured for its kind of extrapolation.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from bakeoff import catalog
from bakeoff.twin import calibration
from bakeoff.twin import fit as twin_fit
from bakeoff.twin.calibration import Row

# band kinds, narrowest first: what the fit had seen of the predicted configuration
SAME_SETUP = "same setup"  # its GPU x engine x precision ran this model (another scenario or GPU count)
NEW_MODEL = "same GPU, new model"  # its GPU x engine x precision ran, this model only elsewhere
# its GPU ran, but no row ran its GPU x engine x precision, or its GPU in this scenario: coarser terms stand in
NEW_CONFIG = "same GPU, new configuration"
NEW_GPU = "new GPU"  # no row ran its GPU at all: only the vendor, engine, precision and scenario terms stand in
NEW_KIND = "new model kind"  # no row of the model: read through its nearest calibrated kind
KINDS = (SAME_SETUP, NEW_MODEL, NEW_CONFIG, NEW_GPU, NEW_KIND)

SCHEMES = ("leave-one-setup-out", "leave-one-submitter-out", "leave-one-accelerator-out", "leave-one-model-out")
ROUND_SCHEME = "round-to-round"


def setup_key(r: Row) -> tuple[str, int, str, str, str, str]:
    return (r.gpu, r.total_accelerators, r.model, r.precision, r.scenario, r.engine)


def merge_setups(rows: Iterable[Row]) -> tuple[Row, ...]:
    """One row per identical setup, in first-seen order: the geometric mean of its copies' figures, the
    lowest source row number, and every organisation that published it ('+'-joined)."""
    groups: dict[tuple[str, int, str, str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        groups[setup_key(r)].append(r)
    out = []
    for copies in groups.values():
        mean = math.exp(sum(math.log(c.tokens_s) for c in copies) / len(copies))
        orgs = "+".join(sorted({c.organization for c in copies}))
        out.append(dataclasses.replace(copies[0], row=min(c.row for c in copies), tokens_s=mean, organization=orgs))
    return tuple(out)


@lru_cache
def setups() -> tuple[Row, ...]:
    """The calibration set with identical setups merged: what the twin is fitted and scored on."""
    return merge_setups(calibration.rows())


def near_model(model: str, seen: Sequence[str]) -> str | None:
    """The calibrated model standing in for ``model``: itself if calibrated, else the nearest (in active
    parameters) of the same MoE-ness and attention kind (latent or not); None for a hybrid (linear
    attention) model or when nothing alike was calibrated."""
    if model in seen:
        return model
    specs = catalog.models()
    m = specs[model]
    if m.attention == "hybrid":
        return None

    def kind(s: catalog.ModelSpec) -> tuple[bool, bool]:
        return (s.experts is not None, s.kv_lora_rank is not None)

    alike = [s for s in seen if kind(specs[s]) == kind(m)]
    if not alike:
        return None
    return min(alike, key=lambda s: abs(math.log(specs[s].active_params_b / m.active_params_b)))


def kind_of(gpu: str, model: str, engine: str, precision: str, scenario: str, seen: dict[str, frozenset[str]]) -> str:
    """The band kind of a prediction, from what its fit saw (``Fit.seen``)."""
    if model not in seen["model"]:
        return NEW_KIND
    config = f"{gpu}:{engine}:{precision}"
    if config not in seen["configuration"] or f"{gpu}:{scenario}" not in seen["gpu_scenario"]:
        # a GPU the fit has rows of (another engine, precision or scenario) keeps its own terms; one it never
        # saw has none, a different extrapolation with its own errors (and one a plan target never gets:
        # twin_for refuses a GPU with no published row)
        ran = any(k.split(":", 1)[0] == gpu for k in (*seen["configuration"], *seen["gpu_scenario"]))
        return NEW_CONFIG if ran else NEW_GPU
    return SAME_SETUP if f"{config}:{model}" in seen["setup"] else NEW_MODEL


@dataclass(frozen=True)
class HeldOut:
    """One merged row predicted by a fit that never saw it."""

    scheme: str
    group: str  # what was held out with it: the setup, submitter, GPU or model
    row: Row
    predicted: float  # tokens/s per GPU
    kind: str

    @property
    def log_error(self) -> float:
        return abs(math.log(self.predicted / self.row.per_gpu))

    @property
    def ape(self) -> float:
        return abs(self.predicted - self.row.per_gpu) / self.row.per_gpu * 100


def _groups(rows: Sequence[Row], scheme: str) -> dict[str, list[int]]:
    label: Callable[[Row], Iterable[str]] = {
        "leave-one-setup-out": lambda r: [":".join(map(str, setup_key(r)))],
        "leave-one-submitter-out": lambda r: r.organization.split("+"),
        "leave-one-accelerator-out": lambda r: [r.gpu],
        "leave-one-model-out": lambda r: [r.model],
    }[scheme]
    out: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        for g in label(r):
            out[g].append(i)
    return dict(sorted(out.items()))


def held_out(rows: Sequence[Row], scheme: str) -> list[HeldOut]:
    """Every merged row of ``rows`` predicted under ``scheme`` by a fit on the rows outside its group."""
    out: list[HeldOut] = []
    for group, test in _groups(rows, scheme).items():
        held = set(test)
        train = [r for i, r in enumerate(rows) if i not in held]
        if not train:
            continue
        f = twin_fit.fit(train, band=False)
        for i in test:
            r = rows[i]
            query = r
            if r.model not in f.seen["model"]:  # read through its nearest kind, as a plan target would be
                proxy = near_model(r.model, sorted(f.seen["model"]))
                if proxy is None:
                    continue  # no basis: the twin says "no calibration", so there is no error to score
                query = dataclasses.replace(r, model=proxy)
            predicted = twin_fit.ideal_per_gpu(r) * f.efficiency(query)
            out.append(
                HeldOut(scheme, group, r, predicted, kind_of(r.gpu, r.model, r.engine, r.precision, r.scenario, f.seen))
            )
    return out


@lru_cache
def all_held_out() -> tuple[HeldOut, ...]:
    """The merged calibration set under every scheme (about 130 fits, a second or two)."""
    rows = setups()
    return tuple(h for s in SCHEMES for h in held_out(rows, s))


@dataclass(frozen=True)
class Band:
    kind: str
    band_log: float  # BAND_Q quantile of |log error|: the printed band is exp(-band_log)..exp(band_log)
    margin_log: float  # MARGIN_Q quantile: what the budget adds
    rows: int  # held-out predictions of this kind behind it

    @property
    def band_pct(self) -> float:
        return math.expm1(self.band_log) * 100


def kind_bands(scored: Iterable[HeldOut]) -> dict[str, Band]:
    """Per kind with held-out rows, its band from their errors; a kind with none is absent (no basis)."""
    by: dict[str, list[float]] = defaultdict(list)
    for h in scored:
        by[h.kind].append(h.log_error)
    return {
        k: Band(k, float(np.quantile(v, twin_fit.BAND_Q)), float(np.quantile(v, twin_fit.MARGIN_Q)), len(v))
        for k in KINDS
        if (v := by.get(k))
    }


@lru_cache
def bands() -> dict[str, Band]:
    """The deployed twin's band per kind, from every scheme's held-out errors."""
    return kind_bands(all_held_out())


def coverage(scored: Iterable[HeldOut], by_kind: dict[str, Band]) -> dict[str, tuple[int, int]]:
    """Per kind: (held-out rows inside their kind's band, held-out rows of that kind with a band)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for h in scored:
        b = by_kind.get(h.kind)
        if b is None:
            continue
        out[h.kind][0] += h.log_error <= b.band_log
        out[h.kind][1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def cross_coverage(scored: Sequence[HeldOut], min_band_rows: int = 1) -> dict[str, dict[str, tuple[int, int]]]:
    """Per scheme and kind, coverage of bands derived from the *other* schemes' errors only: how the band
    does on a kind of hold-out it was not measured on. A band the other schemes give fewer than
    ``min_band_rows`` held-out errors is no band to judge: that kind is left out for that scheme."""
    out = {}
    for s in sorted({h.scheme for h in scored}):
        mine = [h for h in scored if h.scheme == s]
        others = {k: b for k, b in kind_bands(h for h in scored if h.scheme != s).items() if b.rows >= min_band_rows}
        out[s] = coverage(mine, others)
    return out
