"""The Airflow site the browser tests drive: its settings, an api-server started and stopped on loopback,
Chromium's flags and the waits every page step uses (tests/ui_browser's test modules share them)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx
import pytest

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
USER, PASSWORD = "admin", "ui-test-password"
SECRET_KEY = "b" * 64  # the installation secret: it signs evidence bundles (bakeoff.secrets)
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_api_server(env: dict, home: Path, port: int, wait_s: float = 120) -> tuple[subprocess.Popen, str, IO[str]]:
    """The DAGs serialised into the site's database, then an api-server on loopback once it answers:
    (its process, its base URL, its log file)."""
    subprocess.run([AIRFLOW, "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=240)
    log = open(home / "api-server.log", "w")
    proc = subprocess.Popen(
        [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if httpx.get(f"{base}/api/v2/monitor/health", timeout=2).status_code == 200:
                return proc, base, log
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc, signal.SIGTERM)
            log.close()
            pytest.fail("api-server did not start:\n" + (home / "api-server.log").read_text()[-3000:])
        time.sleep(1)


def stop(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    except ProcessLookupError:
        pass


def wait(driver, seconds: float = 30) -> WebDriverWait:
    return WebDriverWait(driver, seconds)


def by_text(tag: str, text: str) -> tuple[str, str]:
    return By.XPATH, f"//{tag}[normalize-space()={json.dumps(text)}]"
