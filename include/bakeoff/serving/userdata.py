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
  4b. fetches the checkpoint (NVMe cache, S3 mirror, hub) and verifies it before the engine starts,
     timing it for the report and the evaluation's cost (``weights_section``),
  5. starts the serving container, and reports its exit (with the log tail) on the console and in
     serve.log, which readiness reads back to classify a failure.

Every plan-supplied value is validated by the plan model and shell-quoted here again. Keys and
secrets never travel in clear and never sit on a command line:
  - the serving port and the agent speak TLS with the node's own certificate (tls.py): its private
    key is written into a root-only file, and every client pins the certificate;
  - the API key sits in a root-only file; vLLM reads it from an env file (``VLLM_API_KEY``), SGLang
    from a root-only ``--config`` file, ATOM and TensorRT-LLM sit on loopback behind the node's front
    (front.py), which reads it itself, so it is on no ``docker run`` argv or process listing;
  - serving secrets (HF_TOKEN, registry tokens) are not in the user-data at all: only their names.
    The boot script waits (bounded) for the worker to hand them to the node agent over the pinned
    TLS channel, which writes them into a root-only env file that only bakeoff's own weights
    downloader reads (in the agent's digest-pinned image); the serving container never gets it.
The API key and the TLS private key do travel inside the user-data, which the cloud shows to
principals allowed to read instance attributes; both are per run and per target, and die with the node.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from bakeoff import catalog, engines
from bakeoff.core.launch import AGENT_PORT, LaunchSpec
from bakeoff.core.pinning import check_cert
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan.target import Target
from bakeoff.providers.registry import resolve
from bakeoff.serving import front, hub_fetch, power
from bakeoff.serving.tls import stand_in_identity

CONTAINER = "bakeoff-serve"
LOG_DIR = "/var/log/bakeoff"
TARGET_MARK = "# bakeoff-target: "  # one JSON line describing the target (no secrets)
AGENT_MARK = "# bakeoff-agent: "  # one JSON line: where the client bundle is and its checksum
AGENT_CONTAINER = "bakeoff-agent"
# The bundle's presigned URL, set once in the script: with temporary credentials it runs to about 1.2 KB
BUNDLE_URL_VAR = "BAKEOFF_BUNDLE_URL"
MAX_BYTES = 16384  # EC2's user-data limit, the smallest of the clouds (a cloud taking more says so in the registry)

SHUTDOWN_RE = re.compile(r"^shutdown -h \+(\d+) ", re.M)
KILL_MARK = "# bakeoff-kill-switch: "  # one JSON line: what the kill switch does on this cloud, and when
SECRETS_MARK = "# bakeoff-secrets: "  # one JSON line: the NAMES of the serving secrets the node waits for
TLS_DIR = "/etc/bakeoff/tls"
TLS_CERT, TLS_KEY = f"{TLS_DIR}/node.crt", f"{TLS_DIR}/node.key"
SECRETS_ENV = "/etc/bakeoff/secrets/serve.env"
SECRETS_WAIT_S = 1800  # the worker pushes them once the agent answers (deploy.push_secrets)
WEIGHTS_JSON = f"{LOG_DIR}/weights.json"  # the weights step's facts (source, bytes, timings, failure)
WEIGHTS_MARK = "bakeoff-weights: "  # the same facts as one console line, which deploy reads back
# what the engine container sees: the node's HF hub cache, read-only, and no hub access (loads only what was verified)
HUB_IN_CONTAINER = "/root/.cache/huggingface/hub"
# after the engine container starts: its load time (to the first ready probe) runs from here
WEIGHTS_DONE = "w_eng=$(date +%s.%N); w_json true null"
_SECRET_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_PEM_KEY = re.compile(r"-----BEGIN PRIVATE KEY-----\n[A-Za-z0-9+/=\n]+-----END PRIVATE KEY-----\n?")


def _catalog_gpu(target: Target) -> catalog.Gpu:
    """The target's GPU from the hardware catalog: a boot script is rendered only for a node a cloud
    launches, which names a catalog instance type (described hardware is an existing endpoint)."""
    gpu = target.gpu
    if not isinstance(gpu, catalog.Gpu):
        raise ValueError(f"targets.{target.name}.instance_type: a launched node needs a catalog instance type")
    return gpu


def image_for(target: Target) -> str:
    """The plan's image override (a custom stack's own), else the stack's image for this GPU
    (``rocm_mi300x``) or platform."""
    if target.image:
        return target.image
    if target.custom is not None:
        return target.custom.image
    images = target.stack_spec.images
    gpu = _catalog_gpu(target)
    plat = gpu.platform
    image = images.get(f"{plat}_{gpu.name}") or images.get(plat)
    if not image:
        raise ValueError(f"targets.{target.name}.image: stack {target.stack} has no {plat} image; set image explicitly")
    return image


def engine_port(target: Target, port: int) -> int:
    """Where the engine listens: the serving port, or the next one on loopback behind the node's front."""
    return port + 1 if engines.boot(target).fronted else port


def docker_argv(target: Target, port: int, *, tls: bool = False) -> list[str]:
    """The ``docker run`` command. No key on it: vLLM reads ``VLLM_API_KEY`` from a root-only env
    file, SGLang its ``api-key`` from a root-only config file mounted read-only, and an engine with no
    key check of its own (``engines.boot(target).fronted``) listens on loopback behind the node's front (front.py);
    with ``tls`` the server (or the front) serves the node's certificate. It never gets the serving
    secrets (the plan chose its image): it reads the verified weights offline. The engine's extra files
    are mounted read-only at their own paths."""
    engine = engines.boot(target)
    tls_flags = engine.tls_flags if tls and not engine.fronted else None
    mounts = ["-v", f"{TLS_DIR}:{TLS_DIR}:ro"] if tls_flags else []
    for path in engines.extra_files(target):
        mounts += ["-v", f"{path}:{path}:ro"]
    tail = ([tls_flags[0], TLS_CERT, tls_flags[1], TLS_KEY] if tls_flags else []) + list(engine.tail_args)
    host = "127.0.0.1" if engine.fronted else "0.0.0.0"
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
        *catalog.docker_flags(_catalog_gpu(target).vendor),
        "--env-file",
        "/etc/bakeoff/serve.env",
        *engine.key_args,
        *mounts,
        *weights_mounts(target),
        "--entrypoint",
        engine.entrypoint,
        image_for(target),
        *engines.command(target, engine_port(target, port), host),
        *tail,
    ]


