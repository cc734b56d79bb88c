"""The local provider: an "instance" is a hardware-emulator process on a free port of this worker.

It behaves like a cloud provider where it matters for teardown: each instance is tagged with its
run and target in a registry file that outlives the process that created it, so list_tagged finds
leftovers after an Airflow task died; create is idempotent per (run, target), so a retried task
never starts a second one. The emulator also exits by itself at expires_at, the local twin of a
cloud instance's shutdown timer.

Any worker sharing the registry ($BAKEOFF_LOCAL_STATE) reaches the node: it listens on this
worker's node address (providers/address.py, $BAKEOFF_NODE_ADDRESS; 127.0.0.1 when unset), and the
record names that address and the host that owns the process. terminate succeeds only when the
node's absence is observed: on the owning host, its process group killed and its pid gone; from
another host, the emulator's stop route (opened by a key derived from the installation secret for
that node, never stored) asked, then its port refusing connections. A node it cannot see (its host
unreachable) is a ProviderError naming it, never "terminated", so teardown fails and the reaper retries.

Layout under $BAKEOFF_LOCAL_STATE (default state_root()/local/): instances/<id>.json (registry),
<id>/config.json, <id>/emulator.log, <id>/port, <id>/power.csv (the emulated GPUs' counters). The API and
stop keys reach the child only through its environment.

It serves plain http: on loopback, or on a private address with the run's API key required
(address.py's guard), so there is no public network path for TLS to protect.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psutil

from bakeoff import durable, engines, paths, secrets
from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.providers.address import is_loopback, node_address, url_host
from bakeoff.providers.base import TAG_EXPIRES, TAG_RUN, TAG_TARGET, Provider, ProviderError

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

EMULATOR_MODULE = "bakeoff.serving.emulator"
API_KEY_ENV = "BAKEOFF_API_KEY"
STOP_KEY_ENV = "BAKEOFF_STOP_KEY"
HOST = "127.0.0.1"  # where a record without a host (written before nodes had one) listens
LOCAL_STATE_ENV = "BAKEOFF_LOCAL_STATE"

_children: dict[int, subprocess.Popen[bytes]] = {}  # processes this interpreter started, reaped on terminate


def _root() -> Path:
    """The local "cloud"'s control plane: its registry of emulator nodes. Workers whose BAKEOFF_DATA
    differ share it (so one can list, describe and terminate what another started, as two workers share
    a cloud account) by setting $BAKEOFF_LOCAL_STATE to one folder; default state_root()/local."""
    return Path(os.environ.get(LOCAL_STATE_ENV) or paths.state_root() / "local").resolve()


def _registry_dir() -> Path:
    return _root() / "instances"


def instance_id(run_id: str, target_slug: str) -> str:
    """Stable per (run, target): the idempotency key of create()."""
    return "local-" + hashlib.sha256(f"{run_id}/{target_slug}".encode()).hexdigest()[:16]


def stop_key(iid: str) -> str:
    """The key that opens node ``iid``'s stop route: derived again by whichever worker terminates it."""
    return secrets.derive(f"local-stop/{iid}").hex()


def _owner() -> str:
    return socket.gethostname()


def _write_json(path: Path, data: dict[str, Any]) -> None:
    durable.write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode())


