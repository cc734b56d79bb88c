"""Node rehearsal: the boot script a cloud launch sends, run under cloud-init on a real Debian with its own Docker.

``make node-rehearsal`` (or ``python benchmarks/node_rehearsal.py --cloud vultr --engine vllm``) renders the
user-data that ``serving/userdata.py`` sends for a real target of a shipped plan and boots it the way a cloud
image does: a Debian bookworm root filesystem built here with debootstrap (systemd, cloud-init and docker.io
from Debian's archive; Ubuntu's archive is not reachable from here, so the image is Debian's, not the clouds'
Ubuntu) runs as a privileged container with systemd as PID 1, and cloud-init reads the user-data from a
NoCloud seed (``/var/lib/cloud/seed/nocloud``: meta-data + user-data). The node's own dockerd pulls the
engine image and runs the engine with the script's own ``docker run``.

The matrix (``CASES``): every cloud (EC2, OCI, Vultr, DigitalOcean) with vLLM, one Vultr node from a bare
image (no Docker: the script installs Debian's docker.io under cloud-init, its time in the table), and the
other engine families the recipes use (SGLang, ATOM, TensorRT-LLM) on OCI; the nodes boot side by side.

What is outside a node is stood in for locally, each a real server on a container network this run makes:

- the image registry: Debian's ``docker-registry`` over TLS, answering as ``registry-1.docker.io``, ``ghcr.io``
  and ``nvcr.io`` (the node's /etc/hosts maps the names to it) with a CA the node trusts; it holds STAND-IN
  engine images built here (node_rehearsal_engines.py): bakeoff's emulator behind each engine's real
  entrypoint name and argv, and a stand-in agent image for the front of the engines that have no key check;
- the GPU: STAND-IN device nodes (/dev/kfd, /dev/dri) and a STAND-IN ``amd-smi`` / ``nvidia-smi`` plus the
  ``nvidia-container-runtime-hook`` that docker's ``--gpus`` calls, so the script's GPU flags are accepted;
- the weights: the node's cache is pre-seeded with a STAND-IN checkpoint (tokenizer and one shard), so the
  boot script's weights step verifies it and takes the cache path. The hub path and the node agent need the
  client bundle and the agent's own packages, not rehearsed here, so the rehearsed targets carry no client
  bundle and no serving secrets.

The harness then checks from the host, across that network, what a real first run depends on, and prints one
table (cloud x engine x step, seconds, pass/fail); it exits non-zero when any cell fails. A failing step's
detail is the node's console classified as readiness classifies it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

import node_rehearsal_engines as rehearsal_engines  # noqa: E402
import node_rehearsal_hub as rehearsal_hub  # noqa: E402

from bakeoff import catalog  # noqa: E402
from bakeoff import plan as plan_mod  # noqa: E402
from bakeoff.core import pinning  # noqa: E402
from bakeoff.plan.target import Target  # noqa: E402
from bakeoff.serving import readiness, tls, userdata  # noqa: E402

VAR = ROOT / "var" / "node-rehearsal"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3-cffi-backend by name: debootstrap does not resolve the virtual package python3-cryptography needs
NODE_PACKAGES = ",".join(
    "python3-cffi-backend locales systemd systemd-sysv dbus cloud-init docker.io iptables curl ca-certificates "
    "python3 iproute2 procps kmod".split()
)
NODE_IMAGE = "bakeoff-rehearsal/node:bookworm"
ENGINE_BASE = "bakeoff-rehearsal/engine-base:bookworm"
NETWORK = "bakeoff-rehearsal"
SUBNET, GATEWAY = "10.213.77.0/24", "10.213.77.1"
# the registries the shipped images name: Docker Hub's images are pulled from registry-1.docker.io
REGISTRY_NAMES = ("registry-1.docker.io", "ghcr.io", "nvcr.io")


@dataclass(frozen=True)
class Case:
    """One node of the matrix: a shipped plan's target (or a recipe on a plan's cloud), on a node image
    with Docker or a bare one. ``derive`` changes the target where no shipped plan has the row."""

    cloud: str
    engine: str
    plan: str
    target: str
    derive: tuple[tuple[str, Any], ...] = ()
    bare: bool = False

    @property
    def label(self) -> str:
        return self.engine + ("/bare-image" if self.bare else "")

    @property
    def slug(self) -> str:
        return f"{self.cloud}-{self.engine}" + ("-bare" if self.bare else "")


BARE_EXTRA_MINUTES = 4  # Debian's docker.io from the archive under cloud-init, on a loaded 2-core host
_DO = (
    ("provider", "digitalocean"),
    ("instance_type", "gpu-mi300x8-1536gb"),
    ("name", "mi300x-vllm"),
    ("provider_options", {"regions": ["atl1"]}),
)
# every cloud with vLLM (the engine every cloud plan ships), one node from a bare image, and every other engine
# family the recipes use on one cloud (OCI: the only cloud with both an MI355X and a B200 shape, and the
# glm52-claim-check plan's SGLang targets), so each family's rendered docker run runs once: 8 nodes at once
CASES = (
    Case("aws", "vllm", "mi355x-vs-b200", "b200-vllm"),
    Case("oci", "vllm", "mi355x-vs-b200-oci", "b200-vllm"),
    Case("vultr", "vllm", "mi355x-vs-b200", "mi355x-vllm"),
    # no shipped plan has a DigitalOcean target: Vultr's MI355X target on DigitalOcean's MI300X droplet
    Case("digitalocean", "vllm", "mi355x-vs-b200", "mi355x-vllm", _DO),
    # Vultr's default image (plain Ubuntu) has no Docker: the boot script installs it
    Case("vultr", "vllm", "mi355x-vs-b200", "mi355x-vllm", bare=True),
    Case("oci", "sglang", "glm52-claim-check", "mi355x-sglang"),
    Case("oci", "atom", "mi355x-vs-b200-oci", "dsv4-fp4-mi355x-atom", (("instance_type", "BM.GPU.MI355X.8"),)),
    Case("oci", "trtllm", "mi355x-vs-b200-oci", "dsv4-fp4-b200-trtllm", (("instance_type", "BM.GPU.B200.8"),)),
)
SCAN_PORTS = (22, 80, 443, 2375, 2376, 5000, 8000, 8001, 8080, 8443, 8888, 9000, 9100)
STAND_INS = (
    "GPU: stand-in device nodes /dev/kfd, /dev/dri/renderD128 (AMD, made before cloud-init), "
    "nvidia-container-runtime and its hook (NVIDIA; no GPU attached)",
    "GPU tools: stand-in amd-smi / nvidia-smi printing fixed values, marked STAND-IN",
    "engines: stand-in images under the real names: bakeoff's emulator behind each family's real entrypoint "
    "(vllm, python3 -m sglang.launch_server, python3 -m atom.entrypoints.openai_server, mpirun trtllm-serve)",
    "agent image (the weights downloader; the front of ATOM and TensorRT-LLM): a stand-in under "
    "python:3.11-slim-bookworm, pinned to the stand-in's digest (a published digest names another image)",
    "registry: Debian's docker-registry over TLS answering as registry-1.docker.io, ghcr.io, nvcr.io (local CA)",
    "hub: a stand-in huggingface.co over TLS (local CA) serving a small stand-in checkpoint in the hub's API "
    "shape; the node's cache starts empty, so bakeoff's downloader fetches it (node agent not rehearsed)",
    "bare image: the node image less docker.io (purged, apt cache emptied): the boot script installs it "
    "from Debian's archive",
    "OS: Debian bookworm (debootstrap), not the clouds' Ubuntu images (Ubuntu's archive is unreachable here)",
)


@dataclass
class Cell:
    cloud: str
    engine: str
    step: str
    seconds: float
    ok: bool
    detail: str = ""


@dataclass
class Rehearsal:
    cloud: str
    engine: str
    cells: list[Cell] = field(default_factory=list)

    def step(self, name: str, fn: Callable[[], tuple[bool, str]]) -> bool:
        t0 = time.monotonic()
        try:
            ok, detail = fn()
        except Exception as e:  # noqa: BLE001 - a step's own failure is a failed cell, named
            ok, detail = False, f"{type(e).__name__}: {e}"
        self.cells.append(Cell(self.cloud, self.engine, name, time.monotonic() - t0, ok, detail))
        print(f"  {self.cloud}/{self.engine} {'ok  ' if ok else 'FAIL'} {name}: {detail[:300]}", flush=True)
        return ok


def sh(*argv: str, check: bool = True, timeout: float = 600, input_: bytes | None = None) -> str:
    r = subprocess.run(argv, capture_output=True, timeout=timeout, input=input_, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}...: exit {r.returncode}: {r.stderr.decode()[-600:]}")
    return r.stdout.decode(errors="replace")


def image_exists(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True, check=False).returncode == 0


# ---------------------------------------------------------------- the OS: debootstrap, cached under var/


def debootstrap(name: str, include: str) -> Path:
    """A Debian root filesystem, built once and cached (var/node-rehearsal/<name>)."""
    dest = VAR / name
    if dest.is_dir():
        return dest
    tmp = VAR / f"{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"debootstrap {SUITE} {name} (once; cached under var/node-rehearsal)", flush=True)
    sh("debootstrap", "--variant=minbase", f"--include={include}", SUITE, str(tmp), MIRROR, timeout=1800)
    tmp.rename(dest)
    return dest


def docker_import(build: Callable[[], Path], name: str) -> None:
    """The root filesystem as a base image; debootstrap runs only when the daemon lacks the image."""
    if image_exists(name):
        return
    rootfs = build()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["docker", "import", "-", name], stdin=tar.stdout, check=True, capture_output=True)
    tar.wait()


NODE_DOCKERFILE = """FROM {base}
# cloud-init reads only the NoCloud seed, as a cloud image reads its own datasource; the container's
# network is docker's (no renderer to configure it)
RUN printf 'datasource_list: [NoCloud, None]\\nnetwork: {{config: disabled}}\\n' \\
      > /etc/cloud/cloud.cfg.d/90-rehearsal.cfg \\
 && systemctl mask getty@tty1.service console-getty.service >/dev/null 2>&1; \\
    systemctl enable docker.service cloud-init-local.service cloud-init.service cloud-config.service \\
      cloud-final.service >/dev/null 2>&1; true
