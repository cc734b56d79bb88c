"""The OCI self-delete kill switch installs the OCI SDK only hash-pinned, from the checked bundle.

The SDK runs as the node's instance principal (it may delete bakeoff instances), so a wheel swapped
on the index or a mirror must be refused: pip gets ``--require-hashes`` and the whole closure of
``oci`` from ``bakeoff/serving/requirements-oci-sdk.txt``, which reaches the node inside the client
bundle (its SHA-256 checked by the boot script). The kill-switch section runs under bash with every
host command stubbed (``tests/stub_host``).
"""

from __future__ import annotations

import io
import re
import shlex
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from bakeoff.serving import bundle, oci_sdk, userdata
from tests.stub_host import StubHost

PIN = re.compile(r"[a-z0-9-]+==[A-Za-z0-9_.+-]+ --hash=sha256:[0-9a-f]{64}")


def _section() -> str:
    return userdata.kill_switch_section("oci", 121)


def _run(tmp: Path, with_file: bool) -> tuple[str, list[str]]:
    script = _section().replace("/opt/bakeoff", str(tmp / "opt/bakeoff"))
    if with_file:
        f = tmp / "opt/bakeoff/client/bakeoff/serving" / oci_sdk.HASHES_FILE.name
        f.parent.mkdir(parents=True)
        f.write_text(oci_sdk.HASHES_FILE.read_text())
    host = StubHost(tmp)
    for c in ("docker", "shutdown", "poweroff", "sleep"):
        host.stub(c)
    host.stub("curl", "echo ocid1.instance.oc1.iad.node")
    out = host.run(script + "\nwait\n")
    out.check_returncode()
    return out.stdout + out.stderr, host.calls


def test_the_sdk_install_requires_hashes_for_every_package():
    install = next(line for line in _section().splitlines() if "pip install" in line)
    argv = shlex.split(install[install.index("pip install") :].split(">")[0])
    assert "--require-hashes" in argv and "--no-deps" in argv and "--only-binary=:all:" in argv
    assert argv[argv.index("-r") + 1] == "$f" and not any(a.startswith("oci==") for a in argv)


def test_the_pinned_file_is_the_whole_closure_at_this_workers_versions():
    lines = oci_sdk.hashed_lines()
    assert lines and all(PIN.fullmatch(line) for line in lines), lines
    assert oci_sdk.mismatch() == []
    assert {Requirement(line.split()[0]).name for line in lines} >= {"oci", "cryptography", "pyopenssl", "certifi"}


def test_a_file_out_of_step_with_the_worker_is_reported(tmp_path, monkeypatch):
    stale = tmp_path / oci_sdk.HASHES_FILE.name
    stale.write_text(oci_sdk.HASHES_FILE.read_text().replace("oci==", "oci==0.0.1.dev0+x", 1))
    monkeypatch.setattr(oci_sdk, "HASHES_FILE", stale)
    assert any(p.startswith("not in") and "oci==" in p for p in oci_sdk.mismatch())


def test_the_file_travels_in_the_checked_bundle_where_the_node_looks_for_it():
    data, _ = bundle.build()
    inside = oci_sdk.NODE_FILE.removeprefix("/opt/bakeoff/client/")
    assert zipfile.ZipFile(io.BytesIO(data)).read(inside) == oci_sdk.HASHES_FILE.read_bytes()
    staged = {"url": "https://b.example/c.zip", "sha256": "a" * 64, "requirements": []}
    agent = userdata.agent_section(staged, 8000, None)
    # unpacked into /opt/bakeoff/client only after `sha256sum -c` accepted the download
    assert agent.index("sha256sum -c") < agent.index("zipfile -e /opt/bakeoff/client.zip /opt/bakeoff/client")


def test_with_the_bundle_unpacked_the_sdk_is_installed_from_the_pinned_file(tmp_path):
    out, calls = _run(tmp_path, with_file=True)
    install = next(c for c in calls if c.startswith("docker run") and "pip install" in c)
    assert f"-r {tmp_path}/opt/bakeoff/client/bakeoff/serving/requirements-oci-sdk.txt" in install
    assert "--require-hashes" in install and "install failed" not in out
    assert any("terminate_instance" in c for c in calls) and "poweroff" in [c.strip() for c in calls]


def test_without_the_bundle_no_unpinned_install_happens_and_power_off_still_follows(tmp_path):
    out, calls = _run(tmp_path, with_file=False)
    assert not any("pip install" in c for c in calls)
    assert "oci SDK install failed; power-off only" in out
    assert calls.count("sleep 30") == oci_sdk.WAIT_S // 30  # waited for it, then gave up
    assert "poweroff" in [c.strip() for c in calls]


@pytest.mark.parametrize("provider", ["aws", "vultr", "digitalocean"])
def test_other_clouds_install_no_sdk(provider):
    assert "pip install" not in userdata.kill_switch_section(provider, 121)
