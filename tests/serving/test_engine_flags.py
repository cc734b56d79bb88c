"""Every shipped recipe's rendered argv (single-node, and each role of every multi-node arm) and every
plan's engine arguments, held to the flags its engine release's own parser accepts (vendored from the
engines' source by scripts/vendor_engine_flags.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bakeoff import catalog, engines
from bakeoff.clusters.cluster import NodeTarget
from bakeoff.plan import load_plan, multinode, plan_from_dict, recipes
from bakeoff.plan.target import Target
from bakeoff.serving.engine_flags import flag_name, release_for, unknown_flags
from bakeoff.serving.userdata import image_for

ROOT = Path(__file__).resolve().parents[2]
ENGINES = set(catalog.engine_flags()["engines"])


def _problems(what: str, target) -> list[str]:
    """Why ``target``'s argv would be refused by its engine release's parser, each naming ``what``."""
    engine = target.stack
    if engine not in ENGINES:
        return []
    image = image_for(target)
    release = release_for(image, engine)
    if release is None:
        return [f"{what}: image {image} is not in catalog/engine_flags.json (make engine-flags)"]
    argv = engines.command(target, target.stack_spec.port or 8000)
    return [
        f"{what}: {u.flag} is not a flag of {engine} {release} (image {image})"
        + (f"; nearest: {u.nearest}" if u.nearest else "")
        for u in unknown_flags(argv, engine, release)
    ]


def _recipe_target(name: str) -> Target | None:
    for provider in ("local", "oci", "aws"):
        try:
            return Target.model_validate({"name": "t", "provider": provider, "recipe": name})
        except ValueError:
            continue
    return None


def _arm_targets(name: str, arm: int) -> list[tuple[str, object]]:
    raw = {
        "name": "rack-plan",
        "budget_usd": 5000,
        "targets": [{"name": "t", "provider": "local", "recipe": name, "recipe_arm": arm}],
        "workloads": [{"name": "w", "input_len": 1024, "output_len": 128, "concurrency": [4]}],
    }
    (t,) = plan_from_dict(raw).targets
    return [(role, NodeTarget(t, 0, role)) for role in ("prefill", "decode")]


def test_every_single_node_recipe_renders_only_flags_its_engine_release_accepts():
    problems, rendered = [], 0
    for name in recipes.recipes():
        t = _recipe_target(name)
        if t is None:
            continue  # refused before spend (tests/plan/test_recipes.py): nothing would be launched
        problems += _problems(f"recipe {name}", t)
        rendered += 1
    assert rendered >= len(recipes.recipes()) - 8
    assert problems == [], "\n".join(problems)


def test_every_arm_of_every_multinode_recipe_renders_only_accepted_flags():
    problems, rendered = [], 0
    for name, r in multinode.multinode_recipes().items():
        for arm in range(len(r.arms)):
            for role, node in _arm_targets(name, arm):
                problems += _problems(f"multi-node recipe {name} arm {arm} {role}", node)
                rendered += 1
    assert rendered >= 2
    assert problems == [], "\n".join(problems)


def test_every_plans_engine_args_are_flags_of_its_engine_release():
    problems, held = [], 0
    for path in sorted((ROOT / "include" / "plans").glob("*.yaml")):
        for t in load_plan(path.stem).targets:
            if t.stack in ENGINES and t.provider != "local":
                problems += _problems(f"plan {path.stem} target {t.name}", t)
                held += 1
    assert held >= 4
    assert problems == [], "\n".join(problems)


def test_a_flag_the_release_lacks_is_named_with_the_nearest_one():
    argv = ["serve", "m", "--tensor-parallel-size", "8", "--max-num-seqz", "64", "--max_model_len=4096", "-1"]
    (bad,) = unknown_flags(argv, "vllm", "0.25.0")
    assert bad.flag == "--max-num-seqz" and bad.nearest == "--max-num-seqs"
    # argparse takes a unique prefix (allow_abbrev), and refuses one shared by several flags
    assert unknown_flags(["serve", "m", "--max-num-seq", "64"], "vllm", "0.25.0") == []
    assert [u.flag for u in unknown_flags(["serve", "m", "--max-num", "64"], "vllm", "0.25.0")] == ["--max-num"]
    vllm = catalog.engine_flags()["engines"]["vllm"]["0.25.0"]
    assert flag_name("--compilation_config.mode", vllm) == "--compilation-config"
    assert flag_name("--tp_size=8", catalog.engine_flags()["engines"]["trtllm"]["source-file"]) == "--tp_size"
    sglang = ["-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "8", "--enable-dp-atention"]
    assert [(u.flag, u.nearest) for u in unknown_flags(sglang, "sglang", "0.5.16")] == [
        ("--enable-dp-atention", "--enable-dp-attention")
    ]
    trt = ["-n", "1", "--oversubscribe", "trtllm-serve", "m", "--tp_size", "8", "--tp-size", "8"]
    assert [u.flag for u in unknown_flags(trt, "trtllm", "source-file")] == ["--tp-size"]


def test_every_shipped_image_is_held_to_a_vendored_release_with_its_basis():
    doc = catalog.engine_flags()
    spec = importlib.util.spec_from_file_location("vendor_engine_flags", ROOT / "scripts" / "vendor_engine_flags.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    shipped = script.shipped_images()
    assert set(shipped) == set(doc["images"]), "re-run make engine-flags: the shipped images changed"
    for image, held in doc["images"].items():
        assert held["engine"] == shipped[image] and held["version"] in doc["engines"][held["engine"]], image
        assert held["basis"]
    for engine, releases in doc["engines"].items():
        for release, facts in releases.items():
            assert facts["source"] and facts["read"] and len(facts["flags"]) >= 20, (engine, release)


@pytest.mark.parametrize(
    "engine,image,release",
    [
        ("vllm", "vllm/vllm-openai:v0.25.0", "0.25.0"),
        ("sglang", "lmsysorg/sglang:v0.5.16-cu130", "0.5.16"),
        ("sglang", "lmsysorg/sglang:v0.5.14-cu130@sha256:" + "0" * 64, "0.5.14"),
        ("atom", "rocm/atom:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom0.1.3", "0.1.3"),
        ("atom", "rocm/atom:rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260511", "20260511"),
        ("vllm", "vllm/vllm-openai:nightly-ac7509e2b1db40fec2f03dde1ed4e9dfdc2338c9", None),
        ("trtllm", "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post1", None),
    ],
)
def test_an_images_release_is_read_from_its_tag(engine, image, release):
    spec = importlib.util.spec_from_file_location("vendor_engine_flags", ROOT / "scripts" / "vendor_engine_flags.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.release_of(engine, image) == release