# the clouds' images ship their default locale generated (cloud-init's locale module sets it)
RUN sed -i 's/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/' /etc/locale.gen && locale-gen >/dev/null
COPY ca.crt /usr/local/share/ca-certificates/bakeoff-rehearsal-ca.crt
RUN update-ca-certificates >/dev/null
COPY stand-ins/ /usr/local/bin/
COPY stand-in-gpu-devices.service /etc/systemd/system/
RUN systemctl enable stand-in-gpu-devices.service >/dev/null 2>&1
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""

# the GPU tools the boot script calls, as stand-ins (a real node has the vendor's)
AMD_SMI = """#!/bin/sh
# STAND-IN amd-smi (bakeoff node rehearsal): fixed values, no GPU here
case "$1" in
  metric) echo '[{"gpu": 0, "power": {"socket_power": {"value": 0, "unit": "W"}}}]' ;;
  version) echo '{"amd-smi": "STAND-IN", "rocm_version": "STAND-IN"}' ;;
  *) echo '[{"gpu": 0, "asic": {"market_name": "STAND-IN (no GPU)"}, "driver": {"version": "STAND-IN"}}]' ;;
esac
"""
NVIDIA_SMI = """#!/bin/sh
# STAND-IN nvidia-smi (bakeoff node rehearsal): fixed values, no GPU here
case "$*" in
  *power.draw*) echo "0, 0.00" ;;
  *name,driver*) echo "STAND-IN (no GPU), STAND-IN, STAND-IN" ;;
  *) echo "| NVIDIA-SMI STAND-IN   Driver Version: STAND-IN   CUDA Version: 0.0 |" ;;
esac
"""
# docker's --gpus adds this binary as an OCI prestart hook; the stand-in does nothing (no GPU to attach)
NVIDIA_HOOK = "#!/bin/sh\n# STAND-IN nvidia-container-runtime-hook (bakeoff node rehearsal): no GPU to attach\nexit 0\n"
# the toolkit's runtime, which the boot script's image check looks for: a stand-in that is plain runc
NVIDIA_RUNTIME = '#!/bin/sh\n# STAND-IN nvidia-container-runtime (bakeoff node rehearsal): plain runc\nexec runc "$@"\n'
# the AMD driver's device nodes, made before cloud-init as a loaded driver has them (stand-ins: /dev/null's)
AMD_DEVICES_UNIT = """[Unit]
Description=STAND-IN AMD GPU device nodes (bakeoff node rehearsal; no GPU here)
DefaultDependencies=no
Before=cloud-init-local.service sysinit.target

[Service]
Type=oneshot
ExecStart=/bin/sh -c '[ -e /dev/kfd ] || mknod -m 666 /dev/kfd c 1 3; mkdir -p /dev/dri; \\
  [ -e /dev/dri/renderD128 ] || mknod -m 666 /dev/dri/renderD128 c 1 3'

[Install]
WantedBy=sysinit.target
"""