def _front(target: Target, port: int, tls: bool) -> str:
    """The front for an engine with no TLS or key check of its own (front.py); nothing for the others."""
    if not engines.boot(target).fronted:
        return ""
    words = front.argv(
        catalog.agent_image(),
        port,
        engine_port(target, port),
        (TLS_CERT, TLS_KEY) if tls else None,
        TLS_DIR if tls else None,
    )
    return (
        "# the front: TLS and the API-key check on the serving port, the engine on loopback; it holds the\n"
        "# serving port before the engine starts, so the engine's image can never take it\n"
        f"cat > {front.SCRIPT} <<'BAKEOFF_FRONT'\n{front.program()}\nBAKEOFF_FRONT\n"
        + " ".join(shlex.quote(w) for w in words)
        + f"\nfor _ in $(seq 120); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 1; done"
        + f"\n(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null"
        + f' || {{ echo "bakeoff: the front did not take port {port}"; exit 1; }}'
    )


def _extra_files(target: Target) -> str:
    """The engine's extra files (TensorRT-LLM's options YAML), written before it starts."""
    out = []
    for path, text in engines.extra_files(target).items():
        if "BAKEOFF_FILE" in text:
            raise ValueError(f"targets.{target.name}: an engine file may not contain the heredoc marker BAKEOFF_FILE")
        out.append(f"cat > {shlex.quote(path)} <<'BAKEOFF_FILE'\n{text.rstrip()}\nBAKEOFF_FILE")
    return "\n".join(out)


def _key_files(target: Target) -> str:
    """Shell lines writing the key where the engine reads it (its ``engines.Boot``)."""
    return engines.boot(target).key_line


def _tls_files(tls: dict[str, Any] | None) -> str:
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


def _hub_folder(repo: str) -> str:
    """The hub cache's folder for a repo (huggingface_hub's layout: models--org--name)."""
    return "models--" + repo.replace("/", "--")


def weights_mounts(target: Target) -> list[str]:
    """The engine's view of the weights: the node's hub cache, read-only, with the hub switched off, so it
    loads exactly what the weights step verified (and a missing file fails fast instead of downloading)."""
    return ["-v", f"{target.weights.cache_dir.rstrip('/')}/hub:{HUB_IN_CONTAINER}:ro", "-e", "HF_HUB_OFFLINE=1"]


