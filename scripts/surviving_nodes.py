"""After a run's sweep: fail if any node outlived its teardown.

A node is alive while its process runs (an emulator, a cluster's router, a sandbox node's agent) or
while the local provider's registry holds it as anything but terminated. Processes are singled out by
the BAKEOFF_DATA entry they inherited from the worker or sandbox that started them, as
stray_processes.py does, so other runs on the machine are not looked at. Run after the DAG run ended
and before anything is stopped: every node still there then is one teardown and the sweep left
behind. Exit status 1, naming each, when any survived.

usage: surviving_nodes.py --local-state DIR --data DIR [--data DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import psutil
from stray_processes import strays

NODE_COMMANDS = ("bakeoff.serving.emulator", "bakeoff agent")  # the router is bakeoff.serving.emulator.router


def node_processes(data_dirs: list[str]) -> list[str]:
    found = []
    for d in data_dirs:
        for p in strays(f"BAKEOFF_DATA={d}"):
            try:
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                continue
            if any(c in cmd for c in NODE_COMMANDS):
                found.append(f"node process {p.pid} still runs: {cmd[:160]}")
    return found


def registry_nodes(local_state: Path) -> list[str]:
    found = []
    for path in sorted((local_state / "instances").glob("local-*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            found.append(f"local node {path.stem}: record unreadable ({type(e).__name__})")
            continue
        if rec.get("state") != "terminated":
            found.append(
                f"local node {rec.get('id')} of run {rec.get('run_id')} (target {rec.get('target')}, owned by "
                f"{rec.get('owner', '?')}) is {rec.get('state')!r} in the registry, not terminated"
            )
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--local-state", type=Path, required=True, help="the local provider's registry folder")
    ap.add_argument("--data", action="append", default=[], help="a BAKEOFF_DATA the run's processes carry")
    a = ap.parse_args(argv)
    found = registry_nodes(a.local_state) + node_processes(a.data)
    for line in found:
        print(f"survived teardown: {line}", file=sys.stderr)
    if not found:
        print("no node outlived its teardown")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