def build_node_image(ca_crt: Path) -> str:
    recipe = ca_crt.read_bytes() + (NODE_DOCKERFILE + AMD_SMI + NVIDIA_SMI + NVIDIA_HOOK + NVIDIA_RUNTIME).encode()
    recipe += AMD_DEVICES_UNIT.encode()
    name = f"{NODE_IMAGE}-{_short_hash(recipe)}"  # rebuilt when the CA or the recipe changes
    if image_exists(name):
        return name
    docker_import(lambda: debootstrap("rootfs", NODE_PACKAGES), NODE_IMAGE)
    with tempfile.TemporaryDirectory() as d:
        ctx = Path(d)
        (ctx / "Dockerfile").write_text(NODE_DOCKERFILE.format(base=NODE_IMAGE))
        shutil.copy(ca_crt, ctx / "ca.crt")
        tools = ctx / "stand-ins"
        tools.mkdir()
        (ctx / "stand-in-gpu-devices.service").write_text(AMD_DEVICES_UNIT)
        for n, text in (
            ("amd-smi", AMD_SMI),
            ("nvidia-smi", NVIDIA_SMI),
            ("nvidia-container-runtime-hook", NVIDIA_HOOK),
            ("nvidia-container-runtime", NVIDIA_RUNTIME),
        ):
            (tools / n).write_text(text)
            (tools / n).chmod(0o755)
        sh("docker", "build", "-q", "-t", name, str(ctx), timeout=900)
    return name


BARE_DOCKERFILE = """FROM {base}
# a bare cloud image: no container engine (Vultr's default os_id is plain Ubuntu); nothing of docker.io cached
RUN apt-get purge -y -qq docker.io containerd runc tini >/dev/null && apt-get autoremove -y -qq >/dev/null \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/lib/docker && ! command -v docker
"""


def build_bare_image(node_image: str) -> str:
    """The node image less Docker, so the boot script's install path runs under cloud-init."""
    name = f"{node_image}-bare"
    if not image_exists(name):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "Dockerfile").write_text(BARE_DOCKERFILE.format(base=node_image))
            sh("docker", "build", "-q", "-t", name, d, timeout=900)
    return name


def _short_hash(b: bytes) -> str:
    import hashlib  # noqa: PLC0415

    return hashlib.sha256(b).hexdigest()[:12]


# ---------------------------------------------------------------- stand-ins around the node


def make_ca(d: Path) -> tuple[Path, Path, Path]:
    """A CA, the registry's certificate for its real names (and the gateway IP, for the host's push) and the
    hub stand-in's for huggingface.co; issued again when the names change."""
    ca_key, ca_crt = d / "ca.key", d / "ca.crt"
    key, crt = d / "registry.key", d / "registry.crt"
    san = ",".join([*(f"DNS:{n}" for n in REGISTRY_NAMES), f"IP:{GATEWAY}"])
    if crt.exists() and (d / "hub.crt").exists() and (d / "ext.cnf").read_text() == f"subjectAltName={san}\n":
        return ca_crt, crt, key
    d.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    sh(
        "openssl",
        "req",
        "-x509",
        *ec,
        "-days",
        "30",
        "-subj",
        "/CN=bakeoff rehearsal CA",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_crt),
    )
    for stem, names in (("registry", san), ("hub", f"DNS:{rehearsal_hub.NAME}")):
        sh(
            "openssl",
            "req",
            *ec,
            "-subj",
            f"/CN={names.split(',')[0][4:]}",
            "-keyout",
            str(d / f"{stem}.key"),
            "-out",
            str(d / f"{stem}.csr"),
        )
        (d / f"{stem}.cnf").write_text(f"subjectAltName={names}\n")
        sh(
            "openssl",
            "x509",
            "-req",
            "-in",
            str(d / f"{stem}.csr"),
            "-CA",
            str(ca_crt),
            "-CAkey",
            str(ca_key),
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            str(d / f"{stem}.cnf"),
            "-out",
            str(d / f"{stem}.crt"),
        )
    (d / "ext.cnf").write_text(f"subjectAltName={san}\n")
    return ca_crt, crt, key


# runc, minus the capabilities this host's own bounding set lacks: docker's --privileged asks for every one
# it knows, and runc refuses to start a container when one is missing (a host that is itself confined)
RUNTIME = "bakeoff-rehearsal"
RUNC_WRAPPER = """#!/usr/bin/python3
import json, os, sys
CAPS = ("CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
        "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT "
        "SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE "
        "AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ "
        "PERFMON BPF CHECKPOINT_RESTORE").split()
args = sys.argv[1:]
if "create" in args or "run" in args:  # the container's spec
    path = os.path.join(args[args.index("--bundle") + 1] if "--bundle" in args else ".", "config.json")
elif "exec" in args and "--process" in args:  # a process docker exec starts in it
    path = args[args.index("--process") + 1]
else:
    path = None
if path:
    conf = json.load(open(path))
    bnd = int(open("/proc/self/status").read().split("CapBnd:")[1].split()[0], 16)
    have = {"CAP_" + n for i, n in enumerate(CAPS) if bnd >> i & 1}
    caps = (conf["process"] if "process" in conf else conf).get("capabilities") or {}
    for k, v in caps.items():
        caps[k] = [c for c in v if c in have]
    json.dump(conf, open(path, "w"))
os.execv("/usr/sbin/runc", ["runc", *args])
"""


# the wrapper lives where the daemon's configuration outlives any checkout: registered from a checkout's var/,
# it broke every later rehearsal once that checkout was cleaned or deleted (runc: "fork/exec ...: no such file")
RUNTIME_PATH = Path("/usr/local/libexec/bakeoff-rehearsal/runc")