# weights.json, one line: strings quoted, numbers, booleans and the failure (JSON) as given
_WEIGHTS_JSON_FORMAT = (
    '{"source": "%s", "checkpoint": "%s", "bytes": %s, "files": %s, "download_s": %s, "mirror_push_s": %s, '
    '"started": %s, "finished": %s, "engine_started": %s, "ok": %s, "failure": %s, "missing": [%s]}\\n'
)


def _instance_store(mnt: str) -> str:
    """Mount the instance store at ``mnt`` when the image left it unmounted: the first NVMe disk with no
    filesystem and nothing mounted, formatted ext4 (one disk, no RAID: kept simple).
    Only for a cache under /mnt/<disk>: a cache elsewhere is taken to be on a disk the image set up."""
    if not re.fullmatch(r"/mnt/[A-Za-z0-9_.-]+", mnt):
        return f"# the weights cache is not under /mnt/<disk>: {mnt} is used as the image set it up"
    q = shlex.quote
    return f"""if ! mountpoint -q {q(mnt)}; then
  for d in /dev/nvme*n1; do
    [ -b "$d" ] && [ -z "$(lsblk -no FSTYPE,MOUNTPOINT "$d" | tr -d ' \\n')" ] || continue
    mkfs.ext4 -q -F "$d" && mkdir -p {q(mnt)} && mount "$d" {q(mnt)} && echo "bakeoff: weights cache on $d" && break
  done
fi"""


