"""The node agent as a node runs it (``python -m bakeoff agent`` in its own process, serving https
with the node's certificate, which the client pins) against a scripted server, driven by the
Airflow side's client: auth, idempotent jobs, results mirrored as they finish (and kept when a
later workload fails), power per point, logs with the key masked."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import httpx
import pandas as pd
import pytest

from bakeoff.agent import job
from bakeoff.core import pinning
from bakeoff.serving import tls
from bakeoff.serving.agent_client import AgentClient, AgentError, mirror, run_job
from bakeoff.serving.emulator.scripted import ScriptedServerProcess

KEY = "agent-test-key-0123456789abcdef"
NODE = tls.node_identity("agent-test", "node")
CERT = NODE.cert_pem


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def scripted():
    with ScriptedServerProcess({"ttft_ms": 5, "itl_ms": 1, "tokens_per_chunk": 1}) as s:
        yield s


@pytest.fixture(scope="module")
def node(tmp_path_factory, scripted):
    """A node's folders and its agent: the key in a root-only file, a boot log, a power sampler's file."""
    d = tmp_path_factory.mktemp("node")
    (d / "api_key").write_text(KEY + "\n")
    (d / "node.crt").write_text(CERT)
    (d / "node.key").write_text(NODE.key_pem)
    (d / "boot.log").write_text(f"bakeoff: boot\nvllm: api_key={KEY}\nbakeoff-provenance: B200, 580.1, 97.00\n")
    now = time.time()
    (d / "power.csv").write_text(
        "".join(f"{now - 60 + i * 0.5:.3f},{g},{500 + 100 * g}.0\n" for i in range(2400) for g in range(8))
    )
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bakeoff",
            "agent",
            "--serve-url",
            scripted.url,
            "--key-file",
            str(d / "api_key"),
            "--log-dir",
            str(d),
            "--work-dir",
            str(d / "work"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--bundle",
            "f" * 64,
            "--tls-cert",
            str(d / "node.crt"),
            "--tls-key",
            str(d / "node.key"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"https://127.0.0.1:{port}"
    try:
        with AgentClient(url, KEY, tls_cert=CERT) as c:
            c.wait_healthy(30, poll_s=0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _job(job_id: str, *workloads: dict) -> dict:
    return {
        "job_id": job_id,
        "run_id": "run-1",
        "target": "b200-vllm",
        "model": "scripted",
        "gpus": 2,
        "emulated": True,
        "slo": {"ttft_p99_ms": 1000},
        "workloads": list(workloads),
    }


W = {
    "name": "short",
    "input_len": 16,
    "output_len": 8,
    "concurrency": [1, 2],
    "requests_per_point": 6,
    "warmup_requests": 1,
}


def test_every_route_needs_the_key(node):
    with AgentClient(node, "wrong-key", tls_cert=CERT) as c, pytest.raises(AgentError, match="401"):
        c.health()
    assert httpx.get(f"{node}/agent/logs", verify=pinning.pinned_context(CERT)).status_code == 401


@pytest.mark.slow
def test_a_job_runs_next_to_the_server_and_its_results_are_mirrored(node, tmp_path):
    with AgentClient(node, KEY, tls_cert=CERT) as c:
        assert c.health()["bundle"] == "f" * 64
        done = run_job(c, _job("job-ok", W), tmp_path, timeout_s=120, poll_s=0.2)
        assert done["workloads"] == 1
        again = c.submit(_job("job-ok", W))  # a retried task joins the finished job
        assert again["state"] == "done" and again["started_at"] == c.status("job-ok")["started_at"]
    points = pd.read_parquet(tmp_path / "points")
    assert sorted(points["concurrency"]) == [1, 2] and (points["completed"] == 6).all()
    assert set(points["target"]) == {"b200-vllm"} and set(points["run_id"]) == {"run-1"}
    # GPUs 0 and 1 serve (TP2): 500 W and 600 W -> 550 W per GPU; the node's idle GPUs 2..7 do not count
    assert points["power_w_per_gpu"].tolist() == pytest.approx([550.0, 550.0])
    assert (points["joules_per_output_token"] > 0).all()
    assert (tmp_path / "client_calibration.json").exists()
    assert not (tmp_path / "summary.json").exists()
    assert not any(p.name.startswith(".") for p in tmp_path.rglob("*"))


@pytest.mark.slow
def test_a_failing_job_keeps_what_it_finished(node, tmp_path):
    bad = {**W, "name": "bad", "concurrency": [-1]}
    with AgentClient(node, KEY, tls_cert=CERT) as c, pytest.raises(AgentError, match="failed on the node") as e:
        run_job(c, _job("job-half", W, bad), tmp_path, timeout_s=120, poll_s=0.2)
    assert "concurrency" in str(e.value)
    assert len(list((tmp_path / "points").glob("short-*.parquet"))) == 2


def test_bad_jobs_are_refused_with_the_field(node):
    with AgentClient(node, KEY, tls_cert=CERT) as c:
        with pytest.raises(AgentError, match="job_id"):
            c.submit({**_job("x", W), "job_id": "../../etc"})
        with pytest.raises(AgentError, match="workloads"):
            c.submit({**_job("y"), "workloads": []})
        with pytest.raises(AgentError, match="files"):
            c.submit({**_job("z", W), "files": {"../evil": "x"}})


def test_only_finished_job_files_are_served(node):
    with AgentClient(node, KEY, tls_cert=CERT) as c:
        for rel in ("../../api_key", "..%2F..%2Fapi_key", ".workload-0.json"):
            with pytest.raises(AgentError, match="404"):
                c.fetch("job-ok", rel)


def test_logs_come_back_with_the_key_masked_and_power_by_window(node):
    with AgentClient(node, KEY, tls_cert=CERT) as c:
        logs = c.logs()
        now = time.time()
        rows = c.power(now - 10, now - 5)
    assert "bakeoff-provenance: B200" in logs and KEY not in logs and "<api-key>" in logs
    # the window widened by power.FETCH_S (2.5 s) each side, so the counters bracket a point
    assert rows and all(now - 12.5 <= r["t"] <= now - 2.5 for r in rows) and {r["gpu"] for r in rows} == set(range(8))


def test_mirror_never_writes_outside_the_results_folder(tmp_path):
    class Fake:
        def fetch(self, job_id, rel):
            return b"x"

    with pytest.raises(AgentError, match="outside"):
        mirror(Fake(), "j", {"points/../../escape.parquet": 1}, tmp_path / "t", {})
    assert not (tmp_path / "escape.parquet").exists()
    have: dict = {}
    assert mirror(Fake(), "j", {"points/a.parquet": 1, "summary.json": 1}, tmp_path / "t", have) == 1
    assert mirror(Fake(), "j", {"points/a.parquet": 1}, tmp_path / "t", have) == 0  # unchanged: not fetched again
    assert json.dumps(have) == '{"points/a.parquet": 1}'


# --- the co-located benchmark as an action and one-look checks (what the DAG's sensor pokes) --------


def _node_endpoint(url: str) -> tuple[SimpleNamespace, SimpleNamespace]:
    return SimpleNamespace(name="b200-vllm", slug="b200-vllm"), SimpleNamespace(agent_url=url, tls_cert=CERT)


@pytest.mark.slow
def test_each_check_copies_what_the_job_finished_so_far(node, tmp_path):
    """A check while the job runs returns None and has already copied the finished points, so a
    later failure loses nothing measured; the check after it ends counts the points."""
    long = {**W, "name": "long", "concurrency": [1], "requests_per_point": 300}
    target, endpoint = _node_endpoint(node)
    with AgentClient(node, KEY, tls_cert=CERT) as c:
        c.submit(_job("job-follow", W, long))
    submitted = {"job_id": "job-follow", "bundle": "f" * 64}
    seen_running_with_points = False
    deadline = time.monotonic() + 120
    while (points := job.check(target, endpoint, KEY, submitted, tmp_path, waited_s=1, timeout_s=600)) is None:
        if list((tmp_path / "points").glob("short-*.parquet")):
            seen_running_with_points = True
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert seen_running_with_points  # copied on an early check, before the job ended
    assert points == 3 and len(list((tmp_path / "points").glob("*.parquet"))) == 3
    assert json.loads((tmp_path / "client.json").read_text())["bundle"] == "f" * 64


@pytest.mark.slow
def test_a_check_fails_when_the_job_failed_or_outlived_its_budget(node, tmp_path):
    target, endpoint = _node_endpoint(node)
    long = {**W, "name": "long", "concurrency": [1], "requests_per_point": 300}
    with AgentClient(node, KEY, tls_cert=CERT) as c:
        c.submit(_job("job-check-long", long))
    with pytest.raises(AgentError, match="still running after 61s"):
        job.check(target, endpoint, KEY, {"job_id": "job-check-long"}, tmp_path / "b", waited_s=61, timeout_s=60)
    bad = {**W, "name": "bad", "concurrency": [-1]}
    with AgentClient(node, KEY, tls_cert=CERT) as c:
        c.submit(_job("job-check-bad", W, bad))
    deadline = time.monotonic() + 120
    with pytest.raises(AgentError, match="(?s)failed on the node.*2 finished points kept"):
        while (
            job.check(target, endpoint, KEY, {"job_id": "job-check-bad"}, tmp_path / "a", waited_s=0, timeout_s=60)
            is None
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_the_benchmark_timeout_is_the_budget_estimate_capped_by_the_node_life():
    from bakeoff.plan import load_plan
    from bakeoff.spend import budget

    plan = load_plan("mi355x-vs-b200-sandbox")
    for t in plan.targets:
        estimate = budget.bench_hours(plan, t) * (1 + budget.MARGIN) * 3600
        want = min(max(estimate, job.MIN_BENCH_TIMEOUT_S), plan.max_instance_hours * 3600)
        assert job.bench_timeout_s(plan, t) == pytest.approx(want)
    short = plan.model_copy(update={"max_instance_hours": 0.05})
    assert job.bench_timeout_s(short, short.targets[0]) == pytest.approx(180.0)
