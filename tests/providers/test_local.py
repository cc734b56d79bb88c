"""The local provider: emulator processes as instances, with the guarantees teardown relies on."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time

import httpx
import psutil
import pytest

from bakeoff.plan import Target
from bakeoff.providers import ProviderError, get_provider
from bakeoff.providers.base import TAG_EXPIRES, TAG_RUN, TAG_TARGET
from bakeoff.providers.local import LocalProvider, instance_id


def target(name: str = "mi355x-vllm") -> Target:
    return Target(
        name=name,
        provider="local",
        instance_type="BM.GPU.MI355X.8",
        model="llama-3.1-70b",
        quantization="fp8",
        kv_cache_dtype="fp8",
        tensor_parallel=8,
    )


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def provider(tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_DATA", str(tmp_path))
    p = LocalProvider(grace_s=3.0)
    yield p
    for inst in p.list_tagged():  # never leave an emulator behind
        p.terminate(inst.id)
    for rec in (tmp_path / "state" / "local" / "instances").glob("*.json"):
        pid = json.loads(rec.read_text())["pid"]
        if not gone(pid) and "bakeoff.serving.emulator" in " ".join(psutil.Process(pid).cmdline()):
            os.killpg(pid, 9)


def test_registry_lookup():
    assert isinstance(get_provider("local"), LocalProvider)


def test_lifecycle(provider):
    inst = provider.create(target(), "run-a", tags={"bakeoff:plan": "demo"}, spec={"expires_at": time.time() + 600})
    assert inst.provider == "local" and inst.host == "127.0.0.1" and inst.state in ("pending", "running")
    assert inst.tags[TAG_RUN] == "run-a" and inst.tags[TAG_TARGET] == "mi355x-vllm" and TAG_EXPIRES in inst.tags
    assert inst.tags["bakeoff:plan"] == "demo"
    ready = provider.wait_ready(inst, 30)
    assert ready.state == "running" and ready.port
    models = httpx.get(f"{ready.base_url}/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert [i.id for i in provider.list_tagged("run-a")] == [inst.id]
    assert provider.list_tagged("run-b") == []
    assert provider.describe(inst.id).port == ready.port
    pid = inst.pid
    assert provider.terminate(inst.id) is True
    assert gone(pid)
    assert provider.terminate(inst.id) is False  # already gone: no error
    assert provider.list_tagged() == []
    assert provider.describe(inst.id).state == "terminated"
    assert provider.describe("local-unknown") is None
    assert provider.terminate("local-unknown") is False


def test_create_is_idempotent(provider):
    a = provider.create(target(), "run-a", tags={}, spec={})
    b = provider.create(target(), "run-a", tags={}, spec={})
    c = provider.create(target("b200-vllm"), "run-a", tags={}, spec={})
    assert a.id == b.id == instance_id("run-a", "mi355x-vllm") and a.pid == b.pid
    assert c.id != a.id
    assert len(provider.list_tagged("run-a")) == 2
    provider.terminate(a.id)
    d = provider.create(target(), "run-a", tags={}, spec={})  # after terminate: a fresh process
    assert d.id == a.id and d.pid != a.pid


def test_terminate_kills_the_whole_process_group(tmp_path, monkeypatch):
    """A stray child in the emulator's group (like the workers a serving stack forks) dies with it."""
    monkeypatch.setenv("BAKEOFF_DATA", str(tmp_path))
    wrapper = tmp_path / "python-with-child"
    wrapper.write_text(f'#!/bin/sh\nsleep 120 &\necho $! > {tmp_path}/stray.pid\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    provider = LocalProvider(python=str(wrapper), grace_s=3.0)
    inst = provider.create(target(), "run-g", tags={}, spec={})
    try:
        inst = provider.wait_ready(inst, 30)
        pgid = inst.pgid
        stray = int((tmp_path / "stray.pid").read_text())
        assert os.getpgid(inst.pid) == pgid == os.getpgid(stray) != os.getpgid(0)
        assert provider.terminate(inst.id) is True
        deadline = time.monotonic() + 10
        while not (gone(stray) and gone(inst.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(inst.pid) and gone(stray)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(inst.pgid, 9)


@pytest.mark.slow
def test_list_tagged_after_the_creator_died(provider, tmp_path):
    """An instance created by another process (say an Airflow task that was killed) is still found."""
    script = textwrap.dedent("""
        from bakeoff.plan import Target
        from bakeoff.providers.local import LocalProvider
        t = Target(name="orphan", provider="local", instance_type="BM.GPU.B200.8", model="llama-3.1-70b",
                   quantization="fp8", tensor_parallel=8)
        p = LocalProvider()
        print(p.wait_ready(p.create(t, "run-dead", tags={}, spec={}), 30).id)
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"BAKEOFF_DATA": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    found = LocalProvider().list_tagged("run-dead")
    assert [i.id for i in found] == [out.stdout.strip()]
    assert found[0].target == "orphan" and found[0].state == "running"
    assert httpx.get(f"{found[0].base_url}/health", timeout=5).status_code == 200
    assert LocalProvider().terminate(found[0].id) is True
    assert LocalProvider().list_tagged() == []


def test_api_key_only_in_the_child_environment(provider, tmp_path):
    key = "bk-secret-key-for-test"
    inst = provider.wait_ready(provider.create(target(), "run-k", tags={}, spec={"api_key": key}), 30)
    assert httpx.get(f"{inst.base_url}/v1/models", timeout=5).status_code == 401
    ok = httpx.get(f"{inst.base_url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=5)
    assert ok.status_code == 200
    proc = psutil.Process(inst.pid)
    assert key not in " ".join(proc.cmdline())
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path.name


def test_dead_emulator_is_not_listed(provider):
    inst = provider.wait_ready(provider.create(target(), "run-x", tags={}, spec={}), 30)
    os.killpg(inst.pgid, 9)
    deadline = time.monotonic() + 10
    while provider.list_tagged("run-x") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert provider.list_tagged("run-x") == []
    assert provider.describe(inst.id).state == "terminated"


def test_wait_ready_reports_a_crash(provider):
    inst = provider.create(target(), "run-c", tags={}, spec={"mode": "warp-speed"})  # invalid: exits at once
    with pytest.raises(ProviderError, match="exited before it was ready") as err:
        provider.wait_ready(inst, 30)
    assert "mode" in str(err.value)


def test_scripted_mode(provider):
    inst = provider.create(
        target(), "run-s", tags={}, spec={"mode": "scripted", "scripted": {"ttft_ms": 5, "itl_ms": 1}}
    )
    inst = provider.wait_ready(inst, 30)
    version = httpx.get(f"{inst.base_url}/version", timeout=5).json()
    assert version["mode"] == "scripted" and version["scripted"]["ttft_ms"] == 5


def test_check_ready_looks_once(provider):
    """One look per call (what the DAG's sensor pokes): None while the emulator starts, the running
    instance once it answers, ProviderError once it has exited."""
    inst = provider.create(target(), "run-look", tags={}, spec={})
    looks = []
    deadline = time.monotonic() + 30
    while (ready := provider.check_ready(inst)) is None:
        looks.append(time.monotonic())
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert looks, "the emulator cannot be up at once: at least one look says not yet"
    assert ready.state == "running" and ready.port and provider.check_ready(inst).port == ready.port
    crashed = provider.create(target(), "run-look-crash", tags={}, spec={"mode": "warp-speed"})
    with pytest.raises(ProviderError, match="exited before it was ready"):
        while provider.check_ready(crashed) is None:
            assert time.monotonic() < deadline + 30
            time.sleep(0.02)


def test_workers_with_their_own_data_share_the_local_clouds_registry(tmp_path, monkeypatch):
    """BAKEOFF_LOCAL_STATE is the local "cloud account": a worker with another BAKEOFF_DATA lists and
    terminates the node a first worker started, as two workers on one cloud account do."""
    monkeypatch.setenv("BAKEOFF_LOCAL_STATE", str(tmp_path / "shared-local"))
    monkeypatch.setenv("BAKEOFF_DATA", str(tmp_path / "worker-a"))
    inst = LocalProvider(grace_s=3.0).create(target(), "run-s", tags={}, spec={"expires_at": time.time() + 600})
    try:
        assert (tmp_path / "shared-local" / "instances" / f"{inst.id}.json").is_file()
        assert not (tmp_path / "worker-a" / "state" / "local").exists()
        monkeypatch.setenv("BAKEOFF_DATA", str(tmp_path / "worker-b"))
        other = LocalProvider(grace_s=3.0)
        assert [i.id for i in other.list_tagged("run-s")] == [inst.id]
        assert other.terminate(inst.id) is True and gone(inst.pid)
    finally:
        if not gone(inst.pid):
            os.killpg(inst.pid, 9)


def _owned_elsewhere(provider: LocalProvider, iid: str, owner: str = "worker-elsewhere") -> None:
    """Rewrite the node's record as the host that started it would have: another host owns its process."""
    path = provider._record_path(iid)
    rec = json.loads(path.read_text())
    rec["owner"] = owner
    path.write_text(json.dumps(rec))


def test_node_listens_on_the_node_address_and_records_it(provider, monkeypatch):
    monkeypatch.setenv("BAKEOFF_NODE_ADDRESS", "127.0.0.2")
    inst = provider.create(target(), "run-addr", tags={}, spec={"api_key": "k" * 20})
    ready = provider.wait_ready(inst, 30)
    assert ready.host == "127.0.0.2" and ready.base_url.startswith("http://127.0.0.2:")
    assert json.loads(provider._record_path(inst.id).read_text())["host"] == "127.0.0.2"
    with pytest.raises(httpx.ConnectError):  # not on 127.0.0.1: the address recorded is the one it serves on
        httpx.get(f"http://127.0.0.1:{ready.port}/health", timeout=2)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0.0.0.0", "every interface"),
        ("8.8.8.8", "public"),
        ("169.254.169.254", "link-local"),
        ("node-a", "not an IP address"),
        ("10.255.255.254", "not an address of this host"),
    ],
)
def test_node_address_is_guarded(provider, monkeypatch, value, why):
    monkeypatch.setenv("BAKEOFF_NODE_ADDRESS", value)
    with pytest.raises(ProviderError, match=why) as e:
        provider.create(target(), "run-guard", tags={}, spec={"api_key": "k" * 20})
    assert "BAKEOFF_NODE_ADDRESS" in str(e.value) and "unset it" in str(e.value)
    assert provider.list_tagged() == []


def test_terminate_from_another_host_uses_the_stop_route_and_sees_it_gone(provider):
    inst = provider.wait_ready(provider.create(target(), "run-far", tags={}, spec={}), 30)
    _owned_elsewhere(provider, inst.id)
    assert provider.describe(inst.id).state == "running"  # seen over the network, not by a pid here
    assert [i.id for i in provider.list_tagged("run-far")] == [inst.id]
    assert provider.terminate(inst.id) is True  # its port refused: the absence seen from afar
    deadline = time.monotonic() + 20
    while not gone(inst.pid) and time.monotonic() < deadline:  # the process ends after its listener
        time.sleep(0.05)
    assert gone(inst.pid)
    assert provider.describe(inst.id).state == "terminated"
    assert provider.terminate(inst.id) is False


def test_terminate_fails_naming_a_node_it_cannot_stop(provider, monkeypatch):
    inst = provider.wait_ready(provider.create(target(), "run-keyed", tags={}, spec={}), 30)
    _owned_elsewhere(provider, inst.id)
    with monkeypatch.context() as m, pytest.raises(ProviderError, match=f"{inst.id}.*answered 401"):
        m.setenv("BAKEOFF_SECRET_KEY", "another-installation-" + "x" * 32)  # derives another stop key
        provider.terminate(inst.id)
    assert not gone(inst.pid)
    assert provider.describe(inst.id).state == "running"  # not recorded terminated
    assert [i.id for i in provider.list_tagged()] == [inst.id]  # the reaper finds it again
    # this installation's secret again: its key opens the route
    assert provider.terminate(inst.id) is True


def test_a_node_that_cannot_be_seen_is_never_reported_terminated(provider):
    inst = provider.wait_ready(provider.create(target(), "run-unseen", tags={}, spec={}), 30)
    _owned_elsewhere(provider, inst.id)
    path = provider._record_path(inst.id)
    rec = json.loads(path.read_text())
    # As another host's record reads while its node starts (or after it died before listening): no port yet.
    path.write_text(json.dumps(rec | {"port": None, "port_file": str(path.parent / "no-such-port")}))
    assert provider.describe(inst.id).state == "unknown"
    assert [i.id for i in provider.list_tagged()] == [inst.id]
    with pytest.raises(ProviderError, match=f"{inst.id}.*cannot be seen"):
        provider.terminate(inst.id)
    path.write_text(json.dumps(rec))
    assert provider.terminate(inst.id) is True
