"""Convert InferenceX's recipes into bakeoff's vendored recipe files.

    python scripts/vendor_recipes.py /path/to/InferenceX-checkout [--commit SHA --date YYYY-MM-DD]

The multi-node and disaggregated keys go to ``inferencex-multinode.yaml`` beside the single-node file
(``convert_multinode``): per key its orchestrator, engine, router, KV transfer engine and, per search-space
arm, the prefill and decode roles (workers, TP, EP, DP-attention, the recipe file each arm cites).

Reads ``configs/amd-master.yaml`` and ``configs/nvidia-master.yaml`` of a local InferenceX checkout and
writes ``include/bakeoff/recipes/inferencex.yaml``: one recipe per current single-node key for MI355X,
B200 and B300 whose model is in bakeoff's catalog (multi-node, disaggregated, Dynamo and A/B-experiment
keys are skipped). A key's search space often holds several arms; the recipe keeps the arm with the most
concurrency points (the main sweep) and notes the rest. Engine flags and environment live in InferenceX's
launch scripts, not its configs: the ones read by hand are in ``HAND_CARRIED`` below, with the script and
its commit, and are merged in here so a refresh keeps them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from bakeoff import catalog

OUT = Path(__file__).resolve().parents[1] / "include" / "bakeoff" / "recipes" / "inferencex.yaml"
MULTINODE_OUT = OUT.with_name("inferencex-multinode.yaml")
REPO = "SemiAnalysisAI/InferenceX"
SOURCES = ("configs/amd-master.yaml", "configs/nvidia-master.yaml")
GPUS = ("mi355x", "b200", "b300")
# InferenceX model-prefix -> bakeoff model catalog name
MODELS = {
    "dsr1": "deepseek-r1",
    "dsv4": "deepseek-v4-pro",
    "qwen3.5": "qwen3.5-397b-a17b",
    "glm5.2": "glm-5.2",
    "minimaxm3": "minimax-m3",
    "kimik3": "kimi-k3",
    "gptoss": "gpt-oss-120b",
}
ENGINES = {"sglang": "sglang", "vllm": "vllm", "atom": "atom", "trt": "trtllm", "trtllm": "trtllm"}
KV_BACKENDS = {
    "hicache": "hicache",
    "lmcache": "lmcache",
    "vllm-simple": "vllm_native",
    "native": "trtllm_native",
    "mooncake": "mooncake",
}
SKIP = ("dynamo", "disagg", "power-ab", "multinode")
SPEC_WORDS = ("mtp", "eagle3", "eagle", "dspark")

# Flags read from the launch scripts (benchmarks/single_node/...) with the search tool; the engine's own
# rendering adds model, parallelism, port, speculative and KV-offload flags, so only the tuning flags are here.
_GLM_SGLANG_NV = [
    "--kv-cache-dtype", "fp8_e4m3", "--bf16-gemm-backend", "cutedsl", "--max-prefill-tokens", "8192",
    "--tool-call-parser", "glm47", "--reasoning-parser", "glm45", "--chunked-prefill-size", "8192",
]  # fmt: skip
HAND_CARRIED: dict[str, dict[str, Any]] = {
    "glm5.2-fp4-mi355x-sglang-agentic-mtp": {
        "script_commit": "0175c275f5d3a208cb44a862582783418197e451",
        "num_speculative_tokens": 5,  # --speculative-num-steps 5, --speculative-num-draft-tokens 6
        "engine_args": [
            "--dsa-prefill-backend",
            "tilelang",
            "--dsa-decode-backend",
            "tilelang",
            "--tool-call-parser",
            "glm47",
            "--reasoning-parser",
            "glm45",
            "--chunked-prefill-size",
            "131072",
            "--mem-fraction-static",
            "0.80",
            "--watchdog-timeout",
            "1800",
        ],  # fmt: skip
        "env": {"SGLANG_TIMEOUT_KEEP_ALIVE": "900", "SGLANG_OPT_USE_TOPK_V2": "false"},
        "notes": "chunked-prefill 131072 / mem-fraction 0.80 are the script's settings for concurrency <= 16",
    },
    "glm5.2-fp4-mi355x-atom-agentic-mtp": {
        "script_commit": "7f74f31c82e10ab17ecc9b270045534397a2c80e",
        "num_speculative_tokens": 3,
        "pinned_acceptance_length": 2.99,
        "engine_args": [
            "--online_quant_config",
            '{"global_quant_config":"ptpc_fp8","exclude_layer":["lm_head","model.embed_tokens","*.mlp.gate","*expert*"]}',
            "--max-num-batched-tokens",
            "16384",
            "--kv_cache_dtype",
            "fp8",
        ],  # fmt: skip
        "env": {"AITER_QUICK_REDUCE_QUANTIZATION": "INT4", "AITER_USE_FLYDSL_MOE_SORTING": "1"},
    },
    "glm5.2-fp4-b200-sglang-agentic-mtp": {
        "script_commit": "64e97b2db0fe565eb3676b218967b9382c9c432d",
        "num_speculative_tokens": 3,  # --speculative-num-steps 3, --speculative-num-draft-tokens 4
        "pinned_acceptance_length": 2.99,
        "engine_args": [*_GLM_SGLANG_NV, "--mem-fraction-static", "0.83", "--watchdog-timeout", "1800"],
        "env": {"SGLANG_TIMEOUT_KEEP_ALIVE": "900", "TORCH_CUDA_ARCH_LIST": "10.0"},
        "notes": "HiCache: ratio 0.75 below concurrency 12, 169 GB/rank from 12 up (script)",
    },
    "glm5.2-fp4-b300-sglang-agentic-mtp": {
        "script_commit": "64e97b2db0fe565eb3676b218967b9382c9c432d",
        "num_speculative_tokens": 3,
        "pinned_acceptance_length": 2.99,
        "engine_args": [*_GLM_SGLANG_NV, "--mem-fraction-static", "0.85", "--watchdog-timeout", "1800"],
        "env": {"SGLANG_TIMEOUT_KEEP_ALIVE": "900"},
        "notes": "flags as the B200 port of this script states them (the B200 script is the B300 one with "
        "mem-fraction 0.83)",
    },
}


def gpu_of(runner: str) -> str:
    return runner.removeprefix("cluster:").split("-")[0]


def precision(prefix: str, gpu: str, prec: str, checkpoint: str) -> str:
    """InferenceX says fp4 for both FP4 formats: MXFP4 on AMD, NVFP4 on NVIDIA, unless the checkpoint is
    MXFP4 (its name says so, or the model catalog lists it as the model's mxfp4 checkpoint: gpt-oss,
    DeepSeek-V4, Kimi-K3 ship MX FP4 weights)."""
    if prec != "fp4":
        return prec
    mx = catalog.models()[MODELS[prefix]].checkpoints.get("mxfp4")
    if gpu == "mi355x" or "mxfp4" in checkpoint.lower() or prefix == "gptoss" or checkpoint == mx:
        return "mxfp4"
    return "nvfp4"


def spec_method(prefix: str, key: str, said: str | None) -> tuple[str | None, str]:
    """The draft method: the key's word (dspark, eagle3), else the config's spec-decoding; InferenceX writes
    mtp for any draft, so a model that ships only another draft (MiniMax-M3: EAGLE3, Kimi-K3: DSpark)
    gets that one. Returns (method, note)."""
    method = next((w for w in ("dspark", "eagle3") if w in key.split("-")), None)
    if method is None and said and said != "none":
        method = said
    ships = catalog.models()[MODELS[prefix]].speculative
    if method and method not in ships and len(ships) == 1:
        (only,) = ships
        return only, f"InferenceX labels the draft {method}; the model ships {only} ({ships[only]})"
    return method, ""


def concurrencies(arm: dict[str, Any]) -> list[int]:
    if "conc-list" in arm:
        return sorted({int(c) for c in arm["conc-list"]})
    lo, hi = int(arm["conc-start"]), int(arm["conc-end"])
    out = []
    c = lo
    while c <= hi:
        out.append(c)
        c *= 2
    return out


def script_path(key: str, prefix: str, prec: str, gpu: str, fw: str, suffix_word: str | None, agentic: bool) -> str:
    """The launch script, by InferenceX's naming convention (<prefix>_<precision>_<gpu>_<engine>[_mtp].sh)."""
    engine = fw
    suffix = f"_{suffix_word}" if suffix_word else ""
    folder = "benchmarks/single_node/agentic" if agentic else "benchmarks/single_node"
    return f"{folder}/{prefix}_{prec}_{gpu}_{engine}{suffix}.sh"


