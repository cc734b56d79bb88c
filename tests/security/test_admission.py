"""One admission: every plan ``bakeoff run`` (start_run) refuses, ``plan check`` refuses too, exiting
non-zero with the same message (so the same field first), and start_run records nothing for it.

The corpus holds each case issue 33 lists (a budget estimate over the cap, a cap over the installation's
ceiling, a target longer than max_instance_hours, an attacker's image asking for the hub token, a static
base_url on loopback) and the installation's other refusals (a target larger than its cloud's node
limit, a claim the plan does not match, a workload file outside the workloads folder, an unusable
approval threshold, an oversize boot script), each run through both paths with one environment.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bakeoff import installation
from bakeoff.cli import main
from bakeoff.plan import load_plan
from bakeoff.plan.target import Target
from bakeoff.run import admission, pipeline
from tests.plan_fixtures import without_deployment

ATTACKER = "docker.io/attacker/anything:latest"


def _cloud() -> dict[str, Any]:
    """The real-cloud plan without its serving secrets (floating recipe images get none)."""
    raw = load_plan("mi355x-vs-b200").model_dump(mode="json")
    for t in raw["targets"]:
        t["secrets"] = {}
    return raw


def _demo() -> dict[str, Any]:
    return load_plan("local-demo").model_dump(mode="json")


def over_cap(raw=None):
    raw = _cloud()
    raw["budget_usd"] = 100
    return raw, {}


def over_ceiling(raw=None):
    raw = _cloud()
    raw["budget_usd"] = 3000
    return raw, {}


def over_instance_hours(raw=None):
    raw = _cloud()
    raw["max_instance_hours"] = 0.1
    return raw, {}


def attacker_image_with_secrets(raw=None):
    raw = _cloud()
    t = raw["targets"][1]
    t.update(image=ATTACKER, secrets={"HF_TOKEN": "huggingface_default"})
    return raw, {}


def static_on_loopback(raw=None):
    raw = _demo()
    t = without_deployment(Target.model_validate(copy.deepcopy(raw["targets"][0])).model_dump(mode="json"))
    t.update(provider="static", provider_options={"base_url": "http://127.0.0.1:8100"}, price={"usd_per_hour": 40.0})
    raw["targets"] = [t]
    return raw, {}


def bad_node_limits(raw=None):
    return _cloud(), {admission.NODE_LIMITS_ENV: '{"aws": 0}'}


def claim_missing(raw=None):
    raw = _demo()
    raw["claims"] = ["no-such-claim"]
    return raw, {}


def bad_threshold(raw=None):
    return _cloud(), {admission.THRESHOLD_ENV: "lots"}


def oversize_boot_script(raw=None):
    raw = _cloud()
    raw["targets"][1]["env"] = {f"VLLM_X{i}": "y" * 200 for i in range(120)}
    return raw, {}


CORPUS: list[Callable[..., tuple[dict[str, Any], dict[str, Any]]]] = [
    over_cap,
    over_ceiling,
    over_instance_hours,
    attacker_image_with_secrets,
    static_on_loopback,
    bad_node_limits,
    claim_missing,
    bad_threshold,
    oversize_boot_script,
]


@pytest.fixture(autouse=True)
def installation_defaults(monkeypatch):
    for env in (
        installation.TRUSTED_IMAGES_ENV,
        installation.PRIVATE_ENDPOINTS_ENV,
        admission.NODE_LIMITS_ENV,
        admission.THRESHOLD_ENV,
        "BAKEOFF_BUDGET_CEILING_USD",
    ):
        monkeypatch.delenv(env, raising=False)


def _plan_file(case, tmp_path: Path, monkeypatch) -> str | None:
    try:
        raw, env = case()
    except Exception as e:  # noqa: BLE001 - a case the plan model itself refuses has no file to check
        pytest.fail(f"{case.__name__}: the corpus case could not be built: {e}")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    raw["name"] = case.__name__.replace("_", "-")
    path = tmp_path / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.__name__)
def test_plan_check_refuses_what_run_refuses_with_the_same_message(case, data_root, tmp_path, monkeypatch, capsys):
    path = _plan_file(case, tmp_path, monkeypatch)
    with pytest.raises(admission.REFUSALS) as refused:
        pipeline.start_run(path, f"manual__{case.__name__}")
    message = str(refused.value)
    assert not list(data_root.rglob("start.json")), "a refused plan must record no run"
    capsys.readouterr()
    assert main(["plan", "check", path]) == 2
    err = capsys.readouterr().err.strip()
    if case is oversize_boot_script:  # the stand-in certificate's ECDSA signature varies by a few bytes
        err, message = (re.sub(r"[0-9,]+ bytes", "N bytes", x) for x in (err, message))
    assert err == f"error: {message}"
    field = message.split(":", 1)[0]
    assert field and len(field) < 60 and "\n" not in field, f"the message names no field first: {message[:120]}"


def test_the_corpus_cases_each_meet_a_different_refusal(data_root, tmp_path, monkeypatch):
    """Each case is refused for its own reason, not all by the first check (the field differs)."""
    fields = []
    for case in CORPUS:
        with monkeypatch.context() as m:
            path = _plan_file(case, tmp_path, m)
            with pytest.raises(admission.REFUSALS) as refused:
                pipeline.start_run(path, f"manual__x_{case.__name__}")
        fields.append(str(refused.value).split(":", 1)[0])
    assert len(fields) == len(CORPUS)
    assert {"budget_usd", "max_instance_hours", "targets[1].image", "targets[0].provider_options.base_url"} <= set(
        fields
    ), fields


def test_a_plan_admission_lets_run_passes_plan_check(data_root, capsys):
    assert main(["plan", "check", "local-demo"]) == 0
    out = capsys.readouterr().out
    assert "approval: not needed" in out and "installation ceiling" in out
