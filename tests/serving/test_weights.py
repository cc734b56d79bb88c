"""Model weights on a node: the boot script's weights step (token only through a root-only file, NVMe
cache, S3 mirror, verification run with real bash against a fake cache), its failure kinds, and what
deploy records (download and load time, where from)."""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from bakeoff import catalog, store
from bakeoff.core.instance import Instance
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.serving import deploy, tls, userdata
from bakeoff.serving.readiness import FAILURES, classify
from tests.stub_host import StubHost

KEY = "bk-" + "0123456789abcdef" * 2 + "01234567"
TOKEN = "hf_" + "SeCrEt" * 6  # a made-up hub token: it must appear nowhere
REPO = "example-org/Model-FP8"
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def target(**changes):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == "aws"))
    t.update(changes)
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def fake_cache(root: Path, repo: str = REPO, *, shards=SHARDS, tokenizer=True, rev="0123abcd") -> Path:
    """A hub cache the way huggingface_hub lays it out: refs/main -> snapshots/<rev>/ (symlinks to blobs)."""
    d = root / "hub" / ("models--" + repo.replace("/", "--"))
    snap = d / "snapshots" / rev
    (d / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (d / "refs").mkdir()
    (d / "refs" / "main").write_text(rev)
    files = {
        "config.json": "{}",
        "model.safetensors.index.json": json.dumps(
            {
                "metadata": {"total_size": 8},
                "weight_map": {"a.weight": SHARDS[0], "b.weight": SHARDS[1], "c": SHARDS[1]},
            }
        ),
    }
    files |= {s: "0123" for s in shards}
    if tokenizer:
        files["tokenizer.json"] = '{"model": {}}'
    for name, text in files.items():
        blob = d / "blobs" / f"blob-{name}"
        blob.write_text(text)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return snap


def section(script: str, begin: str, end: str) -> str:
    return script[script.index(begin) : script.index(end) + len(end)]


# -- the rendered step -------------------------------------------------------------------------------


def test_the_token_reaches_the_download_only_through_the_root_only_file():
    ident = tls.node_identity("run-weights", "node")
    t = target(secrets={"HF_TOKEN": "huggingface_default"}, weights={"s3_mirror": "s3://aws_weights@wbucket/hf"})
    spec = {
        "api_key": KEY,
        "shutdown_after_s": 7200,
        "expires_at": time.time() + 7200,
        "tls": {"cert": ident.cert_pem, "key": ident.key_pem},
        "agent": {"url": "https://bucket.example/client.zip", "sha256": "a" * 64, "requirements": []},
        "secrets": {"HF_TOKEN": TOKEN},  # what the pipeline hands the provider: values never rendered
    }
    script = userdata.render_for(t, spec)
    assert TOKEN not in script and "HF_TOKEN=" not in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert len(script.encode()) < userdata.MAX_BYTES
    step = section(script, "# 7. model weights", "w_push=$((")
    assert step.index("set +x") < step.index("docker run")
    download = next(line for line in step.splitlines() if "docker run" in line)
    assert "$w_e" in download and 'w_e="--env-file /etc/bakeoff/secrets/serve.env"' in step
    # bakeoff's own downloader in the agent's digest-pinned image, never the plan's serving image
    assert catalog.agent_image() in step and userdata.image_for(t) not in step and f"w_r={t.checkpoint_id}" in step
    # the mirror: pulled before the hub, pushed back after a hub download, without the conn id
    assert "w_s3=s3://wbucket/hf/models--" in step and "aws_weights" not in step
    assert step.index('aws s3 sync --only-show-errors "$w_s3/"') < step.index('w_dl "$w_r"')
    # the secrets wait comes first; the engine starts after the step, from the cache, read-only, offline
    assert script.index("waiting for the serving secrets") < script.index("# 7. model weights")
    engine = shlex.split(next(line for line in script.splitlines() if line.startswith("docker run ")))
    assert "/mnt/nvme/hf-cache/hub:/root/.cache/huggingface/hub:ro" in engine and "HF_HUB_OFFLINE=1" in engine
    assert script.index("# 7. model weights") < script.index("\ndocker run ") < script.index(userdata.WEIGHTS_DONE)


def test_a_cache_outside_mnt_is_never_formatted():
    script = userdata.weights_section(target(weights={"cache_dir": "/data/hf"}))
    assert "mkfs" not in script and "mountpoint" not in script
    assert "mkfs.ext4" in userdata.weights_section(target())  # the default, /mnt/nvme, mounts the instance store


# -- the verification, with real bash ----------------------------------------------------------------


def run_verify(cache: Path) -> tuple[int, str]:
    verify = section(userdata.weights_section(target()), "# weights-verify: begin", "# weights-verify: end")
    prog = f'set -uo pipefail\nw_d="{cache}/hub/models--{REPO.replace("/", "--")}"\n{verify}\nw_ok; rc=$?\n'
    out = StubHost(cache.parent / "verify-host").run(prog + 'echo "$rc|$w_miss"')
    out.check_returncode()
    rc, missing = out.stdout.strip().split("|", 1)
    return int(rc), missing


def test_verify_passes_a_complete_snapshot(tmp_path):
    fake_cache(tmp_path)
    assert run_verify(tmp_path) == (0, "")


def test_verify_names_a_missing_shard(tmp_path):
    fake_cache(tmp_path, shards=SHARDS[:1])
    assert run_verify(tmp_path) == (1, SHARDS[1])


def test_verify_names_a_missing_tokenizer_and_an_empty_cache(tmp_path):
    fake_cache(tmp_path, tokenizer=False)
    assert run_verify(tmp_path) == (1, "tokenizer.json|tokenizer.model")
    rc, missing = run_verify(tmp_path / "nothing")
    assert rc == 1 and missing.split() == ["tokenizer.json|tokenizer.model", "model.safetensors.index.json"]


def test_a_dangling_symlink_is_a_missing_shard(tmp_path):
    snap = fake_cache(tmp_path)
    (snap / SHARDS[0]).resolve().unlink()  # the blob gone, the snapshot's link left: an interrupted download
    assert run_verify(tmp_path) == (1, SHARDS[0])


# -- the whole step, with real bash (docker and aws: small stand-ins on PATH) ------------------------


FAKE_DOCKER = """# stands in for `docker run ... -v HOST:/hub ... sh -c FETCH REPO`: "downloads" per $FAKE_HUB
for a in "$@"; do case "$a" in *:/hub) hub="${a%:/hub}";; esac; done
echo "args: $*" >> "$FAKE_LOG"
case "$FAKE_HUB" in
  gated) echo "huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url"; exit 1;;
  partial|full) d="$hub/models--example-org--Model-FP8/snapshots/r1"; mkdir -p "$d" "${d%/snapshots/r1}/refs"
    echo r1 > "${d%/snapshots/r1}/refs/main"; echo '{}' > "$d/tokenizer.json"
    printf '{"weight_map": {"a": "%s", "b": "%s"}}' "$S0" "$S1" > "$d/model.safetensors.index.json"
    echo 0123 > "$d/$S0"; [ "$FAKE_HUB" = full ] && echo 0123 > "$d/$S1"; exit 0;;
esac
"""


def run_step(
    tmp_path: Path, hub: str, *, cached: bool = False, secrets_file: bool = True, **changes
) -> tuple[int, str, dict]:
    cache, logs = tmp_path / "cache", tmp_path / "log"
    for d in (cache, logs):
        d.mkdir(exist_ok=True)
    if cached:
        fake_cache(cache)
    host = StubHost(tmp_path / "host", {"docker": FAKE_DOCKER})
    t = target(checkpoint=REPO, weights={"cache_dir": str(cache)}, **changes)
    step = userdata.weights_section(t, log_dir=str(logs))
    step = step.replace(userdata.SECRETS_ENV, str(tmp_path / "serve.env"))  # the node's root-only file, here
    if secrets_file:
        (tmp_path / "serve.env").write_text(f"HF_TOKEN={TOKEN}\n")
        (tmp_path / "serve.env").chmod(0o600)
    env = {
        "FAKE_HUB": hub,
        "FAKE_LOG": str(tmp_path / "docker.log"),
        "S0": SHARDS[0],
        "S1": SHARDS[1],
    }
    prog = f"set -uo pipefail\n{step}\n{userdata.WEIGHTS_DONE}\n"
    out = host.run(prog, env=env)
    doc = json.loads((logs / "weights.json").read_text())
    return out.returncode, out.stdout + out.stderr, doc


def test_step_downloads_verifies_and_reports(tmp_path):
    rc, output, doc = run_step(tmp_path, "full")
    assert rc == 0, output
    assert doc["source"] == "hub" and doc["ok"] is True and doc["failure"] is None and doc["missing"] == []
    assert doc["checkpoint"] == REPO and doc["files"] == 4 and doc["bytes"] > 0
    assert doc["download_s"] >= 0 and doc["engine_started"] >= doc["finished"] >= doc["started"]
    assert userdata.weights_from_output(output) == doc  # the console line deploy reads back
    args = (tmp_path / "docker.log").read_text()
    assert f"--env-file {tmp_path / 'serve.env'}" in args and TOKEN not in args and TOKEN not in output


def test_step_uses_a_complete_cache_without_downloading(tmp_path):
    rc, output, doc = run_step(tmp_path, "gated", cached=True)
    assert rc == 0 and doc["source"] == "cache" and doc["ok"] is True
    assert not (tmp_path / "docker.log").exists()


def test_step_without_a_token_file_downloads_anonymously(tmp_path):
    rc, _, doc = run_step(tmp_path, "full", secrets_file=False)
    assert rc == 0 and doc["ok"] is True and "--env-file" not in (tmp_path / "docker.log").read_text()


def test_a_speculative_draft_in_its_own_repo_is_fetched_too(tmp_path):
    """The engine runs offline, so an EAGLE3 draft must be in the cache before it starts."""
    draft = "example-org/GLM-5.2-EAGLE3"
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "draft_model": draft}
    glm = {"model": "glm-5.2", "quantization": "fp8", "tensor_parallel": 8, "speculative": spec}
    rc, output, doc = run_step(tmp_path, "full", cached=True, **glm)
    assert rc == 0 and doc["source"] == "cache", output  # the checkpoint was cached, the draft was not
    assert (tmp_path / "docker.log").read_text().count(draft) == 1
    assert userdata.weights_section(target(checkpoint=REPO)).count("w_dl ") == 1  # no draft: only the checkpoint


