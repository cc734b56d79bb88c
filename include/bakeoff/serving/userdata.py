"""Cloud-init user-data: the boot script that turns a bare GPU node into a serving endpoint.

Why a boot script rather than SSH: it needs no inbound access, runs even if Airflow dies, and the
same text works on EC2, Vultr and DigitalOcean. It does, in order:
  1. arms the node-side kill switch, the one that ends billing on each cloud (``kill_switch_section``),
  2. lets only the plan's CIDR reach the serving port (host firewall; docker uses the host network
     so the INPUT chain applies),
  3. records provenance (driver, ROCm/CUDA, firmware, image digest) and starts a GPU power sampler,
  4. when a client bundle was staged: fetches it, checks its SHA-256, and starts the node agent
     (bakeoff's client, next to the server) in a stock Python container, firewalled like the
     serving port; it runs the co-located benchmark and hands back logs and power samples,
  5. starts the serving container, and reports its exit (with the log tail) on the console and in
     serve.log, which readiness reads back to classify a failure.

Every plan-supplied value is validated by the plan model and shell-quoted here again. Keys and
secrets never travel in clear and never sit on a command line:
  - the serving port and the agent speak TLS with the node's own certificate (tls.py): its private
    key is written into a root-only file, and every client pins the certificate;
  - the API key sits in a root-only file; vLLM reads it from an env file (``VLLM_API_KEY``), SGLang
    from a root-only ``--config`` file, so it is on no ``docker run`` argv or process listing;
  - serving secrets (HF_TOKEN, registry tokens) are not in the user-data at all: only their names.
    The boot script waits (bounded) for the worker to hand them to the node agent over the pinned
    TLS channel, which writes them into a root-only env file for the serving container.
The API key and the TLS private key do travel inside the user-data, which the cloud shows to
principals allowed to read instance attributes; both are per run and per target, and die with the node.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from importlib.metadata import version

from bakeoff import catalog
from bakeoff.agent import AGENT_PORT
from bakeoff.providers.registry import PROVIDERS
from bakeoff.serving import power
from bakeoff.serving.tls import check_cert

CONTAINER = "bakeoff-serve"
LOG_DIR = "/var/log/bakeoff"
TARGET_MARK = "# bakeoff-target: "  # one JSON line describing the target (no secrets)
AGENT_MARK = "# bakeoff-agent: "  # one JSON line: where the client bundle is and its checksum
AGENT_CONTAINER = "bakeoff-agent"
MAX_BYTES = 16384  # EC2's user-data limit, the smallest of the clouds
SHUTDOWN_RE = re.compile(r"^shutdown -h \+(\d+) ", re.M)
KILL_MARK = "# bakeoff-kill-switch: "  # one JSON line: what the kill switch does on this cloud, and when
SECRETS_MARK = "# bakeoff-secrets: "  # one JSON line: the NAMES of the serving secrets the node waits for
TLS_DIR = "/etc/bakeoff/tls"
TLS_CERT, TLS_KEY = f"{TLS_DIR}/node.crt", f"{TLS_DIR}/node.key"
SECRETS_ENV = "/etc/bakeoff/secrets/serve.env"
SECRETS_WAIT_S = 1800  # the worker pushes them once the agent answers (deploy.push_secrets)
SGLANG_CONFIG = "/etc/bakeoff/sglang.yaml"
_SECRET_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_PEM_KEY = re.compile(r"-----BEGIN PRIVATE KEY-----\n[A-Za-z0-9+/=\n]+-----END PRIVATE KEY-----\n?")

# plan quantization -> engine flags; None = the checkpoint says (pre-quantized MXFP4 / BF16 weights)
_QUANT = {
    "vllm": {
        "bf16": ["--dtype", "bfloat16"],
        "fp8": ["--quantization", "fp8"],
        "fp4": ["--quantization", "modelopt_fp4"],
        "mxfp4": None,
    },
    "sglang": {
        "bf16": ["--dtype", "bfloat16"],
        "fp8": ["--quantization", "fp8"],
        "fp4": ["--quantization", "modelopt_fp4"],
        "mxfp4": None,
    },
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
        own = [
            "serve",
            model,
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--tensor-parallel-size",
            str(target.tensor_parallel),
            "--pipeline-parallel-size",
            str(target.pipeline_parallel),
            *quant,
            "--kv-cache-dtype",
            kv,
        ]
    else:
        own = [
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--tp-size",
            str(target.tensor_parallel),
            "--pp-size",
            str(target.pipeline_parallel),
            *quant,
            "--kv-cache-dtype",
            kv,
            "--enable-metrics",
        ]
    set_by_target = {
        "--kv-cache-dtype",
        "--quantization",
        "--dtype",
        "--tensor-parallel-size",
        "--tp-size",
        "--port",
        "--host",
    }
    recipe = _drop_flags(list(target.stack_spec.args.get(gpu, [])), set_by_target)
    return own + recipe + list(target.engine_args)


def serve_env(target) -> dict[str, str]:
    """Catalog environment for this GPU and stack, then the plan's env on top."""
    return {**target.stack_spec.env.get(target.gpu.name, {}), **target.env}


