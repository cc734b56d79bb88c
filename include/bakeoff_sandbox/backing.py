"""What stands behind a sandbox "instance": a hardware-emulator process booted from its user-data.

The fake clouds hand the user-data the providers sent to ``boot``; it reads the target line and the
API key the real boot script carries, and starts the emulator (EMULATED figures) on a free port of the
node address (loopback unless $BAKEOFF_NODE_ADDRESS names a private one, as providers/address.py
guards). It also arms the script's kill switch on the sandbox clock: when that falls due the node's
processes stop and ``kill_switch_handler`` does to the fake cloud what the section does to the real
one (EC2 power-off = terminate; OCI self-delete through its instance principal; Vultr and
DigitalOcean power-off, still billed). So the sandbox exercises the same user-data, key and kill
switch a real node gets.

When the script starts a node agent, the node does what the script does: downloads the client
bundle from its presigned URL (moto's S3), refuses it unless the SHA-256 matches, unzips it and
runs ``bakeoff agent`` from that copy (its third-party packages come from this interpreter, as
the sandbox reaches no package index). The emulator writes power samples where a node's sampler
would, so co-located benchmarks, power and log fetch-back all run the real code.

Before the emulator starts, the node emulates the boot's weights step: a short "download" reported as the
real step reports it (weights.json and its console line, source ``hub (EMULATED)``), so deploy records
download and load time; with ``inject_fault: weights_incomplete`` a shard is missing and no engine starts.

When the script carries the node's TLS certificate and key, the emulator and the agent serve https
with them, exactly as vLLM/SGLang and the agent do on a node, so every client in a sandbox run
goes through the real pinning path; an agent told to expect serving secrets accepts them into a
0600 env file (the emulator itself needs none, so it does not wait for them).
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
from collections.abc import Callable
from pathlib import Path

import httpx

from bakeoff import catalog
from bakeoff.plan.precision import QUANT_BYTES
from bakeoff.providers.address import node_address, url_host
from bakeoff.serving import userdata
from bakeoff_sandbox.billing import Clock

log = logging.getLogger(__name__)
EMULATOR_MODULE = "bakeoff.serving.emulator"
KEY_ENV = "BAKEOFF_API_KEY"
WEIGHTS_DOWNLOAD_S = 0.2  # the emulated download: long enough to be measured, short enough for tests


class Backing:
    def __init__(self, workdir: Path, clock: Clock | None = None):
        self.workdir = Path(workdir)
        self.clock = clock or Clock()
        self._switches: dict[tuple[str, str], tuple[float, str]] = {}  # node -> (deadline, action)
        # (provider, node id, action): what the kill switch does to the cloud once the node is off
        self.kill_switch_handler: Callable[[str, str, str], None] | None = None
        self._procs: dict[tuple[str, str], list[subprocess.Popen]] = {}
        self._ports: dict[tuple[str, str], int] = {}
        self._agent_ports: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def boot(self, provider: str, instance_id: str, script: str | None) -> bool:
        """Start the emulator for this node; False if the user-data is not a bakeoff boot script."""
        meta = userdata.target_from_userdata(script or "")
        key = userdata.api_key_from_userdata(script or "")
        tls = userdata.tls_from_userdata(script or "")
        expects_secrets = bool(userdata.secret_names_from_userdata(script or ""))
        if not meta:
            return False
        switch = userdata.kill_switch_from_userdata(script or "")
        if switch and switch.get("minutes"):
            with self._lock:
                self._switches[(provider, instance_id)] = (self.clock.now() + switch["minutes"] * 60, switch["action"])
        minutes = userdata.shutdown_minutes(script or "") or 180
        d = self.workdir / provider / instance_id.replace("/", "_")
        d.mkdir(parents=True, exist_ok=True)
        cfg = d / "config.json"
        tls_args = _tls_files(d, tls)
        expires_at = time.time() + minutes * 60
        cfg.write_text(
            json.dumps(
                {
                    "mode": "roofline",
                    "target": meta["target"],
                    "api_key_env": KEY_ENV if key else None,
                    "expires_at": expires_at,
                    "power_csv": str(d / "power.csv"),
                }
            )
        )
        port = _free_port()  # known at boot, like a node's IP: the server behind it may still fail to start
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        if key:
            env[KEY_ENV] = key
        # the boot script's order: the node agent first (it hands back the logs of what follows), then
        # the weights step, then the engine
        agent = userdata.agent_from_userdata(script or "")
        agent_port = _free_port() if agent and key else None
        agent_procs: list[subprocess.Popen] = []
        if agent_port:
            agent_proc = self._start_agent(
                d,
                agent,
                key,
                port,
                agent_port,
                expires_at,
                env,
                tls_args,
                d / "secrets" / "serve.env" if expects_secrets else None,
            )
            agent_procs += [agent_proc] if agent_proc else []
        weights = _fetch_weights(meta)
        procs: list[subprocess.Popen] = []
        with open(d / "emulator.log", "ab") as logf:
            if not weights["ok"]:  # the boot script stops before the engine; the agent still runs
                _report_weights(d, weights)
            else:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            EMULATOR_MODULE,
                            "--config",
                            str(cfg),
                            "--host",
                            node_address(),
                            "--port",
                            str(port),
                            *tls_args,
                        ],
                        stdin=subprocess.DEVNULL,
                        stdout=logf,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                )
                _report_weights(d, weights | {"engine_started": time.time()})
        procs += agent_procs
        with self._lock:
            self._procs[(provider, instance_id)] = procs
            self._ports[(provider, instance_id)] = port
            if agent_port:
                self._agent_ports[(provider, instance_id)] = agent_port
        log.info(
            "sandbox: %s node %s booted emulator pid %s%s",
            provider,
            instance_id,
            procs[0].pid if weights["ok"] else f"none ({weights['failure']})",
            f" and agent on port {agent_port}" if agent_port else "",
        )
        return True

    def _start_agent(
        self,
        d: Path,
        agent: dict,
        key: str,
        serve_port: int,
        agent_port: int,
        expires_at: float,
        env: dict[str, str],
        tls_args: list[str] | None = None,
        secrets_file: Path | None = None,
    ) -> subprocess.Popen | None:
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
                [
                    sys.executable,
                    "-m",
                    "bakeoff",
                    "agent",
                    "--serve-url",
                    f"{'https' if tls_args else 'http'}://{url_host(node_address())}:{serve_port}",
                    "--key-file",
                    str(key_file),
                    "--log-dir",
                    str(d),
                    "--work-dir",
                    str(d / "work"),
                    "--host",
                    node_address(),
                    "--port",
                    str(agent_port),
                    "--bundle",
                    agent["sha256"],
                    "--expires-at",
                    str(expires_at),
                    *(tls_args or []),
                    *(["--secrets-file", str(secrets_file)] if secrets_file else []),
                ],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=agent_env,
                cwd=str(d),
                start_new_session=True,
            )

    def address(self, provider: str, instance_id: str) -> tuple[str, int] | None:
        """Where the node's serving port is, from boot on (whether or not the server came up)."""
        with self._lock:
            port = self._ports.get((provider, instance_id))
        return (node_address(), port) if port else None

    def emulated(self, provider: str, instance_id: str) -> bool:
        """Whether this sandbox booted the emulator for the node (its own record, by instance id: what the
        providers ask through the address map, never the node's /version)."""
        with self._lock:
            return (provider, instance_id) in self._ports

    def agent_port(self, provider: str, instance_id: str) -> int | None:
        with self._lock:
            return self._agent_ports.get((provider, instance_id))

    def log_text(self, provider: str, instance_id: str) -> str:
        p = self.workdir / provider / instance_id.replace("/", "_") / "emulator.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def deadline(self, provider: str, instance_id: str) -> float | None:
        """When this node's kill switch fires (sandbox clock), while it is armed."""
        with self._lock:
            armed = self._switches.get((provider, instance_id))
        return armed[0] if armed else None

    def next_due(self) -> float | None:
        """When the next armed kill switch falls due (sandbox clock), if any."""
        with self._lock:
            return min((d for d, _ in self._switches.values()), default=None)

    def fire_due(self, now: float) -> list[tuple[str, str, str]]:
        """Fire every kill switch due by ``now``: the node's processes stop, then the handler acts on its cloud."""
        with self._lock:
            due = [(k, a) for k, (d, a) in self._switches.items() if d <= now]
            for k, _ in due:
                del self._switches[k]
        fired = []
        for (provider, iid), action in due:
            self.kill(provider, iid)
            log.warning("sandbox: %s node %s kill switch fired (%s)", provider, iid, action)
            if self.kill_switch_handler:
                self.kill_switch_handler(provider, iid, action)
            fired.append((provider, iid, action))
        return fired

    def kill(self, provider: str, instance_id: str) -> None:
        with self._lock:
            self._switches.pop((provider, instance_id), None)
            procs = self._procs.pop((provider, instance_id), [])
            self._ports.pop((provider, instance_id), None)
            self._agent_ports.pop((provider, instance_id), None)
        for proc in procs:
            _stop(proc)

    def stop_engine(self, provider: str, instance_id: str) -> bool:
        """Kill a node's emulator and leave its node and agent up: a serving engine that died on a node
        still running (for readiness tests). False when the node runs no engine."""
        with self._lock:
            procs = [p for p in self._procs.get((provider, instance_id), []) if EMULATOR_MODULE in p.args]
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        return bool(procs)

    def running(self) -> list[tuple[str, str]]:
        with self._lock:
            return [k for k, ps in self._procs.items() if ps and ps[0].poll() is None]

    def close(self) -> None:
        with self._lock:
            procs = [p for ps in self._procs.values() for p in ps]
            self._procs.clear()
        for p in procs:
            _stop(p)


