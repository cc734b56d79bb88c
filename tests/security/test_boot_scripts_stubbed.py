"""Boot-script tests cannot reach a host command: the stub host (``tests/stub_host``) fails a run that
calls anything but its stubs and listed tools, however it is called, and every test that runs shell
code under bash goes through it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.stub_host import TOOLS, StubHost, UnstubbedCommand

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "line",
    [
        "timeout 7200 docker run --help",  # the external timeout execs docker: the hole a bash function left
        "timeout -s KILL 5 aws s3 sync a b",
        "docker pull x",
        "x=$(aws sts get-caller-identity)",
        "( nvidia-smi ) &\nwait",
        "true | iptables -L",
    ],
)
def test_a_command_that_is_not_stubbed_fails_the_run_naming_it(tmp_path, line):
    host = StubHost(tmp_path, {"curl": "exit 0"})
    name = next(w for w in re.split(r"[\s=$()|&]+", line) if w in ("docker", "aws", "nvidia-smi", "iptables"))
    with pytest.raises(UnstubbedCommand, match=rf"not stubbed: \['{name}'\]"):
        host.run(line)


def test_a_host_program_named_by_path_fails_before_anything_runs(tmp_path):
    touch = shutil.which("touch", path="/usr/bin:/bin")
    assert touch
    marker = tmp_path / "ran"
    with pytest.raises(UnstubbedCommand, match=re.escape(touch)):
        StubHost(tmp_path).run(f"{touch} {marker}")
    assert not marker.exists()


def test_path_holds_only_the_stubs_and_the_listed_tools_and_each_call_is_recorded(tmp_path):
    host = StubHost(tmp_path, {"docker": 'echo "pulled $2"'})
    out = host.run('echo "$PATH"; timeout 5 docker pull img; mkdir -p d; command -v aws || echo no-aws')
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(host.bin), "pulled", "img", "no-aws"]
    assert sorted(p.name for p in host.bin.iterdir()) == sorted({*TOOLS, "docker"})
    assert host.calls == ["docker pull img"]
    assert host.all_calls() == ["timeout 5 docker pull img", "docker pull img", "mkdir -p d"]


def test_every_test_that_runs_shell_code_goes_through_the_stub_host():
    """Running a string under bash (``bash -c``, ``shell=True``) outside ``tests/stub_host`` fails here;
    ``bash -n`` (syntax only) runs nothing. ``tests/deploy`` runs the project's own deploy scripts and
    the Airflow CLI on purpose, not a node's boot script."""
    pattern = re.compile(
        r"""["'](?:/bin/|/usr/bin/)?(?:ba)?sh["'],\s*["']-c["']|shell\s*=\s*True|["']/bin/(?:ba)?sh["']"""
    )
    allowed = {TESTS / "stub_host.py", Path(__file__).resolve()}
    found = [
        f"{p.relative_to(TESTS)}:{n}"
        for p in sorted(TESTS.rglob("*.py"))
        if p not in allowed and "deploy" not in p.relative_to(TESTS).parts
        for n, text in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(text)
    ]
    assert not found, f"run these through tests/stub_host.StubHost: {found}"