def ensure_runtime() -> str | None:
    """The runtime a privileged node needs on this host: None when runc grants --privileged as it is.
    The wrapper is (re)written at a fixed host path and the daemon's registration is made to name it."""
    bnd = int(Path("/proc/self/status").read_text().split("CapBnd:")[1].split()[0], 16)
    if all(bnd >> i & 1 for i in range(41)):
        return None
    RUNTIME_PATH.parent.mkdir(parents=True, exist_ok=True)
    if not RUNTIME_PATH.exists() or RUNTIME_PATH.read_text() != RUNC_WRAPPER:
        tmp = RUNTIME_PATH.with_suffix(".tmp")
        tmp.write_text(RUNC_WRAPPER)
        tmp.chmod(0o755)
        tmp.rename(RUNTIME_PATH)  # atomic: a node starting now never execs half a file
    want = {"path": str(RUNTIME_PATH)}
    if json.loads(sh("docker", "info", "-f", "{{json .Runtimes}}")).get(RUNTIME, {}).get("path") == want["path"]:
        return RUNTIME
    conf_path = Path("/etc/docker/daemon.json")
    conf = json.loads(conf_path.read_text()) if conf_path.exists() else {}
    conf.setdefault("runtimes", {})[RUNTIME] = want
    conf_path.write_text(json.dumps(conf, indent=2))
    os.kill(int(Path("/var/run/docker.pid").read_text()), signal.SIGHUP)  # the daemon reloads its runtimes
    for _ in range(20):
        if json.loads(sh("docker", "info", "-f", "{{json .Runtimes}}")).get(RUNTIME, {}).get("path") == want["path"]:
            return RUNTIME
        time.sleep(0.5)
    raise RuntimeError(f"dockerd did not take the {RUNTIME} runtime from {conf_path}")


def ensure_network() -> None:
    if subprocess.run(["docker", "network", "inspect", NETWORK], capture_output=True, check=False).returncode:
        sh("docker", "network", "create", "--subnet", SUBNET, "--gateway", GATEWAY, NETWORK)


def start_registry(d: Path, crt: Path, key: Path) -> subprocess.Popen[bytes]:
    """Debian's docker-registry on the network's gateway, port 443, over TLS."""
    (d / "storage").mkdir(parents=True, exist_ok=True)
    cfg = d / "registry.yml"
    cfg.write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {d / 'storage'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '{GATEWAY}:443', tls: {{certificate: {crt}, key: {key}}}}}\n"
    )
    held = _listener(GATEWAY, 443)
    if held:  # a registry left by a killed run answers with another CA: say whose it is, do not guess
        raise RuntimeError(f"{GATEWAY}:443 is already held by {held}; stop it and rerun")
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(cfg)],
        stdout=open(d / "registry.log", "ab"),
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,  # a harness killed on a timeout takes its registry with it
    )
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    for _ in range(60):
        if proc.poll() is not None:
            raise RuntimeError(f"the registry stand-in exited {proc.returncode} (see {d / 'registry.log'})")
        try:
            c = http.client.HTTPSConnection(GATEWAY, 443, context=ctx, timeout=2)
            c.request("GET", "/v2/")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"the registry stand-in did not answer on {GATEWAY}:443 (see {d / 'registry.log'})")


def _listener(ip: str, port: int) -> str:
    """The process listening on ip:port, as ss names it ('' when none)."""
    out = sh("ss", "-Hltnp", "src", f"{ip}:{port}", check=False)
    return out.split()[-1] if out.strip() else ""


def _die_with_parent() -> None:
    import ctypes  # noqa: PLC0415

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# the emulator's imports (python -m bakeoff.serving.emulator), copied from this venv into the stand-in image
EMULATOR_MODULES = (
    "aiohappyeyeballs",
    "aiohttp",
    "aiosignal",
    "annotated_types",
    "attr",
    "attrs",
    "frozenlist",
    "httptools",
    "idna",
    "multidict",
    "numpy",
    "numpy.libs",
    "prometheus_client",
    "propcache",
    "pydantic",
    "pydantic_core",
    "typing_extensions.py",
    "typing_inspection",
    "yaml",
    "_yaml",
    "yarl",
)
ENGINE_DOCKERFILE = """FROM {base}
COPY site/ /opt/stand-in/site/
COPY stand_in.py config.json /opt/stand-in/
COPY bin/ /usr/local/bin/
ENV PYTHONPATH=/opt/stand-in/site
LABEL org.bakeoff.stand-in="bakeoff's emulator behind {family}'s entrypoint (node rehearsal)"
"""


def build_engine_image(target: Target, summary: dict[str, Any]) -> str:
    """The stand-in engine image, built locally under a local name (pushed under the real one)."""
    family = target.stack
    if family not in rehearsal_engines.ENTRYPOINTS:
        raise NotImplementedError(f"no stand-in for the {family} engine")
    docker_import(lambda: debootstrap("engine-base", "python3"), ENGINE_BASE)
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    with tempfile.TemporaryDirectory() as d:
        ctx = Path(d)
        (ctx / "site").mkdir()
        (ctx / "bin").mkdir()
        for m in EMULATOR_MODULES:
            src = site / m
            if src.is_dir():
                shutil.copytree(src, ctx / "site" / m, ignore=shutil.ignore_patterns("tests", "__pycache__"))
            elif src.exists():
                shutil.copy(src, ctx / "site" / m)
        shutil.copytree(
            ROOT / "include" / "bakeoff", ctx / "site" / "bakeoff", ignore=shutil.ignore_patterns("__pycache__")
        )
        cfg = {
            "mode": "roofline",
            "target": summary["target"],
            "api_key_env": "BAKEOFF_STAND_IN_KEY",  # set by the stand-in from where the engine reads its key
            "expires_at": time.time() + 3600,
        }
        (ctx / "config.json").write_text(json.dumps(cfg))
        (ctx / "stand_in.py").write_text(rehearsal_engines.STAND_IN)
        for path, text in rehearsal_engines.ENTRYPOINTS[family].items():
            rel = path.removeprefix("/opt/stand-in/") if path.startswith("/opt/stand-in/") else None
            dest = ctx / rel if rel else ctx / "bin" / Path(path).name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            dest.chmod(0o755)
        (ctx / "Dockerfile").write_text(ENGINE_DOCKERFILE.format(base=ENGINE_BASE, family=family))
        local = f"bakeoff-rehearsal/engine-{target.provider}-{target.slug}:latest"
        sh("docker", "build", "-q", "-t", local, str(ctx), timeout=900)
    return local


