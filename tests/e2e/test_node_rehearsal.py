"""Smoke case of the node rehearsal (benchmarks/node_rehearsal.py): one node boots the real boot script under
cloud-init on a debootstrapped Debian with its own Docker, and every step of its row passes, the kill switch
included, so the script cannot silently break. It needs root, Docker, debootstrap and Debian's
docker-registry; it installs them where it can and skips, naming what is missing, where it cannot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"debootstrap": "debootstrap", "docker-registry": "docker-registry", "dockerd": "docker.io"}


def _docker_up() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


def _prerequisites() -> str | None:
    """Why the rehearsal cannot run here, or None once its tools are installed and dockerd answers."""
    if os.geteuid() != 0:
        return "the node rehearsal needs root (debootstrap, a privileged container, the host's dockerd)"
    missing = [pkg for tool, pkg in TOOLS.items() if not shutil.which(tool)]
    if missing and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], capture_output=True, check=False, env=env)
        missing = [pkg for tool, pkg in TOOLS.items() if not shutil.which(tool)]
    if missing:
        return f"cannot install {', '.join(missing)} (no apt-get or no Debian archive)"
    if not _docker_up():
        (ROOT / "var").mkdir(exist_ok=True)
        with open(ROOT / "var" / "dockerd.log", "ab") as log:
            subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(30):
            if _docker_up():
                break
            time.sleep(1)
        else:
            return "dockerd does not start here (see var/dockerd.log)"
    return None


@pytest.mark.timeout(1500)  # the first run builds the two root filesystems (debootstrap, ~5 minutes)
def test_one_node_boots_the_real_script_and_its_kill_switch_stops_it():
    why = _prerequisites()
    if why:
        pytest.skip(why)
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "node_rehearsal.py"),
            "--cloud",
            "vultr",
            "--engine",
            "vllm",
            "--image",
            "docker",
            "--kill-minutes",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    rows = [line.split() for line in out.splitlines() if line.startswith("vultr  ")]
    steps = {" ".join(row[2:-2]): row[-1] for row in rows}
    for step in (
        "cloud-init ran the script",
        "image pulled over TLS, digest",
        "weights from the hub",
        "firewall + default-deny",
        "TLS pinned, key required",
        "request through the front",
        "kill switch stops the node",
    ):
        assert steps.get(step) == "pass", out[-4000:]
    assert "STAND-IN" in out or "stand-in" in out  # what is not the real thing is said
