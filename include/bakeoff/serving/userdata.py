"""Cloud-init user-data: the boot script that turns a bare GPU node into a serving endpoint.

Why a boot script rather than SSH: it needs no inbound access, runs even if Airflow dies, and the
same text works on EC2, Vultr and DigitalOcean. It does, in order:
  1. arms the cloud-side kill switch (``shutdown -h +N``; EC2 launches with
     InstanceInitiatedShutdownBehavior=terminate, so power-off is termination),
  2. lets only the plan's CIDR reach the serving port (host firewall; docker uses the host network
     so the INPUT chain applies),
  3. records provenance (driver, ROCm/CUDA, firmware, image digest) and starts a GPU power sampler,
  4. when a client bundle was staged: fetches it, checks its SHA-256, and starts the node agent
     (bakeoff's client, next to the server) in a stock Python container, firewalled like the
     serving port; it runs the co-located benchmark and hands back logs and power samples,
  5. starts the serving container, and reports its exit (with the log tail) on the console and in
     serve.log, which readiness reads back to classify a failure.

Every plan-supplied value is validated by the plan model and shell-quoted here again; the API key
sits in a root-only file and reaches the server as a shell variable, never on a logged line. The
key does travel inside the user-data, which the cloud shows to principals allowed to read instance
attributes; it is per run and per target, and dies with the node.
"""
from __future__ import annotations

import json
import re
import shlex
import time

from bakeoff import catalog
from bakeoff.serving import power

CONTAINER = "bakeoff-serve"
LOG_DIR = "/var/log/bakeoff"
TARGET_MARK = "# bakeoff-target: "   # one JSON line describing the target (no secrets)
AGENT_MARK = "# bakeoff-agent: "     # one JSON line: where the client bundle is and its checksum
AGENT_CONTAINER = "bakeoff-agent"
MAX_BYTES = 16384                    # EC2's user-data limit, the smallest of the clouds
SHUTDOWN_RE = re.compile(r"^shutdown -h \+(\d+) ", re.M)
KEY_VAR = "BAKEOFF_API_KEY"