def weights_section(target: Target, log_dir: str = LOG_DIR) -> str:
    """Fetch and verify the checkpoint before the engine starts, timing it (weights.json + one console line).

    Where from, in order: the node's cache (``weights.cache_dir``, on the local NVMe: see _instance_store),
    then the S3 mirror (``aws s3 sync`` with the node's own credentials: the instance role on EC2), then
    the hub (bakeoff's own downloader, hub_fetch.py, in the agent's digest-pinned image: never the plan's
    image, whose code must not see the token), after which the snapshot is pushed to the mirror so the
    next run skips the paid download. The hub token reaches the download only through docker's
    ``--env-file`` from the root-only secrets file: never on a command line, never echoed, never in the
    serving container. A failed download stops the boot as ``weights_download``; a tokenizer or a shard
    of the index missing afterwards as ``weights_incomplete`` (readiness classifies both). Terse: it must
    fit the 16 KB user-data beside the biggest recipe."""
    q = shlex.quote
    w = target.weights
    repo = target.checkpoint_id
    cache = w.cache_dir.rstrip("/")
    mirror = w.mirror_parts
    s3 = f"s3://{mirror[1]}/{mirror[2] + '/' if mirror[2] else ''}{_hub_folder(repo)}" if mirror else ""
    t = int(w.download_timeout_s)
    sync = f"timeout {t} aws s3 sync --only-show-errors"
    draft = engines.draft_repo(target)  # a speculative draft in its own repo: the engine runs offline, fetch it too
    draft_sh = f'[ -s "$w_c/hub/{_hub_folder(draft)}/refs/main" ] || w_dl {q(draft)}\n' if draft else ""
    return f"""# 7. model weights: NVMe cache, else S3 mirror, else hub; verified, timed (set +x: no token in a trace)
set +x
w_r={q(repo)}; w_c={q(cache)}; w_s3={q(s3)}; w_l={q(log_dir)}
w_d="$w_c/hub/{_hub_folder(repo)}"; w_src=cache; w_push=0; w_eng=; w_t0=$(date +%s.%N)
{_instance_store("/".join(cache.split("/")[:3]))}
mkdir -p "$w_c/hub"
# weights-verify: begin
w_ok() {{  # a tokenizer and every shard of the index, else their names in w_miss
  w_snap="$w_d/snapshots/$(cat "$w_d/refs/main" 2>/dev/null)"; w_miss=
  [ -s "$w_snap/tokenizer.json" ] || [ -s "$w_snap/tokenizer.model" ] || [ -s "$w_snap/tiktoken.model" ] \\
    || w_miss="tokenizer.json|tokenizer.model"
  if [ -f "$w_snap/model.safetensors.index.json" ]; then
    for f in $(grep -o '"[^"]*\\.safetensors"' "$w_snap/model.safetensors.index.json" | tr -d '"' | sort -u); do
      [ -s "$w_snap/$f" ] || w_miss="$w_miss $f"
    done
  elif ! ls "$w_snap"/*.safetensors >/dev/null 2>&1; then w_miss="$w_miss model.safetensors.index.json"; fi
  w_miss="${{w_miss# }}"; [ -z "$w_miss" ]
}}
# weights-verify: end
w_json() {{  # $1 ok, $2 failure (JSON)
  w_t1=${{w_t1:-$(date +%s.%N)}}
  printf {q(_WEIGHTS_JSON_FORMAT)} "$w_src" "$w_r" "$(du -sbL "$w_snap" 2>/dev/null | cut -f1 | grep . || echo 0)" \\
    "$(find -L "$w_snap" -type f 2>/dev/null | wc -l)" "$(awk "BEGIN {{print $w_t1 - $w_t0}}")" "$w_push" "$w_t0" \\
    "$w_t1" "${{w_eng:-null}}" "$1" "$2" "$(for m in $w_miss; do printf '"%s",' "$m"; done | sed 's/,$//')" \\
    > "$w_l/weights.json"
  echo "{WEIGHTS_MARK}$(cat "$w_l/weights.json")"
}}
w_fail() {{ w_json false "\\"$1\\""; echo "bakeoff: $1: $2"; exit 1; }}
w_e=; [ -s {SECRETS_ENV} ] && w_e="--env-file {SECRETS_ENV}"
w_dl() {{  # one repo from the hub into the cache, or the boot stops as weights_download
  timeout {t} docker run --rm --network host $w_e -v "$w_c/hub:/hub" -v {hub_fetch.SCRIPT}:{hub_fetch.SCRIPT}:ro \
    {q(catalog.agent_image())} python {hub_fetch.SCRIPT} "$1" /hub > "$w_l/weights-download.log" 2>&1 && return
  grep -qiE '40[13] Client Error|gated|unauthori[sz]ed|forbidden|RepositoryNotFound' "$w_l/weights-download.log" \
    && w_fail weights_download "the hub refused $1: gated or private, and the token (secrets.HF_TOKEN) \
is missing or lacks access; accept its licence on huggingface.co with the token's account"
  w_fail weights_download "$1: failed or over {t}s: $(tail -n 1 "$w_l/weights-download.log" | cut -c1-300)"
}}
if ! w_ok; then
  w_src=hub
  [ -n "$w_s3" ] && command -v aws >/dev/null && {sync} "$w_s3/" "$w_d/" && w_ok && w_src=mirror
  [ $w_src = hub ] && {{ w_dl "$w_r"; w_ok || w_fail weights_incomplete "$w_r lacks: $w_miss"; }}
fi
{draft_sh}w_t1=$(date +%s.%N)
if [ $w_src = hub ] && [ -n "$w_s3" ] && command -v aws >/dev/null; then  # the next run skips the hub
  w_p=$(date +%s); {sync} --exclude 'blobs/*' --exclude '.no_exist/*' "$w_d/" "$w_s3/" \\
    || echo "bakeoff: weights push to the mirror failed"; w_push=$(( $(date +%s) - w_p ))
fi"""


def node_image(target: Target) -> tuple[str, str]:
    """(the node image the launch boots, what to launch instead when it lacks what a boot cannot
    install): the plan's own image field, else the cloud's default (catalog ``node_images``)."""
    row = catalog.node_images().get(target.provider)
    instead = row.instead if row else "an image with Docker and the GPU driver"
    for field in PROVIDERS[target.provider].image_fields:
        value = target.provider_options.get(field)
        if value:
            return f"{field} {value}", instead
    return (row.image if row else f"{target.provider}'s default image"), instead