def docker_argv(target, port: int, *, tls: bool = False, secrets: bool = False) -> list[str]:
    """The ``docker run`` command. No key on it: vLLM reads ``VLLM_API_KEY`` from a root-only env
    file, SGLang its ``api-key`` from a root-only config file mounted read-only; with ``tls`` the
    server serves the node's certificate; with ``secrets`` it gets the env file the agent wrote."""
    vllm = target.stack == "vllm"
    entry = ["--entrypoint", "vllm"] if vllm else ["--entrypoint", "python3"]
    key = ["--env-file", "/etc/bakeoff/key.env"] if vllm else ["-v", f"{SGLANG_CONFIG}:{SGLANG_CONFIG}:ro"]
    mounts = (["-v", f"{TLS_DIR}:{TLS_DIR}:ro"] if tls else []) + (["--env-file", SECRETS_ENV] if secrets else [])
    tail = (["--ssl-certfile", TLS_CERT, "--ssl-keyfile", TLS_KEY] if tls else []) + (
        [] if vllm else ["--config", SGLANG_CONFIG]
    )
    return [
        "docker",
        "run",
        "-d",
        "--name",
        CONTAINER,
        "--network",
        "host",
        "--restart",
        "no",
        *catalog.docker_flags(target.gpu.vendor),
        "--env-file",
        "/etc/bakeoff/serve.env",
        *key,
        *mounts,
        "-v",
        "/opt/bakeoff/hf:/root/.cache/huggingface",
        *entry,
        image_for(target),
        *engine_args(target, port),
        *tail,
    ]


def _key_files(target) -> str:
    """Shell lines writing the key where the engine reads it (printf is a builtin: no argv shows it)."""
    if target.stack == "vllm":
        return "printf 'VLLM_API_KEY=%s\\n' \"$(cat /etc/bakeoff/api_key)\" > /etc/bakeoff/key.env"
    return f'printf \'api-key: "%s"\\n\' "$(cat /etc/bakeoff/api_key)" > {SGLANG_CONFIG}'


def _tls_files(tls: dict | None) -> str:
    """The node's certificate and private key, into root-only files (checked: PEM only, no shell)."""
    if not tls:
        return "# no node certificate: plain http (only a loopback or pre-existing endpoint)"
    cert = check_cert(tls.get("cert") or "", "spec.tls.cert").strip()
    key = tls.get("key") or ""
    if not _PEM_KEY.fullmatch(key):
        raise ValueError("spec.tls.key: expected the node's PKCS#8 PEM private key (serving/tls.py node_identity)")
    return f"""install -d -m 0700 {TLS_DIR}
cat > {TLS_CERT} <<'BAKEOFF_CERT'
{cert}
BAKEOFF_CERT
cat > {TLS_KEY} <<'BAKEOFF_TLS_KEY'
{key.strip()}
BAKEOFF_TLS_KEY"""


