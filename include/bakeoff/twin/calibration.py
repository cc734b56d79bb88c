"""The calibration set: public MLPerf rows the twin is fitted on and scored against (calibration.csv).

Loaded as typed rows with the catalog names and the published configuration side by side, so every
figure the twin reports can be traced to a submission (``row`` in the source file, ``result_path``).
Where the rows came from, how they were chosen, the latency limits and dataset lengths: calibration.yaml.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from bakeoff import catalog
from bakeoff.engines import registry

SCENARIOS = ("Offline", "Server", "Interactive")


@dataclass(frozen=True)
class Row:
    """One published MLPerf result, with the derived keys the twin's fit uses."""

    row: int
    organization: str
    system: str
    gpu: str  # catalog name
    accelerators_per_node: int
    nodes: int
    total_accelerators: int
    model: str  # catalog name
    scenario: str
    precision_published: str
    framework: str
    tokens_s: float  # the published result: output tokens per second, whole system
    result_path: str

    @property
    def per_gpu(self) -> float:
        return self.tokens_s / self.total_accelerators

    @property
    def vendor(self) -> str:
        return catalog.gpus()[self.gpu].vendor

    @property
    def quantization(self) -> str:
        """The plan quantization the published weight types stand for (FP4 is NVFP4 on NVIDIA, MXFP4 on AMD)."""
        p = self.precision_published.lower()
        if "fp4" in p:
            return "mxfp4" if self.vendor == "amd" or "mx" in p else "nvfp4"
        return "fp8"

    @property
    def precision(self) -> str:
        return "fp4" if self.quantization.endswith("fp4") else "fp8"

    @property
    def engine(self) -> str:
        return engine_family(self.framework)

    @property
    def multinode(self) -> str:
        """Multi when the system spans more than one scale-up domain (NVLink / Infinity Fabric), so its
        traffic (MoE all-to-all, TP/PP) crosses the network; an NVL72 rack of 18 trays is one domain."""
        return "multi" if self.total_accelerators > catalog.gpus()[self.gpu].domain else "single"


def engine_family(framework: str) -> str:
    """A published framework string as the engine family the fit keys on (each engine's module names
    its frameworks)."""
    return registry.framework_family(framework) or "pytorch"  # vendor's own PyTorch / ROCm harness


def _text(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


@lru_cache
def meta() -> dict[str, Any]:
    """calibration.yaml: source, selection, latency limits, dataset lengths."""
    doc: dict[str, Any] = yaml.safe_load(_text("calibration.yaml"))
    return doc


@lru_cache
def rows() -> tuple[Row, ...]:
    out = []
    for r in csv.DictReader(io.StringIO(_text("calibration.csv"))):
        out.append(
            Row(
                row=int(r["row"]),
                organization=r["organization"],
                system=r["system"],
                gpu=r["accelerator"],
                accelerators_per_node=int(r["accelerators_per_node"]),
                nodes=int(r["nodes"]),
                total_accelerators=int(r["total_accelerators"]),
                model=r["model"],
                scenario=r["scenario"],
                precision_published=r["precision_published"],
                framework=r["framework"],
                tokens_s=float(r["result"]),
                result_path=r["result_path"],
            )
        )
    return tuple(out)


def lengths(model: str) -> tuple[int, int]:
    """Mean input and output tokens of the model's MLPerf dataset."""
    i, o = meta()["lengths"]["tokens"][model]
    return int(i), int(o)


def tpot_limit_s(model: str, scenario: str) -> float | None:
    """The scenario's p99 TPOT limit in seconds (None: Offline, no limit)."""
    limits = meta()["latency_limits"]["ms"][model].get(scenario)
    return None if limits is None else float(limits[1]) / 1000


def source_line() -> str:
    s = meta()["source"]
    return f"MLPerf Inference v6.1 ({s['repository']} {s['path']} at {s['commit'][:12]}, {s['as_of']})"
