"""The boot script checks what the node image provides before it relies on it: Docker is installed from
the distribution where missing (its time recorded), a missing GPU driver or NVIDIA container toolkit
stops the boot with a console line naming the image and the one to use instead, which readiness
classifies as a certain failure. Run under real bash with every host command a stub."""

from __future__ import annotations

import copy

import pytest

from bakeoff import catalog
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.plan.names import image_gaps
from bakeoff.serving import deploy, userdata
from bakeoff.serving.readiness import classify
from tests.stub_host import StubHost

KEY = "k" * 40


def _target(provider: str, **options):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == provider))
    t["provider_options"].update(options)
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def _run(target, tmp_path, *, docker: bool, apt: bool = True, driver: bool = True, toolkit: bool = True):
    """The image-check section under bash: ``docker`` whether the image has it, ``apt`` whether the
    distribution's install works, ``driver``/``toolkit`` whether the GPU's are there."""
    section = userdata.image_checks_section(target).replace("/dev/kfd", str(tmp_path / "kfd"))
    if driver:
        (tmp_path / "kfd").touch()
    host = StubHost(tmp_path / "host")
    if docker:
        host.stub("docker")
    if not apt:  # the distribution's install fails
        host.stub("apt-get", "exit 100")
    else:  # installs docker.io as the distribution's package would: the docker command appears
        make_docker = f'printf "#!/bin/bash\\nexit 0\\n" > {host.bin}/docker && chmod +x {host.bin}/docker'
        host.stub("apt-get", f'[ "$*" = "-qy install docker.io" ] && {{ {make_docker}; }}; exit 0')
    host.stub("nvidia-smi", "exit 0" if driver else "exit 9")
    host.stub("systemctl")
    if toolkit:
        host.stub("nvidia-container-runtime")
    out = host.run(section + "\necho checks-passed\n")
    return out.returncode, out.stdout + out.stderr, host.calls


def test_an_image_without_docker_gets_the_distributions_docker_with_its_time_recorded(tmp_path):
    code, out, calls = _run(_target("vultr"), tmp_path, docker=False)
    assert code == 0 and "checks-passed" in out, out
    assert "bakeoff: node image os_id 2284 (Ubuntu 24.04 x64) has no Docker; installing" in out
    assert [c for c in calls if c.startswith("apt-get")] == ["apt-get -qy update", "apt-get -qy install docker.io"]
    assert "systemctl enable --now docker" in calls
    assert [line for line in out.splitlines() if line.startswith("bakeoff-install: docker ")][0].endswith("s")


def test_an_image_with_docker_installs_nothing(tmp_path):
    code, out, calls = _run(_target("vultr"), tmp_path, docker=True)
    assert code == 0 and "checks-passed" in out and not [c for c in calls if c.startswith("apt-get")]
    assert "bakeoff-install" not in out


@pytest.mark.parametrize(
    "provider,kw,lacks",
    [
        ("vultr", {"docker": False, "apt": False}, "Docker;"),
        ("vultr", {"docker": True, "driver": False}, "AMD GPU driver;"),
        ("aws", {"docker": True, "driver": False}, "NVIDIA GPU driver;"),
        ("aws", {"docker": True, "toolkit": False}, "NVIDIA container toolkit;"),
    ],
)
def test_what_a_boot_cannot_install_stops_it_naming_the_image_and_the_one_to_use(tmp_path, provider, kw, lacks):
    t = _target(provider)
    code, out, _ = _run(t, tmp_path, **kw)
    assert code == 1 and "checks-passed" not in out, out
    (line,) = [x for x in out.splitlines() if x.startswith("bakeoff: node image") and f" has no {lacks} use " in x]
    row = catalog.node_images()[provider]
    assert row.image in line and f"use {row.instead} instead" in line and lacks in line
    assert classify(out)[0] == "node_image" and "node_image" in deploy.CERTAIN_FAILURES


def test_the_plans_own_image_is_the_one_named(tmp_path):
    t = _target("vultr", os_image=1743)
    code, out, _ = _run(t, tmp_path, docker=True, driver=False)
    assert code == 1 and "bakeoff: node image os_image 1743 has no AMD GPU driver" in out


def test_the_checks_run_after_the_firewall_and_before_anything_uses_docker():
    script = userdata.render(_target("vultr"), api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32")
    at = {k: script.index(k) for k in ("# 2. only the plan", "bn(){", "# 3. the API key", "docker pull")}
    assert at["# 2. only the plan"] < at["bn(){"] < at["# 3. the API key"] < at["docker pull"]


def test_plan_check_warns_where_the_default_image_lacks_or_may_lack_what_the_boot_needs():
    vultr = plan_from_dict({**_plan_raw("vultr")})
    (warning,) = image_gaps(vultr)
    assert warning.startswith("targets[0].provider_options.os_image:") and "no GPU driver" in warning
    assert "Docker is installed at boot" in warning and catalog.node_images()["vultr"].instead in warning
    own = plan_from_dict(_plan_raw("vultr", os_image=1743))
    assert image_gaps(own) == []  # the plan chose its image: the boot script checks it on the node
    assert image_gaps(load_plan("local-demo")) == []


def _plan_raw(provider: str, **options):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == provider))
    t["provider_options"].update(options)
    raw["targets"] = [t]
    return raw


def test_a_script_over_the_limit_drops_its_prose_comments_and_nothing_else():
    """What lets the image checks fit the 16 KB limit: prose comments go, the marks readiness and the
    sandbox read stay, and the heredocs (checksummed programs) are untouched."""
    import re
    import subprocess

    full = userdata.render(_target("vultr"), api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32")
    compact = userdata.without_prose(full)
    assert len(compact) < len(full) and "# 3. the API key" in full and "# 3. the API key" not in compact
    assert [x for x in full.splitlines() if x.startswith("# bakeoff-")] == [
        x for x in compact.splitlines() if x.startswith("# bakeoff-")
    ]
    heredocs = re.compile(r"<<'(\w+)'\n(.*?)\n\1\n", re.S)
    assert heredocs.findall(full) == heredocs.findall(compact)
    assert subprocess.run(["bash", "-n"], input=compact, text=True).returncode == 0