def key_spec(key: str) -> str | None:
    """The script's speculative suffix: the word the key ends with."""
    return next((w for w in SPEC_WORDS if key.split("-")[-1] == w), None)


def arm_label(arm: dict[str, Any]) -> str:
    bits = [f"tp{arm.get('tp', 1)}"]
    if arm.get("ep", 1) != 1:
        bits.append(f"ep{arm['ep']}")
    if arm.get("dp-attn"):
        bits.append("dp-attn")
    if arm.get("kv-offloading") == "dram":
        bits.append(f"offload {(arm.get('kv-offload-backend') or {}).get('name', '?')}")
    c = concurrencies(arm)
    bits.append(f"conc {c[0]}-{c[-1]}")
    return " ".join(bits)


def convert(key: str, src: str, row: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    gpu = gpu_of(str(row.get("runner", "")))
    prefix = row.get("model-prefix")
    if gpu not in GPUS or row.get("multinode") or prefix not in MODELS or any(w in key for w in SKIP):
        return None
    fw = row["framework"]
    if fw not in ENGINES:
        return None
    (scenario, entries), *_ = row["scenarios"].items()
    if scenario not in ("fixed-seq-len", "agentic-coding"):
        return None
    entry_arms = [(e, arm) for e in entries for arm in e.get("search-space", [])]
    entry, arm = max(entry_arms, key=lambda ea: len(concurrencies(ea[1])))
    others = [arm_label(a) for _, a in entry_arms if a is not arm]
    method, spec_note = spec_method(prefix, key, arm.get("spec-decoding"))
    agentic = scenario == "agentic-coding"
    engine = ENGINES[fw]
    name = (
        f"{prefix}-{row['precision']}-{gpu}-{engine}"
        + (f"-{method}" if method else "")
        + ("-agentic" if agentic else "")
    )
    hand = HAND_CARRIED.get(key, {})
    rec: dict[str, Any] = {
        "key": key,
        "source_file": src,
        "script": script_path(key, prefix, row["precision"], gpu, fw, key_spec(key), agentic),
        "scenario": scenario,
        "model": MODELS[prefix],
        "gpu": gpu,
        "engine": engine,
        "precision": precision(prefix, gpu, row["precision"], row["model"]),
        "image": row["image"].replace("#", "/"),  # enroot's registry#path form
        "checkpoint": row["model"],
        "tp": int(arm.get("tp", 1)),
        "ep": int(arm.get("ep", 1)),
        "dp_attention": bool(arm.get("dp-attn", False)),
    }
    if method:
        spec: dict[str, Any] = {"method": method}
        draft = catalog.models()[MODELS[prefix]].speculative.get(method)
        if draft and draft != "native" and "/" in draft:
            spec["draft_model"] = draft
        if hand.get("num_speculative_tokens"):
            spec["num_speculative_tokens"] = hand["num_speculative_tokens"]
        rec["speculative"] = spec
    if arm.get("kv-offloading") == "dram":
        backend = (arm.get("kv-offload-backend") or {}).get("name", "")
        rec["kv_offload"] = {
            "backend": KV_BACKENDS.get(backend, backend),
            "dram_utilization": entry.get("dram-utilization"),
        }
    rec["concurrency"] = concurrencies(arm)
    if not agentic:
        rec["isl"], rec["osl"] = int(entry["isl"]), int(entry["osl"])
    for field in ("engine_args", "env", "pinned_acceptance_length", "script_commit"):
        if field in hand:
            rec[field] = hand[field]
    notes = [n for n in (hand.get("notes"), spec_note) if n]
    if others:
        notes.append("InferenceX also sweeps: " + "; ".join(others))
    if not hand:
        notes.append("engine flags and environment: see the script (not carried)")
    rec["notes"] = ". ".join(notes)
    return name, rec


# InferenceX framework of a disaggregated key -> (orchestrator, engine of its workers)
DISAGG_FRAMEWORKS = {
    "dynamo-trt": ("dynamo", "trtllm"),
    "dynamo-sglang": ("dynamo", "sglang"),
    "dynamo-vllm": ("dynamo", "vllm"),
    "llmd-vllm": ("llm-d", "vllm"),
    "sglang-disagg": ("sglang-pd", "sglang"),
    "atom-disagg": ("atomesh", "atom"),
}
MULTINODE_GPUS = ("mi355x", "b200", "b300", "gb200", "gb300")


def _role(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "workers": int(raw.get("num-worker", 1)),
        "tp": int(raw.get("tp", 1)),
        "ep": int(raw.get("ep", 1)),
        "dp_attention": bool(raw.get("dp-attn", False)),
        "settings": [str(x) for x in raw.get("additional-settings") or []],
    }


def convert_multinode(key: str, src: str, row: dict[str, Any]) -> dict[str, Any] | None:
    """A disaggregated key as bakeoff's multi-node recipe (its key is its name), or None when bakeoff
    has no model, GPU or orchestrator for it, or it has no arm with both roles."""
    gpu, prefix, fw = gpu_of(str(row.get("runner", ""))), row.get("model-prefix"), row.get("framework")
    if not row.get("disagg") or gpu not in MULTINODE_GPUS or prefix not in MODELS or fw not in DISAGG_FRAMEWORKS:
        return None
    arms = []
    for scenario, entries in (row.get("scenarios") or {}).items():
        if scenario != "fixed-seq-len":
            continue
        for entry in entries:
            for arm in entry.get("search-space", []):
                if "prefill" not in arm or "decode" not in arm:
                    continue
                if min(int(arm[role].get("num-worker", 1)) for role in ("prefill", "decode")) < 1:
                    continue  # no decode workers: an aggregated multi-node arm, not a disaggregated one
                spec = arm.get("spec-decoding")
                arms.append(
                    {
                        "isl": int(entry["isl"]),
                        "osl": int(entry["osl"]),
                        "concurrency": concurrencies(arm),
                        "speculative": spec if spec and spec != "none" else None,
                        "prefill": _role(arm["prefill"]),
                        "decode": _role(arm["decode"]),
                    }
                )
    if not arms:
        return None
    orchestrator, engine = DISAGG_FRAMEWORKS[fw]
    router = row.get("router") or {}
    return {
        "key": key,
        "source_file": src,
        "runner": row["runner"],
        "model": MODELS[prefix],
        "gpu": gpu,
        "framework": fw,
        "orchestrator": orchestrator,
        "engine": engine,
        "precision": precision(prefix, gpu, row["precision"], str(row["model"])),
        "image": str(row["image"]).replace("#", "/"),
        "checkpoint": str(row["model"]),
        "router": f"{router['name']} {router.get('version', '')}".strip() if router else None,
        "kv_transfer": row.get("kv-p2p-transfer"),
        "arms": arms,
    }


def write_multinode(checkout: Path, commit: str, date: str, out: Path) -> int:
    recipes: dict[str, dict[str, Any]] = {}
    for src in SOURCES:
        for key, row in (yaml.safe_load((checkout / src).read_text()) or {}).items():
            rec = convert_multinode(key, src, row) if isinstance(row, dict) else None
            if rec is not None:
                recipes[key] = rec
    header = (
        "# Vendored InferenceX multi-node, disaggregated recipes, converted by scripts/vendor_recipes.py.\n"
        f"# Source: {REPO} at commit {commit} ({date}), configs/amd-master.yaml and configs/nvidia-master.yaml;\n"
        "# Apache-2.0 (LICENSE-inferencex.txt beside this file). Per arm: the prefill and decode roles as published\n"
        "# (num-worker, tp, ep, dp-attn; settings: the per-arm recipe file InferenceX cites). GPUs of a worker:\n"
        "# max(tp, ep). precision: InferenceX's fp4 is mxfp4 on MI355X (and MX checkpoints), nvfp4 on NVIDIA.\n"
    )
    doc = {
        "source": {"repo": REPO, "commit": commit, "date": date, "licence": "Apache-2.0", "files": list(SOURCES)},
        "recipes": dict(sorted(recipes.items())),
    }
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))
    print(f"wrote {len(recipes)} multi-node recipes to {out}")
    return len(recipes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="a local InferenceX checkout (or a folder with its configs/)")
    ap.add_argument("--commit", default="843c6254ff69b567f772f6a5fd97675af3d04431")
    ap.add_argument("--date", default="2026-08-21")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    recipes: dict[str, dict[str, Any]] = {}
    for src in SOURCES:
        for key, row in (yaml.safe_load((args.checkout / src).read_text()) or {}).items():
            got = convert(key, src, row) if isinstance(row, dict) else None
            if got is None:
                continue
            name, rec = got
            if name in recipes:
                raise SystemExit(f"{key}: bakeoff name {name} already taken by {recipes[name]['key']}")
            recipes[name] = rec
    header = (
        "# Vendored InferenceX single-node recipes (MI355X, B200, B300), converted by scripts/vendor_recipes.py.\n"
        f"# Source: {REPO} at commit {args.commit} ({args.date}), configs/amd-master.yaml and\n"
        "# configs/nvidia-master.yaml; Apache-2.0 (LICENSE-inferencex.txt beside this file). Engine flags and env\n"
        "# were read from the launch scripts named per recipe (script_commit: the version read).\n"
        "# precision: InferenceX's fp4 is mxfp4 on MI355X (and gpt-oss), nvfp4 on NVIDIA.\n"
        "# kv_offload.dram_utilization: InferenceX's share of the node's host DRAM given to the KV tier.\n"
    )
    doc = {
        "source": {
            "repo": REPO,
            "commit": args.commit,
            "date": args.date,
            "licence": "Apache-2.0",
            "files": list(SOURCES),
        },
        "recipes": dict(sorted(recipes.items())),
    }
    args.out.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))
    print(f"wrote {len(recipes)} recipes to {args.out}")
    write_multinode(args.checkout, args.commit, args.date, args.out.with_name(MULTINODE_OUT.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
