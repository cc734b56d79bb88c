"""``python -m bakeoff_sandbox``: start the sandbox clouds and print the environment that points
bakeoff (CLI or Airflow) at them; runs until Ctrl-C, then stops every emulator it started."""

from __future__ import annotations

import shlex
import signal
import sys
import threading

from bakeoff_sandbox import Sandbox


def main() -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Sandbox() as sb:
        print("# sandbox clouds are up; in the shell that runs Airflow or the CLI:")
        for k, v in sb.env().items():
            print(f"export {k}={shlex.quote(v)}")
        print("# then trigger the bakeoff DAG with plan mi355x-vs-b200-sandbox. Ctrl-C stops the sandbox.", flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
