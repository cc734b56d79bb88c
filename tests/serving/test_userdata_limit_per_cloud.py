"""The boot script's size limit is the cloud's: EC2's 16 KB everywhere, OCI's metadata 32,000 bytes (user_data
base64-encoded within it). A 671B recipe's node with TLS and the agent (~16.5 KB) launches on OCI, not on EC2."""

from __future__ import annotations

import base64

import pytest

from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.serving import userdata
from bakeoff_sandbox import oci as fake_oci


def _oci_target(env_bytes: int):
    raw = load_plan("mi355x-vs-b200-oci-sandbox").model_dump(mode="json")
    raw["targets"][0]["env"] = {f"VAR_{i}": "x" * 100 for i in range(env_bytes // 110)}
    return plan_from_dict(raw).targets[0]


def _render(t, max_bytes):
    return userdata.render(
        t, api_key="bk-" + "1" * 40, shutdown_after_s=3600, ingress_cidr=None, max_bytes=max_bytes
    )  # fmt: skip


def test_oci_takes_a_script_over_ec2s_limit_and_refuses_one_over_its_own():
    t = _oci_target(4000)
    script = _render(t, userdata.max_bytes_for("oci"))
    assert userdata.MAX_BYTES < len(script.encode()) <= userdata.max_bytes_for("oci")
    assert len(base64.b64encode(script.encode())) + len("user_data") < fake_oci.METADATA_MAX_BYTES
    with pytest.raises(ValueError, match=r"over the clouds' 16384-byte user-data limit"):
        _render(t, userdata.max_bytes_for("aws"))
    with pytest.raises(ValueError, match=r"over oci's 23250-byte user-data limit; shorten env"):
        _render(_oci_target(16000), userdata.max_bytes_for("oci"))
    assert userdata.limit_words("vultr") == "the clouds' 16,384-byte user-data limit"