def image_checks_section(target: Target) -> str:
    """Check what the node image provides before anything relies on it: Docker is installed from the
    distribution where missing (its time recorded), a missing GPU driver or NVIDIA container toolkit
    stops the boot with a console line naming the image and the one to use instead."""
    label, instead = node_image(target)
    q = shlex.quote
    if _catalog_gpu(target).vendor == "nvidia":
        gpu = (
            'nvidia-smi -L >/dev/null||bn "NVIDIA GPU driver"\n'
            'command -v nvidia-container-runtime >/dev/null||bn "NVIDIA container toolkit"'
        )
    else:
        gpu = '[ -e /dev/kfd ]||bn "AMD GPU driver"'
    # terse: the whole script must fit the clouds' 16 KiB user-data limit
    return f"""bi={q(label)} bu={q(instead)} bm="bakeoff: node image $bi has no"
bn(){{ echo "$bm $1; use $bu instead";exit 1;}}
command -v docker >/dev/null||{{ bt=$SECONDS;echo "$bm Docker; installing docker.io"
apt-get -qy update&&apt-get -qy install docker.io&&systemctl enable --now docker
command -v docker >/dev/null||bn Docker;echo "bakeoff-install: docker $((SECONDS-bt))s";}}
{gpu}"""


def target_summary(target: Target, port: int) -> dict[str, Any]:
    """What the node serves, as one JSON line in the script (the sandbox boots its emulator from it;
    the plan's target holds no secret)."""
    return {
        "port": port,
        "image": image_for(target),
        "checkpoint": target.checkpoint_id,
        # only what differs from the defaults (a plan validates back to the same target): user-data is 16 KB
        "target": target.model_dump(mode="json", exclude_defaults=True),
    }


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