def _secrets_wait(names: list[str]) -> str:
    """Wait (bounded) for the worker to push the serving secrets through the node agent."""
    if not names:
        return "# no serving secrets"
    return f"""echo "bakeoff: waiting for the serving secrets ({", ".join(names)}) from the worker"
waited=0
until [ -s {SECRETS_ENV} ]; do
  if [ "$waited" -ge {SECRETS_WAIT_S} ]; then
    echo "bakeoff: the serving secrets never arrived (no push through the node agent in {SECRETS_WAIT_S}s)"
    exit 1
  fi
  sleep 5; waited=$((waited + 5))
done"""


def target_summary(target, port: int) -> dict:
    """What the node serves, as one JSON line in the script (the sandbox boots its emulator from it;
    the plan's target holds no secret)."""
    return {"port": port, "image": image_for(target), "target": target.model_dump(mode="json")}


def _firewall(port: int, ingress_cidr: str | None) -> str:
    """Host firewall for one port, failing closed: if any rule fails the boot script says so and stops
    before anything listens (no serving container, no agent), so a node never serves unfiltered.
    IPv6 rules apply when the kernel has IPv6 (no /proc/net/if_inet6: no IPv6 socket can reach us)."""
    q = shlex.quote
    v6 = "{ [ ! -e /proc/net/if_inet6 ] || ip6tables -I INPUT -p tcp --dport %d %s-j DROP; }"
    if not ingress_cidr:
        note = "# no ingress_cidr: the port is reachable only through the cloud firewall / a tunnel\n"
        rules = [f"iptables -I INPUT -p tcp --dport {port} ! -s 127.0.0.1 -j DROP", v6 % (port, "! -s ::1 ")]
    else:
        note = ""
        allow = "ip6tables" if ":" in ingress_cidr else "iptables"
        rules = [
            f"iptables -I INPUT -p tcp --dport {port} -j DROP",
            v6 % (port, ""),
            f"{allow} -I INPUT -p tcp --dport {port} -s {q(ingress_cidr)} -j ACCEPT",
            f"iptables -I INPUT -p tcp --dport {port} -s 127.0.0.1 -j ACCEPT",
        ]
    chain = " \\\n  && ".join(rules)
    return (
        f"{note}if ! {{ {chain}; }}; then\n"
        f'  echo "bakeoff: firewall for port {port} failed (error: a rule could not be installed); '
        'stopping before anything listens"\n  exit 1\nfi'
    )