def test_gated_repo_stops_the_boot_as_weights_download(tmp_path):
    rc, output, doc = run_step(tmp_path, "gated")
    assert rc == 1 and doc["ok"] is False and doc["failure"] == "weights_download"
    kind, evidence = classify(output)
    assert kind == "weights_download" and "lacks access" in evidence and TOKEN not in output


def test_partial_download_stops_the_boot_as_weights_incomplete(tmp_path):
    rc, output, doc = run_step(tmp_path, "partial")
    assert rc == 1 and doc["failure"] == "weights_incomplete" and doc["missing"] == [SHARDS[1]]
    kind, evidence = classify(output)
    assert kind == "weights_incomplete" and SHARDS[1] in evidence


# -- classification and deploy's record --------------------------------------------------------------


@pytest.mark.parametrize(
    "text,kind",
    [
        ("bakeoff: weights_download: the hub refused x/y: gated or private", "weights_download"),
        ("huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo", "weights_download"),
        ("bakeoff: weights_incomplete: x/y lacks: model-00002-of-00002.safetensors", "weights_incomplete"),
        ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files", "weights_incomplete"),
    ],
)
def test_classify_names_weights_failures(text, kind):
    assert classify("bakeoff: boot\n" + text + "\nbakeoff: bakeoff-serve exited with code 1")[0] == kind
    assert kind in FAILURES and kind in deploy.CERTAIN_FAILURES