def kill_switch_minutes(shutdown_after_s: float) -> int:
    """Minutes after the boot script starts at which the kill switch fires (``shutdown -h +N``)."""
    return max(1, int(shutdown_after_s // 60) + 1)


def _default_deny() -> str:
    """Inbound TCP to any other port is dropped (an engine a plan moved to another port, anything its
    image listens on): loopback and replies to the node's own connections pass. Appended, so the
    per-port rules (inserted at the top) decide first; fails closed like them."""
    tail = (
        "-A INPUT -i lo -j ACCEPT && {0} -A INPUT -p tcp -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
        " && {0} -A INPUT -p tcp -j DROP"
    )
    return (
        f"if ! {{ iptables {tail.format('iptables')} && {{ [ ! -e /proc/net/if_inet6 ] || "
        f"{{ ip6tables {tail.format('ip6tables')}; }}; }}; }}; then\n"
        '  echo "bakeoff: firewall default-deny failed (error: a rule could not be installed); '
        'stopping before anything listens"\n  exit 1\nfi'
    )


def kill_switch_section(provider: str, minutes: int) -> str:
    """What ends billing at the run's budgeted time on this cloud, with no help from Airflow.

    Powering off ends billing only on EC2 (launched with InstanceInitiatedShutdownBehavior=terminate).
    A cloud whose kill switch is ``self-delete`` names its section in the registry (``self_delete``:
    OCI's, in ``oci_sdk``, deletes the node through its instance principal, then powers off as a
    fallback). Vultr and DigitalOcean bill a
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
    self_delete = PROVIDERS[provider].self_delete
    assert self_delete is not None, f"{provider}: a self-delete kill switch names its section in the registry"
    section = cast(Callable[[int], str], resolve(self_delete))
    return f"{mark}\n{section(minutes)}"


def kill_switch_from_userdata(script: str) -> dict[str, Any] | None:
    """The kill switch a boot script arms (action, cloud, minutes); the sandbox's nodes act on it."""
    for line in script.splitlines():
        if line.startswith(KILL_MARK):
            kill: dict[str, Any] = json.loads(line[len(KILL_MARK) :])
            return kill
    minutes = shutdown_minutes(script)
    return {"action": "power-off", "cloud": "", "minutes": minutes} if minutes else None


# What the agent's container needs to read the GPUs' energy counters through the vendor's library
# (serving.gpu_counters), and no more. NVIDIA: the container toolkit's --gpus all with the driver's
# utility capability only, which mounts libnvidia-ml (NVML) and nvidia-smi but no CUDA library.
# AMD: the device nodes amdsmi opens and ROCm's install read-only: ROCm ships the amdsmi Python package
# with its own copy of libamd_smi.so beside it (/opt/rocm/share/amd_smi, which gpu_counters puts on the
# path), so the library matches the node's ROCm, where a PyPI amdsmi would still need the host's library.
# Neither gets --ipc=host, --privileged or seccomp=unconfined, which the serving container has.
AGENT_GPU_FLAGS: dict[str, tuple[str, ...]] = {
    "nvidia": ("--gpus", "all", "-e", "NVIDIA_DRIVER_CAPABILITIES=utility"),
    "amd": (
        "--device",
        "/dev/kfd",
        "--device",
        "/dev/dri",
        "-v",
        "/opt/rocm:/opt/rocm:ro",
    ),
}


def agent_gpu_flags(vendor: str | None) -> tuple[str, ...]:
    """The ``docker run`` flags that let the agent open the node's GPUs for telemetry; none for a vendor
    bakeoff has no library reader for (the CLI sampler on the host is then the power path)."""
    return AGENT_GPU_FLAGS.get(vendor or "", ())


def agent_section(agent: dict[str, Any] | None, serve_port: int, expires_at: float | None) -> str:
    """Fetch the client bundle, refuse it unless its SHA-256 matches, start the agent container."""
    if not agent:
        return "# no client bundle staged: no node agent (the benchmark client runs remotely)"
    from bakeoff.serving.bundle import HASHES_IN_BUNDLE  # noqa: PLC0415 - reads installed metadata on import

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
        + (f" --gpu-vendor {agent['vendor']}" if agent.get("vendor") in ("nvidia", "amd") else "")
    )
    mounts = (f" -v {TLS_DIR}:{TLS_DIR}:ro" if tls else "") + (
        f" -v {SECRETS_ENV.rsplit('/', 1)[0]}:{SECRETS_ENV.rsplit('/', 1)[0]}" if secrets else ""
    )
    mounts += "".join(f" {q(w)}" for w in agent_gpu_flags(agent.get("vendor")))
    return f"""{_firewall(AGENT_PORT, agent.get("ingress_cidr"))}
mkdir -p /opt/bakeoff /var/lib/bakeoff
{BUNDLE_URL_VAR}={q(agent["url"])}
if curl -fsSL --retry 5 -o /opt/bakeoff/client.zip "${BUNDLE_URL_VAR}" \\
   && echo "{sha}  /opt/bakeoff/client.zip" | sha256sum -c --quiet -; then
  docker run -d --name {AGENT_CONTAINER} --network host --restart no \\
    -v /opt/bakeoff:/opt/bakeoff -v {LOG_DIR}:{LOG_DIR}:ro -v /etc/bakeoff/api_key:/etc/bakeoff/api_key:ro \\
    -v /var/lib/bakeoff:/var/lib/bakeoff{mounts} {q(catalog.agent_image())} sh -c {q(run)}
else
  echo "bakeoff: client bundle download or checksum failed; no node agent"
fi"""


def _own_limit(provider: str) -> int | None:
    info = PROVIDERS.get(provider)
    return info.user_data_max_bytes if info else None


def max_bytes_for(provider: str) -> int:
    """The boot script's limit on this cloud: EC2's 16 KB (the smallest) unless the cloud is known to take more
    (the registry's ``user_data_max_bytes``)."""
    return _own_limit(provider) or MAX_BYTES


def limit_words(provider: str) -> str:
    """The limit as an error names it: the cloud's own where it differs, else the clouds' common one."""
    who = f"{provider}'s" if _own_limit(provider) else "the clouds'"
    return f"{who} {max_bytes_for(provider):,}-byte user-data limit"


def render(
    target: Target,
    *,
    api_key: str,
    shutdown_after_s: float,
    ingress_cidr: str | None,
    agent: dict[str, Any] | None = None,
    expires_at: float | None = None,
    tls: dict[str, Any] | None = None,
    secret_names: list[str] | tuple[str, ...] = (),
    max_bytes: int | None = MAX_BYTES,
) -> str:
    """The whole boot script. ``shutdown_after_s`` comes from the budget estimate (kill switch);
    ``agent`` is the staged client bundle (url, sha256, requirements), if any; ``tls`` the node's
    certificate and key (``{"cert", "key"}`` PEM); ``secret_names`` the serving secrets the node
    waits for (names only: the values reach it through the agent, never the user-data). A script
    over ``max_bytes`` is refused (None only for size_at_launch, which measures it)."""
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
    minutes = kill_switch_minutes(shutdown_after_s)
    env_lines = "\n".join(f"{k}={v}" for k, v in engines.environment(target).items())
    argv = " ".join(q(a) for a in docker_argv(target, port, tls=bool(tls)))
    image = q(image_for(target))
    fw = _firewall(port, ingress_cidr)
    vendor = _catalog_gpu(target).vendor
    agent_mark = json.dumps({"sha256": agent["sha256"]}) if agent else "{}"  # the URL is in the script once
    agent_sh = agent_section(
        {**agent, "ingress_cidr": ingress_cidr, "tls": bool(tls), "secrets": bool(names), "vendor": vendor}
        if agent
        else None,
        port,
        expires_at,
    )
    sampler = power.sampler_script(vendor, LOG_DIR)
    script = f"""#!/bin/bash
# bakeoff boot script (generated; every plan value below is validated and shell-quoted)
{TARGET_MARK}{json.dumps(target_summary(target, port), sort_keys=True)}
{AGENT_MARK}{agent_mark}
{SECRETS_MARK}{json.dumps(names)}
set -uo pipefail
mkdir -p {LOG_DIR} && chmod 0700 {LOG_DIR}
exec > >(tee -a {LOG_DIR}/boot.log > /dev/console) 2>&1
echo "bakeoff: boot $(date -u +%FT%TZ)"

{kill_switch_section(target.provider, minutes)}

# 2. only the plan's CIDR reaches port {port}; every other inbound TCP port is closed
{fw}
{_default_deny()}

# 2b. what the node image lacks
{image_checks_section(target)}

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
{_extra_files(target)}
cat > {hub_fetch.SCRIPT} <<'BAKEOFF_HUB_FETCH'
{hub_fetch.program()}BAKEOFF_HUB_FETCH
sha256sum -c --quiet - <<< "{hub_fetch.SHA256}  {hub_fetch.SCRIPT}" \
  || {{ echo "bakeoff: weights downloader corrupted"; exit 1; }}
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
{weights_section(target)}
{_front(target, port, bool(tls))}
{argv}
{WEIGHTS_DONE}
(code=$(docker wait {CONTAINER}); echo "bakeoff: {CONTAINER} exited with code $code";
 docker logs --tail 200 {CONTAINER} 2>&1 | sed -f /etc/bakeoff/mask.sed -e 's/^/bakeoff-log: /') &
# the serving log, key masked (by a root-only sed script: the key is on no command line), for the
# agent to hand back when a deployment fails
(docker logs -f {CONTAINER} 2>&1 | sed -u -f /etc/bakeoff/mask.sed >> {LOG_DIR}/serve.log) &
"""
    if max_bytes is not None and len(script.encode()) > max_bytes:
        script = without_prose(script)
    if max_bytes is not None and len(script.encode()) > max_bytes:
        who = f"{target.provider}'s" if max_bytes != MAX_BYTES else "the clouds'"
        raise ValueError(
            f"targets.{target.name}: the boot script is {len(script.encode())} bytes, over {who} "
            f"{max_bytes}-byte user-data limit; shorten env, engine_args or the image name"
        )
    return script


_HEREDOC = re.compile(r"<<'(\w+)'$")


def without_prose(script: str) -> str:
    """The script less its prose comment lines (outside heredocs, whose programs are checksummed; the
    ``# bakeoff-`` marks stay): what a launch sends when the commented script is over the cloud's limit."""
    out, end = [], None
    for line in script.splitlines(keepends=True):
        if end is None and line.lstrip().startswith("# ") and not line.startswith(("# bakeoff-", "# weights-")):
            continue
        out.append(line)
        if end is None and (m := _HEREDOC.search(line.rstrip("\n"))):
            end = m.group(1)
        elif end is not None and line.rstrip("\n") == end:
            end = None
    return "".join(out)


def render_for(target: Target, spec: LaunchSpec | Mapping[str, Any]) -> str:
    """The boot script a provider's create() sends: the pipeline's spec carries the key, the expiry,
    the kill-switch delay from the budget estimate and the staged client bundle."""
    launch = LaunchSpec.of(spec)
    if not launch.api_key:
        raise ValueError(f"targets.{target.name}: a cloud launch needs its serving key (LaunchSpec.api_key)")
    if launch.shutdown_after_s:
        shutdown_after = launch.shutdown_after_s
    elif launch.expires_at is not None:
        shutdown_after = max(60.0, float(launch.expires_at) - time.time())
    else:
        raise ValueError(f"targets.{target.name}: a cloud launch needs its expiry (LaunchSpec.expires_at)")
    return render(
        target,
        api_key=launch.api_key,
        shutdown_after_s=shutdown_after,
        ingress_cidr=target.provider_options.get("ingress_cidr"),  # a cloud's option (plan.options.CloudOptions)
        agent=dict(launch.agent) if launch.agent else None,
        expires_at=launch.expires_at,
        tls=dict(launch.tls) if launch.tls else None,
        secret_names=sorted(launch.secrets),
        max_bytes=max_bytes_for(target.provider),
    )


# A presigned GET for the client bundle: about 200 bytes signed with long-term keys, about 1.2 KB with
# temporary credentials, whose session token rides in the query (boto3 1.x, measured 2026-12-02).
URL_BYTES_LONG_TERM_KEYS = 200
URL_BYTES_TEMPORARY_CREDENTIALS = 1200


def stand_in_launch(target: Target, url_bytes: int = URL_BYTES_TEMPORARY_CREDENTIALS) -> LaunchSpec:
    """A launch of ``target`` with stand-ins as long as a run's own: the run's key, a node certificate
    and key, a client bundle behind a presigned URL of ``url_bytes``, the target's secret names and a
    48-hour expiry. What ``plan check`` measures and the pre-flight's dry run sends; no secret in it."""
    from bakeoff.serving.bundle import requirements  # noqa: PLC0415 - only a stand-in launch needs the bundle's pins

    ident = stand_in_identity(target.slug)
    url = "https://" + "u" * (url_bytes - len("https://"))
    return LaunchSpec(
        api_key="bk-" + "0" * 40,  # secrets.api_key's length
        expires_at=time.time() + 48 * 3600,
        shutdown_after_s=48 * 3600,
        agent={"url": url, "sha256": "0" * 64, "requirements": list(requirements())},
        secrets={name: "stand-in" for name in sorted(target.secrets or {})},
        tls={"cert": ident.cert_pem, "key": ident.key_pem},
        boot=render_for,
    )


def size_at_launch(target: Target, url_bytes: int) -> int:
    """The target's boot script in bytes as a cloud launch would render it (``stand_in_launch``).
    ``plan check`` refuses a target over its cloud's limit (``max_bytes_for``) before any run, instead
    of provision refusing it after the budget and approval steps."""
    launch = stand_in_launch(target, url_bytes)
    script = render(
        target,
        api_key=launch.api_key or "",
        shutdown_after_s=launch.shutdown_after_s or 0.0,
        ingress_cidr=target.provider_options.get("ingress_cidr"),
        agent=dict(launch.agent or {}),
        expires_at=launch.expires_at,
        tls=dict(launch.tls or {}),
        secret_names=sorted(launch.secrets),
        max_bytes=None,
    )
    if len(script.encode()) > max_bytes_for(target.provider):  # as render sends it: its prose dropped
        script = without_prose(script)
    return len(script.encode())


def target_from_userdata(script: str) -> dict[str, Any] | None:
    """The target summary line a boot script carries (the sandbox boots emulators from it)."""
    for line in script.splitlines():
        if line.startswith(TARGET_MARK):
            summary: dict[str, Any] = json.loads(line[len(TARGET_MARK) :])
            return summary
    return None


def shutdown_minutes(script: str) -> int | None:
    m = SHUTDOWN_RE.search(script)
    return int(m.group(1)) if m else None


def agent_from_userdata(script: str) -> dict[str, Any] | None:
    """The client bundle a boot script fetches (url, sha256), if it starts an agent."""
    mark: dict[str, Any] = {}
    url = None
    for line in script.splitlines():
        if line.startswith(AGENT_MARK):
            mark = json.loads(line[len(AGENT_MARK) :]) or {}
        elif line.startswith(f"{BUNDLE_URL_VAR}="):
            url = shlex.split(line[len(BUNDLE_URL_VAR) + 1 :])[0]
    return {**mark, "url": url} if mark and url else None


def weights_from_output(text: str | None) -> dict[str, Any] | None:
    """The last weights line a node printed (the weights step's facts), or None when there is none."""
    text = text or ""
    at = text.rfind(WEIGHTS_MARK)
    if at < 0:
        return None
    line = text[at + len(WEIGHTS_MARK) :].split("\n", 1)[0]
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def secret_names_from_userdata(script: str) -> list[str]:
    """The serving secrets a boot script waits for (names only)."""
    for line in script.splitlines():
        if line.startswith(SECRETS_MARK):
            names: list[str] = json.loads(line[len(SECRETS_MARK) :])
            return names
    return []


def tls_from_userdata(script: str) -> dict[str, Any] | None:
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
