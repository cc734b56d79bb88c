"""What stands behind a sandbox "instance": a hardware-emulator process booted from its user-data.

The fake clouds hand the user-data the providers sent to ``boot``; it reads the target line and the
API key the real boot script carries, and starts the emulator (EMULATED figures) on a free loopback
port, exiting by itself when the script's shutdown timer would have powered the node off. So the
sandbox exercises the same user-data, key and kill-switch timer a real node gets.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bakeoff.serving import userdata

log = logging.getLogger(__name__)
EMULATOR_MODULE = "bakeoff.serving.emulator"
KEY_ENV = "BAKEOFF_API_KEY"


class Backing:
    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self._procs: dict[tuple[str, str], subprocess.Popen] = {}
        self._ports: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def boot(self, provider: str, instance_id: str, script: str | None) -> bool:
        """Start the emulator for this node; False if the user-data is not a bakeoff boot script."""
        meta = userdata.target_from_userdata(script or "")
        key = userdata.api_key_from_userdata(script or "")
        if not meta:
            return False
        minutes = userdata.shutdown_minutes(script or "") or 180
        d = self.workdir / provider / instance_id.replace("/", "_")
        d.mkdir(parents=True, exist_ok=True)
        cfg = d / "config.json"
        cfg.write_text(json.dumps({"mode": "roofline", "target": meta["target"], "api_key_env": KEY_ENV if key else None,
                                   "expires_at": time.time() + minutes * 60}))
        port = _free_port()       # known at boot, like a node's IP: the server behind it may still fail to start
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        if key:
            env[KEY_ENV] = key
        with open(d / "emulator.log", "ab") as logf:
            proc = subprocess.Popen([sys.executable, "-m", EMULATOR_MODULE, "--config", str(cfg), "--host", "127.0.0.1",
                                     "--port", str(port)],
                                    stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        with self._lock:
            self._procs[(provider, instance_id)] = proc
            self._ports[(provider, instance_id)] = port
        log.info("sandbox: %s node %s booted emulator pid %s", provider, instance_id, proc.pid)
        return True

    def address(self, provider: str, instance_id: str) -> tuple[str, int] | None:
        """Where the node's serving port is, from boot on (whether or not the server came up)."""
        with self._lock:
            port = self._ports.get((provider, instance_id))
        return ("127.0.0.1", port) if port else None

    def log_text(self, provider: str, instance_id: str) -> str:
        p = self.workdir / provider / instance_id.replace("/", "_") / "emulator.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def kill(self, provider: str, instance_id: str) -> None:
        with self._lock:
            proc = self._procs.pop((provider, instance_id), None)
            self._ports.pop((provider, instance_id), None)
        if proc is not None:
            _stop(proc)

    def running(self) -> list[tuple[str, str]]:
        with self._lock:
            return [k for k, p in self._procs.items() if p.poll() is None]

    def close(self) -> None:
        with self._lock:
            procs = list(self._procs.values())
            self._procs.clear()
        for p in procs:
            _stop(p)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
