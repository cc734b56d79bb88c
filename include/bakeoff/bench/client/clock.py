"""The emulated hardware's own clock for a time-scaled emulator.

An emulator with ``time_scale`` s < 1 runs every delay s times as long (a sandbox plan runs 20x fast at
0.05). Measured on the wall clock its figures would be 1/s times the emulated GPU's, and a reader takes
an absolute figure at face value. So the benchmark keeps the emulated hardware's clock at both ends:
open-loop arrivals (and session think times, session point durations) are sent at ``to_wall`` of the
plan's seconds, and every duration a record holds is put back on the emulated clock (``to_emulated``)
before a point is summarized and stored. Rates, TTFT, TPOT and SLO verdicts are then the emulated
hardware's. The client's own timing error (its self-calibration) and loop lag stay on the wall clock,
so on the emulated clock they weigh 1/s as much.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import numpy as np

    from bakeoff.plan.target import Target

    # arrival offsets (s from a point's start): a list, or the array an arrival process or trace yields
    Offsets: TypeAlias = Sequence[float] | np.ndarray

# RequestRecord fields that are durations or offsets in seconds (send_time is an epoch timestamp: kept)
DURATION_FIELDS = ("start_offset", "ttft", "ttfa", "e2e", "elapsed", "scheduled_offset", "send_lag")


def time_scale(target: Target, emulated: bool) -> float:
    """The factor the endpoint's delays run at: the target's emulator time_scale on the emulator, else 1."""
    if not emulated:
        return 1.0
    scale = target.emulator.time_scale
    if scale <= 0:
        raise ValueError(f"emulator.time_scale: must be > 0, got {scale}")
    return scale


def to_wall(offsets: Offsets | None, scale: float) -> Offsets | None:
    """Arrival offsets in the emulated hardware's seconds, as the wall-clock seconds to send them at."""
    if offsets is None or scale == 1.0:
        return offsets
    return [float(o) * scale for o in offsets]


def to_emulated(records: Sequence[Any], scale: float) -> None:
    """Put every duration of ``records`` (RequestRecord) on the emulated clock, in place: wall / scale."""
    if scale == 1.0:
        return
    for r in records:
        for name in DURATION_FIELDS:
            v = getattr(r, name, None)
            if v is not None:
                setattr(r, name, v / scale)
        r.chunk_offsets = [c / scale for c in r.chunk_offsets]
