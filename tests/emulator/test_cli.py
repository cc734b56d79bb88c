"""The command line: port file once listening, clear errors on bad config, exits on SIGTERM or expiry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from emulator_fixtures import make_config

from bakeoff.serving.emulator.__main__ import main


def start(tmp_path, config: dict, env: dict | None = None) -> tuple[subprocess.Popen, object]:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bakeoff.serving.emulator",
            "--config",
            str(cfg),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    return proc, port_file


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def wait_port(proc, port_file, timeout=20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.exists():
            return int(port_file.read_text())
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.05)
    raise AssertionError("no port file")


def test_port_file_health_and_sigterm(tmp_path, procs):
    proc, port_file = start(tmp_path, make_config())
    procs.append(proc)
    port = wait_port(proc, port_file)
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert b"listening on 127.0.0.1:%d" % port in proc.stdout.read()


def test_exits_by_itself_at_expiry(tmp_path, procs):
    proc, port_file = start(tmp_path, make_config(expires_at=time.time() + 1.0))
    procs.append(proc)
    wait_port(proc, port_file)
    assert proc.wait(timeout=30) == 0
    assert b"(expired)" in proc.stdout.read()


@pytest.mark.parametrize(
    "config,needle",
    [
        ({"mode": "roofline"}, "needs a target"),
        ({"mode": "fast"}, "mode:"),
        ({"mode": "scripted", "scripted": {"itl_ms": -1}}, "scripted.itl_ms"),
        ({"mode": "scripted", "colour": "red"}, "colour: unknown field"),
        ({"mode": "scripted", "api_key_env": "not a name"}, "api_key_env"),
    ],
)
def test_bad_config_is_named(tmp_path, capsys, config, needle):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    assert main(["--config", str(cfg), "--port", "0"]) == 2
    assert needle in capsys.readouterr().err


def test_missing_or_broken_config_file(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "nope.json")]) == 2
    assert "no file" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{")
    assert main(["--config", str(tmp_path / "broken.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_model_that_does_not_fit(tmp_path, capsys):
    cfg = make_config()
    cfg["target"] |= {
        "instance_type": "p5.48xlarge",
        "model": "llama-3.1-405b",
        "quantization": "bf16",
        "tensor_parallel": 1,
    }
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert main(["--config", str(tmp_path / "c.json")]) == 2
    assert "raise tensor_parallel" in capsys.readouterr().err


def test_loadcheck_prints_its_figures(capsys):
    from bakeoff.serving.emulator.loadcheck import main as loadcheck

    assert (
        loadcheck(
            [
                "--mode",
                "scripted",
                "--ttft-ms",
                "5",
                "--itl-ms",
                "1",
                "--max-tokens",
                "8",
                "--prompt-tokens",
                "4",
                "--concurrency",
                "2",
                "--requests",
                "4",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "requests=4" in out and "emulator CPU" in out and "vs script: TTFT error" in out


@pytest.mark.parametrize("mode", ["roofline", "scripted"])
def test_stop_route_opens_only_with_the_stop_key(tmp_path, procs, mode):
    """The provider's teardown from another host: the stop key ends the process, anything else does not."""
    config = make_config(mode=mode) | {"stop_key_env": "STOP_KEY"}
    proc, port_file = start(tmp_path, config, env={"STOP_KEY": "s" * 40})
    procs.append(proc)
    url = f"http://127.0.0.1:{wait_port(proc, port_file)}/_bakeoff/stop"
    assert httpx.post(url, timeout=5).status_code == 401
    assert httpx.post(url, headers={"Authorization": "Bearer " + "t" * 40}, timeout=5).status_code == 401
    assert proc.poll() is None
    assert httpx.post(url, headers={"Authorization": "Bearer " + "s" * 40}, timeout=5).status_code == 202
    assert proc.wait(timeout=15) == 0


def test_no_stop_key_no_stop_route(tmp_path, procs):
    proc, port_file = start(tmp_path, make_config() | {"stop_key_env": "STOP_KEY"}, env={"STOP_KEY": ""})
    procs.append(proc)
    port = wait_port(proc, port_file)
    assert httpx.post(f"http://127.0.0.1:{port}/_bakeoff/stop", timeout=5).status_code == 404
    assert proc.poll() is None
