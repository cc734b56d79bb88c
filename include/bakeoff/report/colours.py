"""One colour per kind of target (its GPU) wherever a chart draws it: the report's charts and every
dashboard page, so an MI355X is the same red in the report, on Trend, Compare and Explore."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# NVIDIA in greens, blues and purples, AMD in reds, oranges and browns (matplotlib's tab10, each once)
GPU_COLOURS = {
    "b200": "#2ca02c",
    "b300": "#17becf",
    "gb200": "#1f77b4",
    "gb300": "#9467bd",
    "h100": "#7f7f7f",
    "h200": "#bcbd22",
    "mi300x": "#8c564b",
    "mi325x": "#e377c2",
    "mi350x": "#ff7f0e",
    "mi355x": "#d62728",
}
SPARE = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354")


def by_kind(items: Iterable[tuple[K, str | None]]) -> dict[K, str]:
    """{key: colour} for (key, GPU name) pairs in drawing order: a key takes its GPU's colour, unless an
    earlier key of the same GPU has it (two engines on one GPU), or the GPU has none; then the next spare."""
    out: dict[K, str] = {}
    used: set[str] = set()
    for i, (key, gpu) in enumerate(items):
        colour = GPU_COLOURS.get((gpu or "").lower())
        if colour is None or colour in used:
            colour = next((c for c in SPARE if c not in used), SPARE[i % len(SPARE)])
        used.add(colour)
        out[key] = colour
    return out
