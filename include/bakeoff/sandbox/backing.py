"""What stands behind a sandbox "instance": a hardware-emulator process booted from its user-data.

The fake clouds hand the user-data the providers sent to ``boot``; it reads the target line and the
API key the real boot script carries, and starts the emulator (EMULATED figures) on a free loopback
port, exiting by itself when the script's shutdown timer would have powered the node off. So the
sandbox exercises the same user-data, key and kill-switch timer a real node gets.

When the script starts a node agent, the node does what the script does: downloads the client
bundle from its presigned URL (moto's S3), refuses it unless the SHA-256 matches, unzips it and
runs ``bakeoff agent`` from that copy (its third-party packages come from this interpreter, as
the sandbox reaches no package index). The emulator writes power samples where a node's sampler
would, so co-located benchmarks, power and log fetch-back all run the real code.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import httpx

from bakeoff.serving import userdata

log = logging.getLogger(__name__)
EMULATOR_MODULE = "bakeoff.serving.emulator"
KEY_ENV = "BAKEOFF_API_KEY"


class Backing:
    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self._procs: dict[tuple[str, str], list[subprocess.Popen]] = {}
        self._ports: dict[tuple[str, str], int] = {}
        self._agent_ports: dict[tuple[str, str], int] = {}
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
        expires_at = time.time() + minutes * 60
        cfg.write_text(json.dumps({"mode": "roofline", "target": meta["target"], "api_key_env": KEY_ENV if key else None,
                                   "expires_at": expires_at, "power_csv": str(d / "power.csv")}))
        port = _free_port()       # known at boot, like a node's IP: the server behind it may still fail to start
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        if key:
            env[KEY_ENV] = key
        with open(d / "emulator.log", "ab") as logf:
            proc = subprocess.Popen([sys.executable, "-m", EMULATOR_MODULE, "--config", str(cfg), "--host", "127.0.0.1",
                                     "--port", str(port)],
                                    stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        procs = [proc]
        agent = userdata.agent_from_userdata(script or "")
        agent_port = _free_port() if agent and key else None
        if agent_port:
            agent_proc = self._start_agent(d, agent, key, port, agent_port, expires_at, env)
            procs += [agent_proc] if agent_proc else []
        with self._lock:
            self._procs[(provider, instance_id)] = procs
            self._ports[(provider, instance_id)] = port
            if agent_port:
                self._agent_ports[(provider, instance_id)] = agent_port
        log.info("sandbox: %s node %s booted emulator pid %s%s", provider, instance_id, proc.pid,
                 f" and agent on port {agent_port}" if len(procs) > 1 else "")
        return True

    def _start_agent(self, d: Path, agent: dict, key: str, serve_port: int, agent_port: int, expires_at: float,
                     env: dict[str, str]) -> subprocess.Popen | None:
        """What the boot script's agent section does: fetch, check, unzip, start."""
        boot_log = d / "boot.log"
        try:
            data = httpx.get(agent["url"], timeout=30.0).raise_for_status().content
        except httpx.HTTPError as e:
            data = b""
            log.warning("sandbox: client bundle download failed: %s", type(e).__name__)
        if hashlib.sha256(data).hexdigest() != agent["sha256"]:
            with open(boot_log, "a") as f:
                f.write("bakeoff: client bundle download or checksum failed; no node agent\n")
            return None
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            z.extractall(d / "client")
        key_file = d / "api_key"
        key_file.write_text(key)
        key_file.chmod(0o600)
        agent_env = {**{k: v for k, v in env.items() if k != KEY_ENV}, "PYTHONPATH": str(d / "client")}
        with open(d / "agent.log", "ab") as logf:
            return subprocess.Popen(
                [sys.executable, "-m", "bakeoff", "agent", "--serve-url", f"http://127.0.0.1:{serve_port}",
                 "--key-file", str(key_file), "--log-dir", str(d), "--work-dir", str(d / "work"),
                 "--host", "127.0.0.1", "--port", str(agent_port), "--bundle", agent["sha256"],
                 "--expires-at", str(expires_at)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=agent_env, cwd=str(d),
                start_new_session=True)

    def address(self, provider: str, instance_id: str) -> tuple[str, int] | None:
        """Where the node's serving port is, from boot on (whether or not the server came up)."""
        with self._lock:
            port = self._ports.get((provider, instance_id))
        return ("127.0.0.1", port) if port else None

    def agent_port(self, provider: str, instance_id: str) -> int | None:
        with self._lock:
            return self._agent_ports.get((provider, instance_id))

    def log_text(self, provider: str, instance_id: str) -> str:
        p = self.workdir / provider / instance_id.replace("/", "_") / "emulator.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def kill(self, provider: str, instance_id: str) -> None:
        with self._lock:
            procs = self._procs.pop((provider, instance_id), [])
            self._ports.pop((provider, instance_id), None)
            self._agent_ports.pop((provider, instance_id), None)
        for proc in procs:
            _stop(proc)

    def running(self) -> list[tuple[str, str]]:
        with self._lock:
            return [k for k, ps in self._procs.items() if ps[0].poll() is None]

    def close(self) -> None:
        with self._lock:
            procs = [p for ps in self._procs.values() for p in ps]
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