AGENT_DOCKERFILE = """FROM {base}
# python:3.11-slim's own name for its interpreter (the front runs `python front.py`)
RUN ln -s /usr/bin/python3 /usr/local/bin/python
# python:3.11-slim trusts the public CAs; the stand-in, the rehearsal's (the hub stand-in's certificate)
COPY ca.crt /etc/ssl/rehearsal-ca.pem
ENV SSL_CERT_FILE=/etc/ssl/rehearsal-ca.pem
LABEL org.bakeoff.stand-in="the agent image's stand-in (node rehearsal): Debian's python3"
"""


def stand_in_agent_image(ca_crt: Path) -> str:
    """The agent image (the front runs in it) as a stand-in under its real name; the reference the
    rehearsal renders, pinned to the stand-in's digest (the published digest names another image)."""
    docker_import(lambda: debootstrap("engine-base", "python3"), ENGINE_BASE)
    real = catalog.agent_image().split("@", 1)[0]
    local = "bakeoff-rehearsal/agent:latest"
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "Dockerfile").write_text(AGENT_DOCKERFILE.format(base=ENGINE_BASE))
        shutil.copy(ca_crt, Path(d) / "ca.crt")
        sh("docker", "build", "-q", "-t", local, d, timeout=900)
    return f"{real}@{push_under_real_name(local, real, ca_crt)}"


def push_under_real_name(local: str, real: str, ca_crt: Path) -> str:
    """Push the stand-in to the registry under the image's real repository and tag; its digest."""
    repo_tag = real.split("/", 1)[1] if real.count("/") >= 2 else real  # docker.io/<repo>:<tag> -> <repo>:<tag>
    if "/" not in repo_tag:
        repo_tag = f"library/{repo_tag}"  # Docker Hub's official images (python:3.11 is library/python)
    certs = Path("/etc/docker/certs.d") / GATEWAY  # only this address: the host's docker.io is untouched
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copy(ca_crt, certs / "ca.crt")
    push = f"{GATEWAY}/{repo_tag}"
    sh("docker", "tag", local, push)
    out = sh("docker", "push", push, timeout=900)
    m = re.search(r"digest: (sha256:[0-9a-f]{64})", out)
    if not m:
        raise RuntimeError(f"no digest in the push output: {out[-300:]}")
    return m.group(1)


# ---------------------------------------------------------------- the node


def render_user_data(target: Target, kill_after_s: float) -> tuple[str, str, tls.NodeTLS]:
    ident = tls.stand_in_identity(target.slug)
    api_key = "bk-" + os.urandom(20).hex()
    script = userdata.render(
        target,
        api_key=api_key,
        shutdown_after_s=kill_after_s,
        ingress_cidr=f"{GATEWAY}/32",  # the plan says: your workers' address; here, the host on this network
        tls={"cert": ident.cert_pem, "key": ident.key_pem},
        max_bytes=userdata.max_bytes_for(target.provider),
    )
    return script, api_key, ident


HUB_CONTAINER = "bakeoff-rehearsal-hub"


def start_hub(certs: Path, repos: set[str]) -> None:
    """The hub stand-in: a container on the rehearsal's network answering as huggingface.co over TLS."""
    root = VAR / "hub"
    shutil.rmtree(root, ignore_errors=True)
    rehearsal_hub.write_tree(root, repos)
    subprocess.run(["docker", "rm", "-f", HUB_CONTAINER], capture_output=True, check=False)
    sh(
        "docker",
        "run",
        "-d",
        "--name",
        HUB_CONTAINER,
        "--network",
        NETWORK,
        "--ip",
        rehearsal_hub.IP,
        "-v",
        f"{root}:/srv/hub:ro",
        "-v",
        f"{certs}:/srv/pki:ro",
        ENGINE_BASE,
        "python3",
        "/srv/hub/server.py",
        "/srv/pki/hub.crt",
        "/srv/pki/hub.key",
    )
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    ctx.check_hostname = False  # reached by address from the host; the nodes reach it by name
    for _ in range(60):
        try:
            c = http.client.HTTPSConnection(rehearsal_hub.IP, 443, context=ctx, timeout=2)
            c.request("GET", "/api/models/none/revision/main")
            c.getresponse()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the hub stand-in did not answer: {sh('docker', 'logs', HUB_CONTAINER, check=False)[-300:]}")


def node_name(case: Case) -> str:
    return f"bakeoff-rehearsal-{case.slug}"


def node_ip(case: Case) -> str:
    return f"10.213.77.{10 + CASES.index(case)}"


def boot_node(case: Case, image: str, seed: Path, cache: Path, cache_dir: str, runtime: str | None) -> str:
    name = node_name(case)
    subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, check=False)
    argv = [
        "docker",
        "run",
        "-d",
        "--name",
        name,
        "--hostname",
        f"{case.cloud}-node",
        "--privileged",
        *(["--runtime", runtime] if runtime else []),
        "--network",
        NETWORK,
        "--ip",
        node_ip(case),
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/run/lock",
        "-v",
        "/var/lib/docker",  # the node's own docker storage (a volume: overlay2 on the host's disk)
        "-v",
        f"{seed}:/var/lib/cloud/seed/nocloud:ro",
        "-v",
        f"{cache}:{cache_dir}",
        *(a for n in REGISTRY_NAMES for a in ("--add-host", f"{n}:{GATEWAY}")),  # the node's /etc/hosts
        "--add-host",
        f"{rehearsal_hub.NAME}:{rehearsal_hub.IP}",
        image,
    ]
    sh(*argv)
    return name


