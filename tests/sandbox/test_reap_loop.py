"""`bakeoff reap --loop`: the reaper that runs when Airflow does not. It passes on schedule, outlives a
failed pass, stops cleanly on SIGTERM, and refuses a bad interval with a message naming the flag."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from bakeoff.cleanup import reaper
from bakeoff.providers.credentials import CREDENTIALS_ENV


def test_loop_survives_failed_passes_and_stops_on_sigterm(tmp_path):
    # a cloud that does not answer: every pass fails to scan it, and the loop goes on
    creds = {"vultr": {"token": "t", "base_url": "http://127.0.0.1:9/v2", "poll_s": 0.01, "backoff_s": 0.01}}
    env = {**os.environ, CREDENTIALS_ENV: json.dumps(creds), "BAKEOFF_DATA": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bakeoff", "reap", "--loop", "--interval-s", "0.2", "--providers", "vultr"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while sum("reaper loop: pass " in x for x in lines) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        assert proc.poll() is None, "".join(lines)  # still running after failed passes
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out
    assert out.count("reaper loop: pass ") >= 2 and "cannot list vultr" in out
    assert "stopping after" in out


def test_loop_runs_one_pass_per_interval_and_survives_an_exception(monkeypatch):
    calls, waits = [], []

    def flaky(now=None, **kw):
        calls.append(now)
        if len(calls) == 2:
            raise RuntimeError("store unreadable")
        return {"terminated": [], "kept": [], "errors": {}}

    monkeypatch.setattr(reaper, "reap", flaky)
    clock = [1000.0]

    def wait(s):
        waits.append(s)
        clock[0] += s
        return len(waits) >= 3

    assert reaper.reap_loop(60, wait=wait, now_fn=lambda: clock[0]) == 3
    assert calls == [1000.0, 1060.0, 1120.0] and waits == [60, 60, 60]


def test_bad_interval_is_refused_naming_the_flag(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "bakeoff", "reap", "--loop", "--interval-s", "0"],
        env={**os.environ, "BAKEOFF_DATA": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "--interval-s: expected a number of seconds > 0" in out.stdout + out.stderr