def _fetch_weights(meta: dict) -> dict:
    """The boot script's weights step, emulated: a short "download" of the checkpoint (its catalog size);
    with the fault ``weights_incomplete`` a shard is missing afterwards, and the engine never starts."""
    t = meta["target"]
    started = time.time()
    time.sleep(WEIGHTS_DOWNLOAD_S)
    spec = catalog.models().get(t.get("model"))
    size = int(spec.params_b * QUANT_BYTES[t.get("quantization", "fp8")] * 1e9) if spec else 0
    broken = (t.get("provider_options") or {}).get("inject_fault") == "weights_incomplete"
    finished = time.time()
    return {
        "source": "hub (EMULATED)",
        "checkpoint": meta.get("checkpoint") or t.get("model"),
        "bytes": size,
        "files": None,
        "download_s": round(finished - started, 3),
        "mirror_push_s": 0,
        "started": started,
        "finished": finished,
        "engine_started": None,
        "ok": not broken,
        "failure": "weights_incomplete" if broken else None,
        "missing": ["model-00002-of-00002.safetensors"] if broken else [],
    }


def _report_weights(d: Path, doc: dict) -> None:
    """Where the boot script reports it: weights.json, and its lines in boot.log (which the agent hands
    back) and on the console (the sandbox's EC2 console is the emulator's log)."""
    (d / "weights.json").write_text(json.dumps(doc))
    lines = f"{userdata.WEIGHTS_MARK}{json.dumps(doc)}\n"
    if doc["failure"]:
        lines += f"bakeoff: {doc['failure']}: {doc['checkpoint']} lacks: {' '.join(doc['missing'])}\n"
    for name in ("boot.log", "emulator.log"):
        with open(d / name, "a") as f:
            f.write(lines)


def _tls_files(d: Path, tls: dict | None) -> list[str]:
    """Write the node's certificate and key (0600) where the node's servers read them; their flags."""
    if not tls:
        return []
    tdir = d / "tls"
    tdir.mkdir(mode=0o700, exist_ok=True)
    cert, key = tdir / "node.crt", tdir / "node.key"
    cert.write_text(tls["cert"])
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(tls["key"])
    return ["--tls-cert", str(cert), "--tls-key", str(key)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((node_address(), 0))
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