def kill_switch_section(provider: str, minutes: int) -> str:
    """What ends billing at the run's budgeted time on this cloud, with no help from Airflow.

    Powering off ends billing only on EC2 (launched with InstanceInitiatedShutdownBehavior=terminate).
    An OCI node deletes itself through its instance principal (its dynamic group's policy allows
    deleting bakeoff instances only), then powers off as a fallback. Vultr and DigitalOcean bill a
    stopped node and offer no token scoped to one node, so there the node powers off and the
    independent reaper (``bakeoff reap --loop`` / cron) deletes it.
    """
    action = PROVIDERS[provider].kill_switch
    mark = KILL_MARK + json.dumps({"action": action, "cloud": provider, "minutes": minutes}, sort_keys=True)
    if action != "self-delete":
        what = (
            "power off = terminate"
            if action == "terminate"
            else "power off; the cloud bills on until the reaper deletes it"
        )
        return (
            f"{mark}\n# 1. kill switch ({what}) after the run's budgeted time, even if Airflow is gone\n"
            f'shutdown -h +{minutes} "bakeoff kill switch" || (sleep {minutes * 60} && poweroff) &'
        )
    img = shlex.quote(catalog.agent_image())
    sdk = f"oci=={version('oci')}"  # the SDK version this installation is pinned to
    install_sdk = f"pip install --quiet --no-cache-dir --only-binary=:all: --target /ks {sdk}"
    terminate = (
        "import oci,sys; s=oci.auth.signers.InstancePrincipalsSecurityTokenSigner(); "
        "oci.core.ComputeClient({'region': s.region}, signer=s).terminate_instance(sys.argv[1])"
    )
    self_delete = f'python -c {shlex.quote(terminate)} "$iid"'
    return f"""{mark}
# 1. kill switch: after the run's budgeted time the node deletes itself (a stopped OCI node still bills),
#    authenticated as an instance principal; power-off follows as a fallback, even if Airflow is gone
mkdir -p /opt/bakeoff/ks
(docker run --rm -v /opt/bakeoff/ks:/ks {img} {install_sdk} >/dev/null 2>&1 || \\
   echo "bakeoff: kill switch: oci SDK install failed; power-off only") &
(sleep {minutes * 60}
 iid=$(curl -sf -H 'Authorization: Bearer Oracle' http://169.254.169.254/opc/v2/instance/id)
 docker run --rm --network host -v /opt/bakeoff/ks:/ks:ro -e PYTHONPATH=/ks {img} {self_delete} \\
   || echo "bakeoff: kill switch: self-delete of $iid failed; powering off"
 poweroff) &
shutdown -h +{minutes + 5} "bakeoff kill switch (fallback)" &"""


def kill_switch_from_userdata(script: str) -> dict | None:
    """The kill switch a boot script arms (action, cloud, minutes); the sandbox's nodes act on it."""
    for line in script.splitlines():
        if line.startswith(KILL_MARK):
            return json.loads(line[len(KILL_MARK) :])
    minutes = shutdown_minutes(script)
    return {"action": "power-off", "cloud": "", "minutes": minutes} if minutes else None