def node_sh(name: str, cmd: str, timeout: float = 120) -> str:
    """A command's output on the node; '' when it did not finish in time (a loaded host: the caller retries)."""
    try:
        return sh("docker", "exec", name, "sh", "-c", cmd, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ""


def wait_cloud_init(name: str, budget_s: float) -> tuple[bool, str]:
    """Every cloud-init stage finished, and none with an error: its result file, read directly (what
    ``cloud-init status`` reads, without starting cloud-init's Python under a loaded host)."""
    deadline = time.monotonic() + budget_s
    out = ""
    while time.monotonic() < deadline and not out.strip():
        out = node_sh(name, "cat /run/cloud-init/result.json 2>/dev/null", timeout=60)
        if not out.strip():
            time.sleep(3)
    if not out.strip():
        return False, f"not finished {budget_s:.0f} s after the node started"
    result = json.loads(out)["v1"]
    errors = result.get("errors") or []
    return not errors, f"status: {'error ' + str(errors[:2]) if errors else 'done'}; {result.get('datasource')}"


def boot_log(name: str) -> str:
    return node_sh(name, "cat /var/log/bakeoff/boot.log 2>/dev/null")


def classify(name: str) -> str:
    kind, line = readiness.classify(boot_log(name) + node_sh(name, "tail -n 50 /var/log/bakeoff/serve.log"))
    return f"readiness: {kind}: {line}"


def check_sections(name: str) -> tuple[bool, str]:
    log = boot_log(name)
    want = {
        "boot": r"^bakeoff: boot \d{4}-",
        "provenance": r"^bakeoff-provenance: ",
        "image digest": r"^bakeoff-image-digest: \S+@sha256:[0-9a-f]{64}",
        "weights": r'^bakeoff-weights: \{.*"ok": true',
    }
    missing = [k for k, p in want.items() if not re.search(p, log, re.M)]
    failed = re.findall(r"^bakeoff: .*(?:failed|stopping|never).*$", log, re.M)
    if missing or failed:
        return False, f"missing {missing} {failed[:2]}; {classify(name)}"
    # what the agent hands back: the engine's log (key masked) and the power sampler's rows
    serve = node_sh(name, "grep -c . /var/log/bakeoff/serve.log 2>/dev/null").strip() or "0"
    power = node_sh(name, "grep -c . /var/log/bakeoff/power.csv 2>/dev/null").strip() or "0"
    if serve == "0" or power == "0":
        return False, f"serve.log {serve} lines, power.csv {power} rows; {classify(name)}"
    w = json.loads(re.search(r"^bakeoff-weights: (.*)$", log, re.M).group(1))  # type: ignore[union-attr]
    return True, (
        f"boot, provenance (STAND-IN tools), digest, weights from {w['source']} ({w['files']} files), "
        f"serve.log {serve} lines, power.csv {power} rows"
    )


def check_docker_install(name: str, took: dict[str, float]) -> tuple[bool, str]:
    """The bare image's row: the boot script found no Docker, installed Debian's docker.io and said how long."""
    log = boot_log(name)
    said = re.search(r"^bakeoff: node image .* has no Docker; installing docker.io$", log, re.M)
    took_s = re.search(r"^bakeoff-install: docker (\d+)s$", log, re.M)
    version = node_sh(name, "docker version -f '{{.Server.Version}}' 2>&1").strip()
    if not (said and took_s):
        return False, f"no install line in the boot log (docker: {version}); {classify(name)}"
    took["s"] = float(took_s.group(1))
    return True, f"installed docker.io {version} in {took_s.group(1)} s under cloud-init ({said.group(0)[9:80]}…)"


def check_weights(name: str, repo: str, cache_dir: str) -> tuple[bool, str]:
    """The weights step took the hub path and what landed in the node's cache is what the hub served."""
    line = re.search(r"^bakeoff-weights: (.*)$", boot_log(name), re.M)
    if not line:
        return False, f"no weights line; {classify(name)}"
    w = json.loads(line.group(1))
    folder = f"{cache_dir}/hub/models--{repo.replace('/', '--')}"
    rev = node_sh(name, f"cat {folder}/refs/main").strip()
    got = dict(
        reversed(ln.split()) for ln in node_sh(name, f"cd {folder}/snapshots/{rev} && sha256sum *").splitlines() if ln
    )
    want = rehearsal_hub.digests(repo)
    served = sh("docker", "logs", HUB_CONTAINER, check=False).count(f"/{repo}/resolve/")
    ok = w.get("ok") is True and w.get("source") == "hub" and rev == rehearsal_hub.revision(repo) and got == want
    return ok, (
        f"{repo} from the hub stand-in ({w.get('source')}, {len(got)}/{len(want)} files, SHA-256 "
        f"{'match' if got == want else 'DIFFER'}, revision {rev[:12]}, {float(w.get('download_s') or 0):.1f} s); "
        f"the hub served {served} file requests for it"
    )


def check_image(name: str, real: str, digest: str) -> tuple[bool, str]:
    log = boot_log(name)
    m = re.search(r"^bakeoff-image-digest: (\S+)$", log, re.M)
    got = m.group(1) if m else ""
    repo = real.split(":")[0]
    ok = got == f"{repo}@{digest}"
    return ok, f"pulled {real} over TLS as {got or 'nothing'}" + ("" if ok else f" (pushed {digest})")


def wait_serving(name: str, ip: str, port: int, ident: tls.NodeTLS, api_key: str, budget_s: float) -> tuple[bool, str]:
    deadline = time.monotonic() + budget_s
    last = ""
    while time.monotonic() < deadline:
        try:
            status, _ = request(ip, port, ident, api_key, "GET", "/v1/models")
            if status == 200:
                return True, f"https://{ip}:{port}/v1/models answered 200"
            last = f"HTTP {status}"
        except OSError as e:
            last = str(e)
        time.sleep(2)
    return False, f"{last}; {classify(name)}"


def request(
    ip: str, port: int, ident: tls.NodeTLS | None, api_key: str | None, method: str, path: str, body: Any = None
) -> tuple[int, bytes]:
    ctx = pinning.pinned_context(ident.cert_pem) if ident else ssl.create_default_context()
    c = http.client.HTTPSConnection(ip, port, context=ctx, timeout=30)
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    r = c.getresponse()
    return r.status, r.read()


def check_front(ip: str, port: int, ident: tls.NodeTLS, api_key: str) -> tuple[bool, str]:
    no_key, _ = request(ip, port, ident, None, "GET", "/v1/models")
    wrong, _ = request(ip, port, ident, "bk-wrong-key-0000000000", "GET", "/v1/models")
    try:
        request(ip, port, None, api_key, "GET", "/v1/models")  # the system's CAs: the node's cert is not among them
        unpinned = "accepted"
    except ssl.SSLError:
        unpinned = "refused"
    other = tls.stand_in_identity("someone-else")
    try:
        request(ip, port, other, api_key, "GET", "/v1/models")
        wrong_pin = "accepted"
    except ssl.SSLError:
        wrong_pin = "refused"
    ok = no_key == 401 and wrong == 401 and unpinned == "refused" and wrong_pin == "refused"
    return ok, f"no key {no_key}, wrong key {wrong}, system CAs {unpinned}, another pin {wrong_pin}"


def check_point(ip: str, port: int, ident: tls.NodeTLS, api_key: str, model: str) -> tuple[bool, str]:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
    status, data = request(ip, port, ident, api_key, "POST", "/v1/chat/completions", body)
    if status != 200:
        return False, f"HTTP {status}: {data[:200]!r}"
    usage = json.loads(data).get("usage") or {}
    return bool(usage.get("completion_tokens")), f"chat completion through TLS+key: usage {usage}"


def _open(ip: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.5)
        return s.connect_ex((ip, port)) == 0


def scan(ip: str, ports: tuple[int, ...]) -> list[int]:
    """The ports that accept a connection; side by side (a dropped port costs its whole timeout)."""
    with ThreadPoolExecutor(len(ports)) as pool:
        return [p for p, ok in zip(ports, pool.map(lambda p: _open(ip, p), ports), strict=True) if ok]


def check_firewall(name: str, ip: str, port: int) -> tuple[bool, str]:
    listening = node_sh(name, "ss -Hltn 2>/dev/null | awk '{print $4}'").split()
    ports = tuple(sorted({*SCAN_PORTS, port, *(int(a.rsplit(":", 1)[1]) for a in listening if ":" in a)}))
    from_host = scan(ip, ports)
    # the same scan from another address on the network (not the plan's ingress CIDR)
    probe = (
        "import socket,sys,threading\ndef t(p):\n s=socket.socket(); s.settimeout(1.5)\n"
        f" print(p) if s.connect_ex(('{ip}', int(p)))==0 else None\n"
        "ts=[threading.Thread(target=t,args=(p,)) for p in sys.argv[1:]]\n"
        "[x.start() for x in ts]\n[x.join() for x in ts]\n"
    )
    outsider = sh(
        "docker",
        "run",
        "--rm",
        "--network",
        NETWORK,
        ENGINE_BASE,
        "python3",
        "-c",
        probe,
        *map(str, ports),
        check=False,
        timeout=300,
    ).split()
    ok = from_host == [port] and outsider == []
    return ok, (
        f"node listens on {len(ports)} ports scanned; open from the ingress CIDR {from_host}, "
        f"from another address {outsider or 'none'}"
    )


def check_secrets(name: str, api_key: str, ident: tls.NodeTLS) -> tuple[bool, str]:
    key_line = ident.key_pem.strip().splitlines()[1]
    leaks = []
    for what, secret in (("api key", api_key), ("TLS key", key_line)):
        logs = node_sh(
            name,
            f"grep -rlF -- '{secret}' /var/log 2>/dev/null; journalctl --no-pager 2>/dev/null | grep -cF -- '{secret}'",
            timeout=300,
        ).split()
        leaks += [f"{what} in {f}" for f in logs if f not in ("0",)]
        ps = node_sh(name, "ps -eo args")
        if secret in ps:
            leaks.append(f"{what} in the process list")
        # on disk only in root-only files (the seed is the stand-in for the cloud's metadata service: skipped)
        files = node_sh(
            name,
            f"grep -rlF -- '{secret}' /etc /opt /root /tmp /home /var/lib/cloud "
            "/var/lib/docker/containers 2>/dev/null | grep -v ^/var/lib/cloud/seed/",
            timeout=300,
        ).split()
        for f in files:
            mode = node_sh(name, f"stat -c '%a %U' {f}").split()
            if not mode or mode[1] != "root" or int(mode[0], 8) & 0o077:
                leaks.append(f"{what} in {f} mode {' '.join(mode)}")
    return not leaks, "; ".join(leaks) or "api key and TLS key only in root-only files; none in logs or ps"


def check_kill_switch(name: str, minutes: int, boot_epoch: float, budget_s: float) -> tuple[bool, str]:
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        state = sh("docker", "inspect", "-f", "{{.State.Running}} {{.State.FinishedAt}}", name, check=False).split()
        if state and state[0] == "false":
            fin = sh("docker", "inspect", "-f", "{{.State.FinishedAt}}", name).strip()
            stopped = _epoch(fin)
            after = stopped - boot_epoch
            ok = minutes * 60 - 5 <= after <= minutes * 60 + 90
            said = re.findall(r"^bakeoff: kill switch: .*$", stopped_log(name), re.M)  # OCI: how it fell back
            return ok, f"node stopped {after:.0f}s after the script started (kill switch: {minutes} min) {said[-1:]}"
        time.sleep(3)
    return False, f"the node still runs {budget_s:.0f}s later (kill switch: {minutes} min)"


def stopped_log(name: str) -> str:
    """The boot log of a node that is no longer running (docker cp reads a stopped container's disk)."""
    tar = subprocess.run(["docker", "cp", f"{name}:/var/log/bakeoff/boot.log", "-"], capture_output=True, check=False)
    return tar.stdout.decode(errors="replace")


def _epoch(docker_time: str) -> float:
    from datetime import datetime  # noqa: PLC0415

    t = re.sub(r"(\.\d{6})\d*", r"\1", docker_time).replace("Z", "+00:00")
    return datetime.fromisoformat(t).timestamp()


# ---------------------------------------------------------------- one rehearsal


_PUSH_LOCK = threading.Lock()
_PUSHED: dict[str, str] = {}


def case_target(case: Case) -> Target:
    """The target a case renders: the plan's own, or a recipe on the plan's cloud, changed as ``derive`` says;
    no serving secrets (they need the node agent and its client bundle, not rehearsed here)."""
    plan = plan_mod.load_plan(case.plan)
    mine = next((t for t in plan.targets if t.name == case.target), None)
    if mine is not None:
        d = mine.model_dump(mode="json", exclude_defaults=True)
    else:  # a recipe on this plan's cloud, with its first target's provider options
        first = plan.targets[0].model_dump(mode="json", exclude_defaults=True)
        d = {"name": case.target, "recipe": case.target, "provider": first["provider"]}
        d["provider_options"] = first.get("provider_options", {})
    d.update(dict(case.derive))
    d.pop("secrets", None)
    p = plan.model_dump(mode="json", exclude_defaults=True) | {"targets": [d]}
    p.pop("claims", None)
    return plan_mod.Plan.model_validate(p).targets[0]


def rehearse(case: Case, kill_minutes: int, images: dict[bool, str], ca_crt: Path, runtime: str | None) -> Rehearsal:
    r = Rehearsal(case.cloud, case.label)
    # a bare image installs Docker first: its budget (and so its kill switch) allows for that, as a plan's would
    kill_minutes += BARE_EXTRA_MINUTES if case.bare else 0
    target = case_target(case)
    print(f"{case.cloud} x {case.label}: plan {case.plan}, target {target.name}", flush=True)
    port, ip = target.stack_spec.port, node_ip(case)
    real = userdata.image_for(target)
    work = VAR / "runs" / case.slug
    shutil.rmtree(work, ignore_errors=True)
    (work / "seed").mkdir(parents=True)
    state: dict[str, Any] = {}
    cache_dir = target.weights.cache_dir.rstrip("/")

    def prepare() -> tuple[bool, str]:
        script, key, ident = render_user_data(target, kill_minutes * 60 - 60)
        state.update(script=script, key=key, ident=ident)
        (work / "seed" / "user-data").write_text(script)
        (work / "seed" / "meta-data").write_text(
            f"instance-id: rehearsal-{case.slug}-{int(time.time())}\nlocal-hostname: {case.cloud}-node\n"
        )
        with _PUSH_LOCK:  # one stand-in per real image name: nodes of two clouds pull the same tag
            if real not in _PUSHED:
                local = build_engine_image(target, userdata.target_summary(target, port))
                _PUSHED[real] = push_under_real_name(local, real, ca_crt)
        state["digest"] = _PUSHED[real]
        (work / "cache").mkdir()  # the node's NVMe cache, empty: a first run downloads from the hub
        return True, f"user-data {len(script.encode())} bytes; {real} pushed as {state['digest'][:19]}…"

    if not r.step("render + stand-in image", prepare):
        return r
    node = ""

    def boot() -> tuple[bool, str]:
        nonlocal node
        node = boot_node(case, images[case.bare], work / "seed", work / "cache", cache_dir, runtime)
        ok, detail = wait_cloud_init(node, kill_minutes * 60 + 180)
        state["boot_epoch"] = _script_start(node)
        return ok, f"cloud-init {detail}" + ("" if ok else f"; {classify(node)}")

    booted = r.step("cloud-init ran the script", boot)
    if node:
        (work / "boot.log").write_text(boot_log(node))
    if not booted and not boot_log(node):
        return r
    ident, key = state["ident"], state["key"]
    if case.bare:
        took: dict[str, float] = {}
        if r.step("Docker installed by the script", lambda: check_docker_install(node, took)):
            r.cells[-1].seconds = took["s"]  # the row's seconds: the install's, as the boot script timed it
    r.step("sections logged", lambda: check_sections(node))
    r.step("image pulled over TLS, digest", lambda: check_image(node, real, state["digest"]))
    r.step("weights from the hub", lambda: check_weights(node, target.checkpoint_id, cache_dir))
    if r.step("serving (pinned TLS)", lambda: wait_serving(node, ip, port, ident, key, 240)):
        r.step("TLS pinned, key required", lambda: check_front(ip, port, ident, key))
        r.step("request through the front", lambda: check_point(ip, port, ident, key, target.checkpoint_id))
    r.step("firewall + default-deny", lambda: check_firewall(node, ip, port))
    r.step("no secret in logs/disk/ps", lambda: check_secrets(node, key, ident))
    r.step(
        "kill switch stops the node",
        lambda: check_kill_switch(
            node, kill_minutes, state.get("boot_epoch") or _script_start(node) or time.time(), kill_minutes * 60 + 240
        ),
    )
    return r


def _script_start(node: str) -> float | None:
    m = re.search(r"^bakeoff: boot (\S+)$", boot_log(node), re.M)
    return _epoch(m.group(1)) if m else None


def table(cells: list[Cell]) -> str:
    rows = [("cloud", "engine", "step", "s", "result")]
    rows += [(c.cloud, c.engine, c.step, f"{c.seconds:.1f}", "pass" if c.ok else "FAIL") for c in cells]
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(v.ljust(w[i]) for i, v in enumerate(r)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    clouds = sorted({c.cloud for c in CASES})
    families = sorted({c.engine for c in CASES})
    ap.add_argument("--cloud", action="append", choices=clouds, help="only these clouds (default: all)")
    ap.add_argument("--engine", action="append", choices=families, help="only these engines (default: all)")
    ap.add_argument("--image", choices=("docker", "bare", "all"), default="all", help="node image with Docker or bare")
    ap.add_argument("--kill-minutes", type=int, default=4, help="the kill switch's time (minutes after boot)")
    ap.add_argument("--keep", action="store_true", help="leave the stopped nodes and the network for inspection")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its registry
    cases = [
        c
        for c in CASES
        if (not a.cloud or c.cloud in a.cloud)
        and (not a.engine or c.engine in a.engine)
        and a.image in ("all", "bare" if c.bare else "docker")
    ]
    if not cases:
        ap.error("no case of the matrix matches")
    t0 = time.monotonic()
    certs = VAR / "pki"
    ca_crt, crt, key = make_ca(certs)
    node_image = build_node_image(ca_crt)
    images = {False: node_image} | ({True: build_bare_image(node_image)} if any(c.bare for c in cases) else {})
    ensure_network()
    runtime = ensure_runtime()
    registry = start_registry(certs, crt, key)
    cells: list[Cell] = []
    try:  # the nodes boot side by side (each its own address), as a run's targets do
        agent = stand_in_agent_image(ca_crt)
        catalog.agent_image = lambda: agent  # the downloader's and the front's image: the stand-in, by its digest
        start_hub(certs, {case_target(c).checkpoint_id for c in cases})
        with ThreadPoolExecutor(len(cases)) as pool:
            for r in pool.map(lambda c: rehearse(c, a.kill_minutes, images, ca_crt, runtime), cases):
                cells += r.cells
        if not a.keep:
            for c in cases:
                subprocess.run(["docker", "rm", "-f", "-v", node_name(c)], capture_output=True, check=False)
    finally:
        subprocess.run(["docker", "rm", "-f", HUB_CONTAINER], capture_output=True, check=False)
        registry.terminate()
        registry.wait()
    print()
    print(table(cells))
    print("\nstand-ins (not the real thing):")
    for s in STAND_INS:
        print(f"  - {s}")
    bad = [c for c in cells if not c.ok]
    for c in bad:
        print(f"FAIL {c.cloud} x {c.engine} / {c.step}: {c.detail}")
    print(f"\n{len(cells) - len(bad)}/{len(cells)} cells pass in {time.monotonic() - t0:.0f}s")
    return 1 if bad or not cells else 0


if __name__ == "__main__":
    sys.exit(main())
