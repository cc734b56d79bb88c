"""Follow `airflow dags test`'s log while it runs and print one line per DAG step started and per benchmark
point measured, so `make demo` is never silent for minutes (the whole log stays in the file).

    python scripts/demo_progress.py LOG PID
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

STEP = re.compile(r"\[DAG TEST\] starting task_id=(?P<task>\S+) map_index=(?P<index>-?\d+)")
POINT = re.compile(r"\[info\s*\] (?P<point>\S+ \S+ \S+=\S+ r\d+: .+?) \[bakeoff\.bench\.run\]")
FAILED = re.compile(r"new_state=(?:failed|upstream_failed)")


def said(line: str) -> str | None:
    """What a log line is worth printing as, or None."""
    if m := STEP.search(line):
        where = "" if m["index"] == "-1" else f" (target {int(m['index']) + 1})"
        return f"step {m['task']}{where}"
    if m := POINT.search(line):
        return f"  point {m['point']}"
    if FAILED.search(line):
        return "  a step failed (see the log)"
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def follow(log: Path, pid: int) -> None:
    start, pos, rest, seen = time.monotonic(), 0, "", set()
    while True:
        running = alive(pid)
        if log.exists():
            with log.open(errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
            *whole, rest = (rest + chunk).split("\n")
            for line in whole:
                text = said(line)
                if text is None or text in seen:
                    continue
                if text.startswith("step"):  # a sensor's every poke starts its task again: say it once
                    seen.add(text)
                print(f"[{time.monotonic() - start:5.0f} s] {text}", flush=True)
        if not running:
            return
        time.sleep(1)


if __name__ == "__main__":
    follow(Path(sys.argv[1]), int(sys.argv[2]))