def agent_section(agent: dict | None, serve_port: int, expires_at: float | None) -> str:
    """Fetch the client bundle, refuse it unless its SHA-256 matches, start the agent container."""
    if not agent:
        return "# no client bundle staged: no node agent (the benchmark client runs remotely)"
    from bakeoff.agent.bundle import HASHES_IN_BUNDLE  # noqa: PLC0415 - reads installed metadata on import

    q = shlex.quote
    sha = agent["sha256"]
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise ValueError("agent.sha256: expected 64 lowercase hex digits")
    reqs = [r for r in agent["requirements"] if re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", r)]
    if len(reqs) != len(agent["requirements"]):
        raise ValueError("agent.requirements: expected name==version pins only")
    tls, secrets = bool(agent.get("tls")), bool(agent.get("secrets"))
    run = (
        "python -m zipfile -e /opt/bakeoff/client.zip /opt/bakeoff/client && "
        "pip install --no-cache-dir --quiet --require-hashes --only-binary=:all: "
        f"-r /opt/bakeoff/client/{HASHES_IN_BUNDLE} && "
        "PYTHONPATH=/opt/bakeoff/client exec python -m bakeoff agent "
        f"--serve-url {'https' if tls else 'http'}://127.0.0.1:{serve_port} --key-file /etc/bakeoff/api_key "
        f"--log-dir {LOG_DIR} --work-dir /var/lib/bakeoff --port {AGENT_PORT} --bundle {sha}"
        + (f" --expires-at {int(expires_at)}" if expires_at else "")
        + (f" --tls-cert {TLS_CERT} --tls-key {TLS_KEY}" if tls else "")
        + (f" --secrets-file {SECRETS_ENV}" if secrets else "")
    )
    mounts = (f" -v {TLS_DIR}:{TLS_DIR}:ro" if tls else "") + (
        f" -v {SECRETS_ENV.rsplit('/', 1)[0]}:{SECRETS_ENV.rsplit('/', 1)[0]}" if secrets else ""
    )
    return f"""{_firewall(AGENT_PORT, agent.get("ingress_cidr"))}
mkdir -p /opt/bakeoff /var/lib/bakeoff
if curl -fsSL --retry 5 -o /opt/bakeoff/client.zip {q(agent["url"])} \\
   && echo "{sha}  /opt/bakeoff/client.zip" | sha256sum -c --quiet -; then
  docker run -d --name {AGENT_CONTAINER} --network host --restart no \\
    -v /opt/bakeoff:/opt/bakeoff -v {LOG_DIR}:{LOG_DIR}:ro -v /etc/bakeoff/api_key:/etc/bakeoff/api_key:ro \\
    -v /var/lib/bakeoff:/var/lib/bakeoff{mounts} {q(catalog.agent_image())} sh -c {q(run)}
else
  echo "bakeoff: client bundle download or checksum failed; no node agent"
fi"""


def render(
    target,
    *,
    api_key: str,
    shutdown_after_s: float,
    ingress_cidr: str | None,
    agent: dict | None = None,
    expires_at: float | None = None,
    tls: dict | None = None,
    secret_names: list[str] | tuple[str, ...] = (),
) -> str:
    """The whole boot script. ``shutdown_after_s`` comes from the budget estimate (kill switch);
    ``agent`` is the staged client bundle (url, sha256, requirements), if any; ``tls`` the node's
    certificate and key (``{"cert", "key"}`` PEM); ``secret_names`` the serving secrets the node
    waits for (names only: the values reach it through the agent, never the user-data)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{16,128}", api_key):
        raise ValueError("api_key must be 16-128 letters, digits, - or _ (it is written into a root-only file)")
    names = sorted(secret_names)
    for n in names:
        if not _SECRET_NAME.fullmatch(n):
            raise ValueError(
                f"targets.{target.name}.secrets: {n[:40]!r} is not an environment variable name; "
                "use upper-case letters, digits and '_'"
            )
    if names and not agent:
        raise ValueError(
            f"targets.{target.name}.secrets: serving secrets ({', '.join(names)}) reach the node only "
            "through its agent over TLS, and no client bundle is staged for it; set the Airflow Variable "
            "bakeoff_client_bucket so the node agent runs, or drop the secrets (they are never put in "
            "user-data)"
        )
    if names and not tls:
        raise ValueError(
            f"targets.{target.name}.secrets: serving secrets need the node's TLS certificate (spec.tls) "
            "so they never cross the network in clear"
        )
    port = target.stack_spec.port
    q = shlex.quote
    minutes = max(1, int(shutdown_after_s // 60) + 1)
    env_lines = "\n".join(f"{k}={v}" for k, v in serve_env(target).items())
    argv = " ".join(q(a) for a in docker_argv(target, port, tls=bool(tls), secrets=bool(names)))
    image = q(image_for(target))
    fw = _firewall(port, ingress_cidr)
    agent_mark = json.dumps({"sha256": agent["sha256"], "url": agent["url"]}, sort_keys=True) if agent else "{}"
    agent_sh = agent_section(
        {**agent, "ingress_cidr": ingress_cidr, "tls": bool(tls), "secrets": bool(names)} if agent else None,
        port,
        expires_at,
    )
    sampler = power.sampler_script(target.gpu.vendor, LOG_DIR)
    script = f"""#!/bin/bash
# bakeoff boot script (generated; every plan value below is validated and shell-quoted)
{TARGET_MARK}{json.dumps(target_summary(target, port), sort_keys=True)}
{AGENT_MARK}{agent_mark}
{SECRETS_MARK}{json.dumps(names)}
set -uo pipefail
mkdir -p {LOG_DIR} /opt/bakeoff/hf && chmod 0700 {LOG_DIR}
exec > >(tee -a {LOG_DIR}/boot.log > /dev/console) 2>&1
echo "bakeoff: boot $(date -u +%FT%TZ)"

{kill_switch_section(target.provider, minutes)}

# 2. only the plan's CIDR reaches port {port}
{fw}

# 3. the API key and the node's TLS key: root-only files, never echoed nor on a command line
install -d -m 0700 /etc/bakeoff
umask 077
cat > /etc/bakeoff/api_key <<'BAKEOFF_KEY'
{api_key}
BAKEOFF_KEY
{_key_files(target)}
printf 's/%s/<api-key>/g\\n' "$(cat /etc/bakeoff/api_key)" > /etc/bakeoff/mask.sed
cat > /etc/bakeoff/serve.env <<'BAKEOFF_ENV'
{env_lines}
BAKEOFF_ENV
{_tls_files(tls)}
{f"install -d -m 0700 {SECRETS_ENV.rsplit('/', 1)[0]}" if names else ""}

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
{_secrets_wait(names)}
{argv}
(code=$(docker wait {CONTAINER}); echo "bakeoff: {CONTAINER} exited with code $code";
 docker logs --tail 200 {CONTAINER} 2>&1 | sed -f /etc/bakeoff/mask.sed -e 's/^/bakeoff-log: /') &
# the serving log, key masked (by a root-only sed script: the key is on no command line), for the
# agent to hand back when a deployment fails
(docker logs -f {CONTAINER} 2>&1 | sed -u -f /etc/bakeoff/mask.sed >> {LOG_DIR}/serve.log) &
"""
    if len(script.encode()) > MAX_BYTES:
        raise ValueError(
            f"targets.{target.name}: the boot script is {len(script.encode())} bytes, over the clouds' "
            f"{MAX_BYTES}-byte user-data limit; shorten env, engine_args or the image name"
        )
    return script


def render_for(target, spec: dict) -> str:
    """The boot script a provider's create() sends: the pipeline's spec carries the key, the expiry,
    the kill-switch delay from the budget estimate and the staged client bundle."""
    shutdown_after = spec.get("shutdown_after_s") or max(60.0, float(spec["expires_at"]) - time.time())
    return render(
        target,
        api_key=spec["api_key"],
        shutdown_after_s=shutdown_after,
        ingress_cidr=target.provider_options.ingress_cidr,
        agent=spec.get("agent"),
        expires_at=spec.get("expires_at"),
        tls=spec.get("tls"),
        secret_names=sorted(spec.get("secrets") or {}),
    )


def target_from_userdata(script: str) -> dict | None:
    """The target summary line a boot script carries (the sandbox boots emulators from it)."""
    for line in script.splitlines():
        if line.startswith(TARGET_MARK):
            return json.loads(line[len(TARGET_MARK) :])
    return None


def shutdown_minutes(script: str) -> int | None:
    m = SHUTDOWN_RE.search(script)
    return int(m.group(1)) if m else None


def agent_from_userdata(script: str) -> dict | None:
    """The client bundle a boot script fetches (url, sha256), if it starts an agent."""
    for line in script.splitlines():
        if line.startswith(AGENT_MARK):
            return json.loads(line[len(AGENT_MARK) :]) or None
    return None


def secret_names_from_userdata(script: str) -> list[str]:
    """The serving secrets a boot script waits for (names only)."""
    for line in script.splitlines():
        if line.startswith(SECRETS_MARK):
            return json.loads(line[len(SECRETS_MARK) :])
    return []


def tls_from_userdata(script: str) -> dict | None:
    """The node certificate and key a boot script installs (the sandbox's nodes serve them)."""

    def block(end: str) -> str | None:
        m = re.search(rf"<<'{end}'\n(.*?)\n{end}\n", script, re.S)
        return m.group(1) + "\n" if m else None

    cert, key = block("BAKEOFF_CERT"), block("BAKEOFF_TLS_KEY")
    return {"cert": cert, "key": key} if cert and key else None


def api_key_from_userdata(script: str) -> str | None:
    lines = script.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("cat > /etc/bakeoff/api_key") and i + 1 < len(lines):
            return lines[i + 1].strip()
    return None
