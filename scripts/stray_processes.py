"""Find (and optionally stop) processes left behind by a run, recognised by one environment entry.

Every process a deployment's tasks start inherits the workers' environment, so an entry such as
BAKEOFF_DATA=<that run's data dir> singles out exactly what one run started, even processes that
left the workers' process groups (emulators run in their own session). Exit status 1 when any was
found: a clean run tears down everything itself.

usage: stray_processes.py [--kill] NAME=VALUE
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import psutil


def strays(entry: str) -> list[psutil.Process]:
    name, _, value = entry.partition("=")
    me = {os.getpid(), os.getppid()}
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid in me:
            continue
        try:
            if p.environ().get(name) == value:
                found.append(p)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("entry", help="NAME=VALUE that the run's processes carry in their environment")
    ap.add_argument("--kill", action="store_true", help="SIGKILL what is found")
    a = ap.parse_args(argv)
    found = strays(a.entry)
    for p in found:
        try:
            print(f"stray process {p.pid}: {' '.join(p.info['cmdline'] or [])[:160]}", file=sys.stderr)
            if a.kill:
                p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    if a.kill:
        psutil.wait_procs(found, timeout=5)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