# plan quantization -> engine flags; None = the checkpoint says (pre-quantized MXFP4 / BF16 weights)
_QUANT = {
    "vllm": {"bf16": ["--dtype", "bfloat16"], "fp8": ["--quantization", "fp8"],
             "fp4": ["--quantization", "modelopt_fp4"], "mxfp4": None},
    "sglang": {"bf16": ["--dtype", "bfloat16"], "fp8": ["--quantization", "fp8"],
               "fp4": ["--quantization", "modelopt_fp4"], "mxfp4": None},
}
_KV = {
    "vllm": {"auto": "auto", "bf16": "auto", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3"},
    "sglang": {"auto": "auto", "bf16": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3"},
}


def image_for(target) -> str:
    """The plan's image override, else the stack's image for this GPU (``rocm_mi300x``) or platform."""
    if target.image:
        return target.image
    images = target.stack_spec.images
    plat = target.gpu.platform
    image = images.get(f"{plat}_{target.gpu.name}") or images.get(plat)
    if not image:
        raise ValueError(f"targets.{target.name}.image: stack {target.stack} has no {plat} image; set image explicitly")
    return image


def _drop_flags(args: list[str], flags: set[str]) -> list[str]:
    """Remove ``--flag value`` pairs (and ``--flag=value``) the target sets explicitly."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def engine_args(target, port: int) -> list[str]:
    """Arguments after the image: model, parallelism, quantization, KV dtype, port, then plan extras.

    The target's own fields win over the catalog's per-GPU recipe (so the report never states a KV
    dtype the server did not use); the plan's engine_args come last and win over both.
    """
    stack, gpu = target.stack, target.gpu.name
    if stack not in _QUANT:
        raise ValueError(f"targets.{target.name}.stack: {stack} cannot be deployed on a cloud node; use vllm or sglang")
    quant = _QUANT[stack][target.quantization] or []
    kv = _KV[stack][target.kv_cache_dtype]
    model = target.model_spec.hf_id
    if stack == "vllm":
        own = ["serve", model, "--host", "0.0.0.0", "--port", str(port),
               "--tensor-parallel-size", str(target.tensor_parallel),
               "--pipeline-parallel-size", str(target.pipeline_parallel), *quant, "--kv-cache-dtype", kv]
    else:
        own = ["-m", "sglang.launch_server", "--model-path", model, "--host", "0.0.0.0", "--port", str(port),
               "--tp-size", str(target.tensor_parallel), "--pp-size", str(target.pipeline_parallel),
               *quant, "--kv-cache-dtype", kv, "--enable-metrics"]
    set_by_target = {"--kv-cache-dtype", "--quantization", "--dtype", "--tensor-parallel-size", "--tp-size", "--port", "--host"}
    recipe = _drop_flags(list(target.stack_spec.args.get(gpu, [])), set_by_target)
    return own + recipe + list(target.engine_args)


def serve_env(target) -> dict[str, str]:
    """Catalog environment for this GPU and stack, then the plan's env on top."""
    return {**target.stack_spec.env.get(target.gpu.name, {}), **target.env}


def docker_argv(target, port: int) -> list[str]:
    """The ``docker run`` command, with the API key as a reference to a shell variable."""
    entry = ["--entrypoint", "vllm"] if target.stack == "vllm" else ["--entrypoint", "python3"]
    return ["docker", "run", "-d", "--name", CONTAINER, "--network", "host", "--restart", "no",
            *catalog.docker_flags(target.gpu.vendor), "--env-file", "/etc/bakeoff/serve.env",
            "-v", "/opt/bakeoff/hf:/root/.cache/huggingface", *entry, image_for(target),
            *engine_args(target, port), "--api-key"]


def target_summary(target, port: int) -> dict:
    """What the node serves, as one JSON line in the script (the sandbox boots its emulator from it;
    the plan's target holds no secret)."""
    return {"port": port, "image": image_for(target), "target": target.model_dump(mode="json")}


def _firewall(port: int, ingress_cidr: str | None) -> str:
    q = shlex.quote
    if not ingress_cidr:
        return ("# no ingress_cidr: the port is reachable only through the cloud firewall / a tunnel\n"
                f"iptables -I INPUT -p tcp --dport {port} ! -s 127.0.0.1 -j DROP")
    allow = "ip6tables" if ":" in ingress_cidr else "iptables"
    return (f"iptables -I INPUT -p tcp --dport {port} -j DROP\n"
            f"ip6tables -I INPUT -p tcp --dport {port} -j DROP || true\n"
            f"{allow} -I INPUT -p tcp --dport {port} -s {q(ingress_cidr)} -j ACCEPT\n"
            f"iptables -I INPUT -p tcp --dport {port} -s 127.0.0.1 -j ACCEPT")


def agent_section(agent: dict | None, serve_port: int, expires_at: float | None) -> str:
    """Fetch the client bundle, refuse it unless its SHA-256 matches, start the agent container."""
    if not agent:
        return "# no client bundle staged: no node agent (the benchmark client runs remotely)"
    from bakeoff.agent import AGENT_PORT  # noqa: PLC0415
    q = shlex.quote
    sha = agent["sha256"]
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise ValueError("agent.sha256: expected 64 lowercase hex digits")
    reqs = [r for r in agent["requirements"] if re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", r)]
    if len(reqs) != len(agent["requirements"]):
        raise ValueError("agent.requirements: expected name==version pins only")
    run = ("python -m zipfile -e /opt/bakeoff/client.zip /opt/bakeoff/client && "
           f"pip install --no-cache-dir --quiet {' '.join(reqs)} && "
           "PYTHONPATH=/opt/bakeoff/client exec python -m bakeoff agent "
           f"--serve-url http://127.0.0.1:{serve_port} --key-file /etc/bakeoff/api_key --log-dir {LOG_DIR} "
           f"--work-dir /var/lib/bakeoff --port {AGENT_PORT} --bundle {sha}"
           + (f" --expires-at {int(expires_at)}" if expires_at else ""))
    return f"""{_firewall(AGENT_PORT, agent.get("ingress_cidr"))}
mkdir -p /opt/bakeoff /var/lib/bakeoff
if curl -fsSL --retry 5 -o /opt/bakeoff/client.zip {q(agent["url"])} \\
   && echo "{sha}  /opt/bakeoff/client.zip" | sha256sum -c --quiet -; then
  docker run -d --name {AGENT_CONTAINER} --network host --restart no \\
    -v /opt/bakeoff:/opt/bakeoff -v {LOG_DIR}:{LOG_DIR}:ro -v /etc/bakeoff/api_key:/etc/bakeoff/api_key:ro \\
    -v /var/lib/bakeoff:/var/lib/bakeoff {q(catalog.agent_image())} sh -c {q(run)}
else
  echo "bakeoff: client bundle download or checksum failed; no node agent"
fi"""


def render(target, *, api_key: str, shutdown_after_s: float, ingress_cidr: str | None,
           agent: dict | None = None, expires_at: float | None = None) -> str:
    """The whole boot script. ``shutdown_after_s`` comes from the budget estimate (kill switch);
    ``agent`` is the staged client bundle (url, sha256, requirements), if any."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{16,128}", api_key):
        raise ValueError("api_key must be 16-128 letters, digits, - or _ (it is written into a root-only file)")
    port = target.stack_spec.port
    q = shlex.quote
    minutes = max(1, int(shutdown_after_s // 60) + 1)
    env_lines = "\n".join(f"{k}={v}" for k, v in serve_env(target).items())
    argv = " ".join(q(a) for a in docker_argv(target, port))
    image = q(image_for(target))
    fw = _firewall(port, ingress_cidr)
    agent_mark = json.dumps({"sha256": agent["sha256"], "url": agent["url"]}, sort_keys=True) if agent else "{}"
    agent_sh = agent_section({**agent, "ingress_cidr": ingress_cidr} if agent else None, port, expires_at)
    sampler = power.sampler_script(target.gpu.vendor, LOG_DIR)
    script = f"""#!/bin/bash
# bakeoff boot script (generated; every plan value below is validated and shell-quoted)
{TARGET_MARK}{json.dumps(target_summary(target, port), sort_keys=True)}
{AGENT_MARK}{agent_mark}
set -uo pipefail
mkdir -p {LOG_DIR} /opt/bakeoff/hf && chmod 0700 {LOG_DIR}
exec > >(tee -a {LOG_DIR}/boot.log > /dev/console) 2>&1
echo "bakeoff: boot $(date -u +%FT%TZ)"

# 1. kill switch: power off (= terminate) after the run's budgeted time, even if Airflow is gone
shutdown -h +{minutes} "bakeoff kill switch" || (sleep {minutes * 60} && poweroff) &

# 2. only the plan's CIDR reaches port {port}
{fw}

# 3. the API key: root-only file, read into a variable, never echoed
install -d -m 0700 /etc/bakeoff
umask 077
cat > /etc/bakeoff/api_key <<'BAKEOFF_KEY'
{api_key}
BAKEOFF_KEY
cat > /etc/bakeoff/serve.env <<'BAKEOFF_ENV'
{env_lines}
BAKEOFF_ENV
{KEY_VAR}="$(cat /etc/bakeoff/api_key)"

# 4. provenance and power sampling
{sampler}

# 5. the node agent (before the serving image: it hands back the logs if that pull or start fails)
{agent_sh}

# 6. the serving container; its exit and log tail go to the console for readiness to classify
if ! docker pull {image}; then
  echo "bakeoff: image pull failed for {image}"
  exit 1
fi
echo "bakeoff-image-digest: $(docker image inspect --format '{{{{index .RepoDigests 0}}}}' {image} 2>/dev/null)"
{argv} "${KEY_VAR}"
unset {KEY_VAR}
(code=$(docker wait {CONTAINER}); echo "bakeoff: {CONTAINER} exited with code $code";
 docker logs --tail 200 {CONTAINER} 2>&1 | sed -e "s/$(cat /etc/bakeoff/api_key)/<api-key>/g" -e 's/^/bakeoff-log: /') &
# the serving log, key masked, for the agent to hand back when a deployment fails
(docker logs -f {CONTAINER} 2>&1 | sed -u -e "s/$(cat /etc/bakeoff/api_key)/<api-key>/g" >> {LOG_DIR}/serve.log) &
"""
    if len(script.encode()) > MAX_BYTES:
        raise ValueError(f"targets.{target.name}: the boot script is {len(script.encode())} bytes, over the clouds' "
                         f"{MAX_BYTES}-byte user-data limit; shorten env, engine_args or the image name")
    return script


def render_for(target, spec: dict) -> str:
    """The boot script a provider's create() sends: the pipeline's spec carries the key, the expiry,
    the kill-switch delay from the budget estimate and the staged client bundle."""
    shutdown_after = spec.get("shutdown_after_s") or max(60.0, float(spec["expires_at"]) - time.time())
    return render(target, api_key=spec["api_key"], shutdown_after_s=shutdown_after,
                  ingress_cidr=target.provider_options.ingress_cidr, agent=spec.get("agent"),
                  expires_at=spec.get("expires_at"))


def target_from_userdata(script: str) -> dict | None:
    """The target summary line a boot script carries (the sandbox boots emulators from it)."""
    for line in script.splitlines():
        if line.startswith(TARGET_MARK):
            return json.loads(line[len(TARGET_MARK):])
    return None


def shutdown_minutes(script: str) -> int | None:
    m = SHUTDOWN_RE.search(script)
    return int(m.group(1)) if m else None


def agent_from_userdata(script: str) -> dict | None:
    """The client bundle a boot script fetches (url, sha256), if it starts an agent."""
    for line in script.splitlines():
        if line.startswith(AGENT_MARK):
            return json.loads(line[len(AGENT_MARK):]) or None
    return None


def api_key_from_userdata(script: str) -> str | None:
    lines = script.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("cat > /etc/bakeoff/api_key") and i + 1 < len(lines):
            return lines[i + 1].strip()
    return None
