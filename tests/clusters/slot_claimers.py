"""A node-slot claimer to run in its own process: the tests that hold a limit across processes start several."""

from __future__ import annotations

import multiprocessing
import time

from bakeoff.clusters.node_slots import claim, release


def claimer(rdir: str, slug: str, counter: str, hold_s: float, out: multiprocessing.Queue) -> None:
    """Claim (polling), count itself in while holding, release: the most holders at once goes to ``out``."""
    import fcntl

    while not claim(rdir, slug):
        time.sleep(0.005)

    def bump(delta: int) -> int:
        with open(counter, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            now = int(f.read() or 0) + delta
            f.seek(0), f.truncate(), f.write(str(now))
            return now

    most = bump(1)
    time.sleep(hold_s)
    bump(-1)
    release(rdir, slug)
    out.put(most)