class LocalProvider(Provider):
    name = "local"
    poll_s = 0.05  # the emulator is up in well under a second
    emulated_nodes = True

    def launched_emulated(self, instance_id: str) -> bool:
        """Every local node is an emulator process this provider started itself."""
        return True

    def __init__(
        self,
        credentials: dict[str, Any] | None = None,
        *,
        grace_s: float = 5.0,
        python: str | None = None,
        **options: Any,
    ):
        self.grace_s = grace_s
        self.python = python or sys.executable
        self.options = options

    # registry ----------------------------------------------------------------
    def _record_path(self, iid: str) -> Path:
        return _registry_dir() / f"{iid}.json"

    def _read(self, iid: str) -> dict[str, Any] | None:
        try:
            rec: dict[str, Any] = json.loads(self._record_path(iid).read_text())
            return rec
        except FileNotFoundError:
            return None
        except json.JSONDecodeError:
            return None

    @contextlib.contextmanager
    def _lock(self, iid: str) -> Iterator[None]:
        _registry_dir().mkdir(parents=True, exist_ok=True)
        with open(_registry_dir() / f".{iid}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    @staticmethod
    def _here(rec: dict[str, Any]) -> bool:
        """The node's process runs on this host (a record without an owner predates owners: here)."""
        return bool(rec.get("owner", _owner()) == _owner())

    def _seen(self, rec: dict[str, Any]) -> bool | None:
        """Whether the node runs: its process on the host that owns it, its port from any other
        (refused: gone). None when it cannot be seen from here (the owner's address does not answer)."""
        if self._here(rec):
            return self._alive(rec)
        port = self._port(rec)
        if not port:
            return None  # still starting on its host, or it died there before listening: not seen
        try:
            with socket.create_connection((rec.get("host") or HOST, port), timeout=3.0):
                return True
        except ConnectionRefusedError:
            return False
        except OSError:
            return None

    @staticmethod
    def _alive(rec: dict[str, Any]) -> bool:
        """The recorded pid still runs *our* emulator (not a recycled pid, not a zombie), on this host."""
        try:
            proc = psutil.Process(rec["pid"])
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            cmd = proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError):
            return False
        return EMULATOR_MODULE in cmd and rec["config"] in cmd

    def _port(self, rec: dict[str, Any]) -> int | None:
        if rec.get("port"):
            return int(rec["port"])
        try:
            return int(Path(rec["port_file"]).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _instance(self, rec: dict[str, Any], state: str | None = None) -> Instance:
        port = self._port(rec)
        if state is None:
            seen = self._seen(rec)
            state = "unknown" if seen is None else ("running" if port else "pending") if seen else "terminated"
        return Instance(
            provider=self.name,
            id=rec["id"],
            target=rec["target"],
            run_id=rec["run_id"],
            state=state,
            host=rec.get("host") or HOST,
            port=port,
            instance_type=rec.get("instance_type", ""),
            region="local",
            launched_at=rec.get("launched_at"),
            expires_at=rec.get("expires_at"),
            tags=dict(rec.get("tags", {})),
            pid=rec.get("pid"),
            pgid=rec.get("pgid"),
            log=rec.get("log"),
            config=rec.get("config"),
            mode=rec.get("mode"),
            owner=rec.get("owner"),
            power_csv=rec.get("power_csv"),
            emulated=True,
        )

    # Provider interface --------------------------------------------------------
    def create(
        self, target: Target, run_id: str, *, tags: Mapping[str, str], spec: LaunchSpec | Mapping[str, Any]
    ) -> Instance:
        iid = instance_id(run_id, target.slug)
        with self._lock(iid):
            rec = self._read(iid)
            seen = self._seen(rec) if rec and rec.get("state") != "terminated" else False
            if seen is None:
                assert rec is not None
                raise ProviderError(
                    f"local node {iid} (owned by {rec.get('owner')}, at {rec.get('host')}) cannot be seen from "
                    f"{_owner()}: not starting a second one; retry once its host answers"
                )
            if rec and seen:
                return self._instance(rec)
            return self._instance(self._launch(iid, target, run_id, dict(tags), LaunchSpec.of(spec)))

    def _launch(self, iid: str, target: Target, run_id: str, tags: dict[str, str], spec: LaunchSpec) -> dict[str, Any]:
        mode, api_key, expires_at = spec.mode, spec.api_key, spec.expires_at
        host = node_address()
        if not api_key and not is_loopback(host):
            raise ProviderError(
                f"targets.{target.name}: an emulated node on {host} (not loopback) must require the run's API key, "
                "and this launch has none; unset BAKEOFF_NODE_ADDRESS to serve it on 127.0.0.1"
            )
        workdir = _root() / iid
        workdir.mkdir(parents=True, exist_ok=True)
        config_path, port_file, log_path = workdir / "config.json", workdir / "port", workdir / "emulator.log"
        port_file.unlink(missing_ok=True)
        config = {
            "mode": mode,
            "target": target.model_dump(mode="json"),
            "served_model": target.served_model_id,
            "api_key_env": API_KEY_ENV if api_key else None,
            "expires_at": expires_at,
            "stop_key_env": STOP_KEY_ENV,
        }
        if (
            mode == "roofline"
        ):  # EMULATED energy counters through the emulated NVML/amdsmi, as a node's agent reads them
            config["power_csv"] = str(workdir / "power.csv")
        if spec.scripted is not None:
            config["scripted"] = dict(spec.scripted)
        _write_json(config_path, config)
        env = {k: v for k, v in os.environ.items() if k not in (API_KEY_ENV, STOP_KEY_ENV)}
        env[STOP_KEY_ENV] = stop_key(iid)
        if api_key:
            env[API_KEY_ENV] = api_key
        address = ["-m", EMULATOR_MODULE, "--host", host, "--port", "0"]
        if target.custom is not None:  # a custom stack: its template, rendered as a cloud node renders it
            address = engines.command(target, 0, host)
            if address[:2] != ["-m", EMULATOR_MODULE] or len(address) != 6:
                raise ProviderError(
                    f"targets.{target.name}.custom.command: the local provider starts only the emulator with "
                    "--host {host} --port {port}; a container image runs on a cloud target"
                )
        cmd = [self.python, *address, "--config", str(config_path), "--port-file", str(port_file)]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        _children[proc.pid] = proc
        all_tags = {**tags, TAG_RUN: run_id, TAG_TARGET: target.slug}
        if expires_at is not None:
            all_tags[TAG_EXPIRES] = str(int(expires_at))
        rec = {
            "id": iid,
            "run_id": run_id,
            "target": target.slug,
            "instance_type": target.instance_type,
            "pid": proc.pid,
            "pgid": proc.pid,
            "owner": _owner(),
            "host": host,
            "port": None,
            "port_file": str(port_file),
            "config": str(config_path),
            "log": str(log_path),
            "mode": mode,
            "power_csv": config.get("power_csv"),
            "health_route": engines.routes(target).health,
            "tags": all_tags,
            "launched_at": time.time(),
            "expires_at": expires_at,
            "state": "running",
        }
        _write_json(self._record_path(iid), rec)
        return rec

    def check_ready(self, instance: Instance) -> Instance | None:
        rec = self._read(instance.id)
        if rec is None:
            raise ProviderError(f"local instance {instance.id} is unknown; create it first")
        if self._here(rec) and not self._alive(rec):
            raise ProviderError(
                f"emulator {instance.id} exited before it was ready; its log {rec['log']} ends:\n"
                + _tail(Path(rec["log"]))
            )
        port = self._port(rec)
        if not port:
            return None
        try:
            if (
                httpx.get(
                    f"http://{url_host(rec.get('host') or HOST)}:{port}{rec.get('health_route') or '/health'}",
                    timeout=2.0,
                ).status_code
                != 200
            ):
                return None
        except httpx.HTTPError:
            return None
        if rec.get("port") != port:
            with self._lock(instance.id):
                rec = self._read(instance.id) or rec
                rec["port"] = port
                _write_json(self._record_path(instance.id), rec)
        return self._instance(rec, "running")

    def describe(self, instance_id: str) -> Instance | None:
        rec = self._read(instance_id)
        return self._instance(rec) if rec else None

    def terminate(self, instance_id: str) -> bool:
        """Stop the node and observe it gone: True when this call stopped it, False when it was gone
        already; a ProviderError naming it when its absence cannot be observed from here."""
        with self._lock(instance_id):
            rec = self._read(instance_id)
            if rec is None:
                return False
            if self._here(rec):
                killed = self._alive(rec) and self._kill_group(rec["pid"], rec["pgid"])
                if self._alive(rec):
                    raise ProviderError(f"local node {instance_id}: pid {rec['pid']} still runs after SIGKILL")
            else:
                killed = self._stop_remote(instance_id, rec)
            rec["state"] = "terminated"
            rec["terminated_at"] = time.time()
            _write_json(self._record_path(instance_id), rec)
            return killed

    def _stop_remote(self, iid: str, rec: dict[str, Any]) -> bool:
        """Ask the node's stop route (it runs on another host), then wait for its port to refuse."""
        where = f"local node {iid} (owned by {rec.get('owner')}, at {rec.get('host')}:{self._port(rec)})"
        seen = self._seen(rec)
        if seen is False:
            return False
        if seen is None:
            raise ProviderError(f"{where}: cannot be seen from {_owner()}, so it is not known to be gone; retry")
        url = f"http://{url_host(rec.get('host') or HOST)}:{self._port(rec)}/_bakeoff/stop"
        try:
            r = httpx.post(url, headers={"Authorization": f"Bearer {stop_key(iid)}"}, timeout=5.0)
        except httpx.HTTPError as e:
            raise ProviderError(f"{where}: its stop route did not answer ({type(e).__name__}); retry") from None
        if r.status_code != 202:
            raise ProviderError(
                f"{where}: its stop route answered {r.status_code}, not 202 (another installation's node, or the "
                "installation secret differs between workers: give every worker the same BAKEOFF_SECRET_KEY)"
            )
        deadline = time.monotonic() + self.grace_s + 5.0
        while (seen := self._seen(rec)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if seen is not False:
            raise ProviderError(f"{where}: still {'listening' if seen else 'unseen'} after its stop; retry")
        return True

    def _kill_group(self, pid: int, pgid: int) -> bool:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and _running(pid):
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)  # stragglers, or a leader that ignored SIGTERM
        child = _children.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=2)
        return True

    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        out = []
        for path in sorted(_registry_dir().glob("local-*.json")) if _registry_dir().is_dir() else []:
            rec = self._read(path.stem)
            if not rec or rec.get("state") == "terminated":
                continue
            if run_id is not None and rec.get("run_id") != run_id:
                continue
            inst = self._instance(rec)
            if inst.state != "terminated":  # one that cannot be seen is listed: only its teardown may say it is gone
                out.append(inst)
        return out


def _running(pid: int) -> bool:
    """True while pid exists and is not a zombie; reaps it if it is our child."""
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