def test_deploy_records_download_and_load_time_from_the_console_line(tmp_path):
    t = target(checkpoint=REPO)
    line = {
        "source": "mirror",
        "checkpoint": REPO,
        "bytes": 8_000_000_000,
        "files": 5,
        "download_s": 42.5,
        "mirror_push_s": 0,
        "started": 1000.0,
        "finished": 1042.5,
        "engine_started": 1043.0,
        "ok": True,
        "failure": None,
        "missing": [],
    }
    output = f"bakeoff: boot\n{userdata.WEIGHTS_MARK}{json.dumps(line)}\nbakeoff-log: loading\n"
    inst = Instance("aws", "i-1", t.slug, "run", "running", launched_at=900.0)
    facts = deploy.weights_facts(t, inst, output, ready_at=1100.0)
    assert facts["source"] == "mirror" and facts["download_s"] == 42.5 and facts["load_s"] == 57.0
    assert facts["bytes"] == 8_000_000_000 and facts["ok"] is True
    assert deploy.weights_facts(t, inst, "no line", 1100.0)["source"].startswith("unknown")


def test_emulator_downloads_nothing_and_loads_from_process_start():
    raw = load_plan("local-demo").model_dump(mode="json")
    t = plan_from_dict(raw).targets[0]
    inst = Instance("local", "e-1", t.slug, "run", "running", launched_at=100.0)
    facts = deploy.weights_facts(t, inst, None, ready_at=103.5)
    assert facts == {**facts, "source": "none (emulator)", "download_s": 0.0, "load_s": 3.5}


def test_failure_record_keeps_the_weights_facts_and_no_token(tmp_path):
    t = target(checkpoint=REPO)
    line = {"source": "hub", "checkpoint": REPO, "ok": False, "failure": "weights_download", "missing": []}
    output = f"{userdata.WEIGHTS_MARK}{json.dumps(line)}\nbakeoff: weights_download: the hub refused {REPO}: gated\n"
    log = tmp_path / "node.log"
    log.write_text(output)
    inst = Instance("aws", "i-1", t.slug, "run", "running", host="127.0.0.1", port=9, log=str(log))
    with pytest.raises(deploy.DeployFailed) as e:
        deploy.check_serving(t, inst, api_key=KEY, out_dir=tmp_path, waited_s=1.0, masked=(TOKEN,))
    assert e.value.failure == "weights_download"
    doc = store.read_json(tmp_path / "deploy.json")
    assert doc["failure"] == "weights_download" and doc["weights"]["failure"] == "weights_download"
    assert TOKEN not in (tmp_path / "deploy.json").read_text()
