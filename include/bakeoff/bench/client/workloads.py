"""Where prompts come from: synthetic lengths, the user's prompt files, a request-log length
distribution, or a timed trace. Bad files raise WorkloadFileError naming the file and line.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bakeoff import tokens
from bakeoff.bench.client.prompts import WORDS, RequestSpec, prompt_words, shared_prefixes, synthesize

if TYPE_CHECKING:
    from bakeoff.bench.client.clock import Offsets
    from bakeoff.bench.client.sizing import PromptSizer
    from bakeoff.plan.workload import Workload


class WorkloadFileError(ValueError):
    """A workload file that cannot be used; the message names the file, the line and the fix."""


def _where(path: Path, line: int | None) -> str:
    return f"{path.name}:{line}" if line else path.name


MAX_JSON_DEPTH = 64  # lists and objects inside one another; real traces, logs and prompts use a handful


class _NotFinite(ValueError):
    pass


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):  # NaN, Infinity, or 1e999
        raise _NotFinite(text)
    return value


def _refuse_constant(name: str) -> Any:
    raise _NotFinite(name)


def _depth(obj: object) -> int:
    """How deeply lists and objects nest (iteratively: a hostile file cannot exhaust the stack here)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_JSON_DEPTH:
                return d
            stack.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def parse_json(text: str, where: str) -> Any:
    """One JSON document from an untrusted file: only finite numbers (no NaN, Infinity or 1e999) and at
    most MAX_JSON_DEPTH levels of nesting; anything else is a WorkloadFileError naming ``where``."""
    try:
        obj = json.loads(text, parse_float=_finite, parse_constant=_refuse_constant)
    except _NotFinite as e:
        raise WorkloadFileError(f"{where}: {str(e)[:20]} is not a finite number; write a plain number") from None
    except RecursionError:
        raise WorkloadFileError(f"{where}: nested more than {MAX_JSON_DEPTH} levels deep") from None
    except json.JSONDecodeError as e:
        raise WorkloadFileError(f"{where}: not valid JSON ({e.msg}); one JSON object per line") from None
    if _depth(obj) > MAX_JSON_DEPTH:
        raise WorkloadFileError(f"{where}: nested more than {MAX_JSON_DEPTH} levels deep")
    return obj


def _json_objects(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL file; bad lines name their number."""
    with p.open(encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = parse_json(line, _where(p, no))
            if not isinstance(obj, dict):
                raise WorkloadFileError(f"{_where(p, no)}: expected a JSON object, got {type(obj).__name__}")
            yield no, obj


WORKLOADS_ENV = "BAKEOFF_WORKLOADS_DIR"


def workloads_dir() -> Path:
    """The one folder plans' workload files live in: $BAKEOFF_WORKLOADS_DIR, else include/workloads.
    An environment setting, not an Airflow Variable, so that only whoever deploys the workers moves it."""
    env = os.environ.get(WORKLOADS_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[3] / "workloads"


def resolve_file(path: str | Path | None, field: str = "source_path") -> Path:
    """A workload file: a relative path resolves under workloads_dir() and must stay there once
    symlinks are followed. An absolute path (only the bench CLI and the node agent give one: a plan
    cannot, see bakeoff.plan) is used as is."""
    if path is None:
        raise WorkloadFileError(f"{field}: not set; give the path of a file in the workloads folder")
    raw = Path(path)
    if raw.is_absolute():
        p = raw
    else:
        root = workloads_dir().resolve()
        p = (root / raw).resolve()
        if not p.is_relative_to(root):
            raise WorkloadFileError(
                f"{field}: {str(path)!r} leads outside the workloads folder {root} "
                f"(set {WORKLOADS_ENV} to move it); copy the file into it"
            )
    if not p.is_file():
        raise WorkloadFileError(
            f"{field}: no file {str(path)!r} in the workloads folder {workloads_dir()} "
            f"(set {WORKLOADS_ENV} to move it); give the path of an existing file relative to it"
        )
    return p


def check_files(workloads: list[Workload]) -> None:
    """Every file the plan's workloads name exists in the workloads folder: checked before anything is
    predicted, estimated or started, so a missing file is one line naming the workload, not a traceback
    from deep in the first step that reads it."""
    for i, w in enumerate(workloads):
        named = [("source_path", w.source_path), ("trace_path", w.trace_path)]
        if w.sessions is not None:
            named += [("sessions.path", w.sessions.path), ("sessions.fit_from", w.sessions.fit_from)]
        for field, value in named:
            if value is None:
                continue
            try:
                resolve_file(value, field)
            except WorkloadFileError as e:
                raise WorkloadFileError(f"workloads[{i}].{e}") from None


def _open(path: str | Path | None, field: str = "source_path") -> Path:
    return resolve_file(path, field)


@contextlib.contextmanager
def _text(p: Path) -> Iterator[None]:
    """Decoding errors quote the offending bytes: name the file only."""
    try:
        yield
    except UnicodeDecodeError:
        raise WorkloadFileError(f"{p.name}: not UTF-8 text; save the file as UTF-8") from None
    except csv.Error:
        raise WorkloadFileError(f"{p.name}: not a readable CSV file; write input_len,output_len rows") from None


# --- user prompts (JSONL) ---------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _jsonl(path: str, mtime: float) -> tuple[dict[str, Any], ...]:
    p = Path(path)
    out = [_user_entry(obj, p, no) for no, obj in _json_objects(p)]
    if not out:
        raise WorkloadFileError(f'{p.name}: no prompts found; add lines like {{"prompt": "..."}}')
    return tuple(out)


def _user_entry(obj: dict[str, Any], p: Path, no: int) -> dict[str, Any]:
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        raise WorkloadFileError(f'{_where(p, no)}: give exactly one of "prompt" (a string) or "messages" (a list)')
    if prompt is not None and not isinstance(prompt, str):
        raise WorkloadFileError(f'{_where(p, no)}: "prompt" must be a string')
    if messages is not None:
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in messages)
        ):
            raise WorkloadFileError(
                f'{_where(p, no)}: "messages" must be a non-empty list of {{"role": ..., "content": ...}} objects'
            )
    mt = obj.get("max_tokens")
    if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
        raise WorkloadFileError(f'{_where(p, no)}: "max_tokens" must be a positive integer')
    text = prompt if prompt is not None else " ".join(str(m.get("content") or "") for m in messages or ())
    return {"prompt": prompt, "messages": messages, "max_tokens": mt, "input_len": tokens.count(text)}


# --- ShareGPT ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _sharegpt(path: str, mtime: float) -> tuple[dict[str, Any], ...]:
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        json.loads(text, parse_float=float, parse_constant=float)  # where a syntax error is, by line
    except json.JSONDecodeError as e:
        raise WorkloadFileError(f"{_where(p, e.lineno)}: not valid JSON ({e.msg})") from None
    except RecursionError:
        pass  # parse_json names it
    data = parse_json(text, p.name)
    if not isinstance(data, list):
        raise WorkloadFileError(f"{p.name}: expected a JSON list of conversations (ShareGPT format)")
    out = []
    for i, conv in enumerate(data):
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            raise WorkloadFileError(f'{p.name}: entry [{i}] has no "conversations" list')
        if len(turns) < 2:
            continue  # no reply to take an output length from (vLLM skips these too)
        try:
            human, gpt = str(turns[0]["value"]), str(turns[1]["value"])
        except (KeyError, TypeError):
            raise WorkloadFileError(f'{p.name}: entry [{i}] turns need "from" and "value"') from None
        n_in, n_out = tokens.count(human), tokens.count(gpt)
        if n_in < 1 or n_out < 1:
            continue
        out.append({"prompt": human, "messages": None, "max_tokens": n_out, "input_len": n_in})
    if not out:
        raise WorkloadFileError(f"{p.name}: no usable conversation (need a human turn and a reply)")
    return tuple(out)


# --- request-log length distribution -------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _length_log(path: str, mtime: float) -> np.ndarray:
    p = Path(path)
    pairs = []
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        cols = set(reader.fieldnames or [])
        if not {"input_len", "output_len"} <= cols:
            raise WorkloadFileError(
                f"{_where(p, 1)}: header must name the columns input_len and output_len "
                f"({len(cols)} column(s) found; their names are not shown)"
            )
        for row in reader:
            no = reader.line_num
            try:
                i, o = int(row["input_len"]), int(row["output_len"])
            except (TypeError, ValueError):
                raise WorkloadFileError(f"{_where(p, no)}: input_len and output_len must be integers") from None
            if i < 1 or o < 1:
                raise WorkloadFileError(f"{_where(p, no)}: input_len and output_len must be >= 1")
            pairs.append((i, o))
    if not pairs:
        raise WorkloadFileError(f"{p.name}: no rows; add input_len,output_len lines")
    return np.asarray(pairs, dtype=np.int64)


def length_log_sample(path: str | Path | None, n: int, seed: int) -> np.ndarray:
    """n (input_len, output_len) pairs drawn from the log's empirical joint distribution (pairs are
    resampled whole, so the input/output correlation of real traffic is kept)."""
    p = _open(path)
    with _text(p):
        pairs = _length_log(str(p), p.stat().st_mtime)
    rng = np.random.default_rng(seed)
    return pairs[rng.integers(0, len(pairs), n)]


def load_entries(workload: Workload) -> tuple[dict[str, Any], ...]:
    p = _open(workload.source_path)
    loader = {"jsonl": _jsonl, "sharegpt": _sharegpt}[workload.source]
    with _text(p):
        return loader(str(p), p.stat().st_mtime)


# --- one entry point for a workload run --------------------------------------------------------
def sizes_prompts(workload: Workload) -> bool:
    """Whether bakeoff writes every prompt (and so owes its length in tokens) rather than the user. A
    trace may mix its own prompts with written ones, so its points are not held to a length."""
    return workload.source in ("synthetic", "length_log") and workload.load != "trace"


def build_specs(
    workload: Workload, n: int, *, stream: int = 0, sizer: PromptSizer | None = None, seed: int | None = None
) -> list[RequestSpec]:
    """n request specs for one point; deterministic in (prompt seed, stream). ``sizer`` (bench.client.sizing)
    sizes written prompts in the served model's tokens; ``seed`` is the run's prompt seed
    (prompts.prompt_seed; default: the workload's own seed)."""
    base = workload.seed if seed is None else seed
    if workload.source == "synthetic":
        return synthesize(workload, n, stream=stream, sizer=sizer, seed=base)
    seed = base * 1_000_003 + stream
    if workload.source == "length_log":
        pairs = length_log_sample(workload.source_path, n, seed)
        prefixes = shared_prefixes(workload, base)
        specs = []
        for i, (il, ol) in enumerate(pairs):
            il_tokens = int(il)
            prefix = ""
            if prefixes:
                prefix = " ".join(
                    (sizer or WORDS).prefix(prefixes[i % len(prefixes)], round(workload.prefix_ratio * il_tokens))
                )
            specs.append(RequestSpec(il_tokens, int(ol), prompt=prompt_words(il_tokens, seed * 7 + i, prefix, sizer)))
        return specs
    entries = load_entries(workload)
    order = list(range(len(entries)))
    random.Random(seed).shuffle(order)
    specs = []
    for i in range(n):
        e = entries[order[i % len(order)]]
        specs.append(
            RequestSpec(
                e["input_len"], e["max_tokens"] or workload.output_len, prompt=e["prompt"], messages=e["messages"]
            )
        )
    return specs


def trace_specs(
    workload: Workload, *, sizer: PromptSizer | None = None, seed: int | None = None
) -> tuple[np.ndarray, list[RequestSpec]]:
    """Send offsets (s from the first) and specs from a JSONL trace: one line per request with
    ``timestamp`` (s) or ``timestamp_ms``, optional input_len/output_len (else the workload's)."""
    p = _open(workload.trace_path, "trace_path")
    with _text(p):
        return _trace(p, workload, sizer, workload.seed if seed is None else seed)


def _trace(
    p: Path, workload: Workload, sizer: PromptSizer | None = None, seed: int = 0
) -> tuple[np.ndarray, list[RequestSpec]]:
    times, specs = [], []
    rng = random.Random(seed)
    for no, obj in _json_objects(p):
        ts = obj.get("timestamp")
        if ts is None and obj.get("timestamp_ms") is not None:
            ts = obj["timestamp_ms"] / 1000 if isinstance(obj["timestamp_ms"], (int, float)) else obj["timestamp_ms"]
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0:
            raise WorkloadFileError(f'{_where(p, no)}: needs "timestamp" (seconds, >= 0) or "timestamp_ms"')
        il = obj.get("input_len", obj.get("input_length", workload.input_len))
        ol = obj.get("output_len", obj.get("output_length", workload.output_len))
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in (il, ol)):
            raise WorkloadFileError(f"{_where(p, no)}: input_len and output_len must be positive integers")
        times.append(float(ts))
        prompt = obj.get("prompt")
        if not isinstance(prompt, str):
            prompt = prompt_words(il, rng.getrandbits(48), sizer=sizer)
        specs.append(RequestSpec(il if obj.get("prompt") is None else tokens.count(prompt), ol, prompt=prompt))
    if not times:
        raise WorkloadFileError(f"{p.name}: no requests in the trace")
    order = np.argsort(times, kind="stable")
    t = np.asarray(times)[order]
    return t - t[0], [specs[i] for i in order]


def describe(workload: Workload) -> dict[str, Any]:
    """What the report states about where prompts came from."""
    return {
        "source": workload.source,
        "source_path": workload.source_path,
        "interval": workload.length_interval,
        "bounds_in": workload.length_bounds(workload.input_len),
        "bounds_out": workload.length_bounds(workload.output_len),
        "prefix_ratio": workload.prefix_ratio,
        "prompt_seeding": workload.prompt_seeding,
        "input_len_tolerance": workload.input_len_tolerance,
    }


def point_specs(
    w: Workload,
    key: int,
    repeat: int,
    concurrency: int | None,
    offsets: Offsets | None,
    specs: list[RequestSpec] | None,
    *,
    sizer: PromptSizer | None = None,
    seed: int | None = None,
) -> tuple[int, list[RequestSpec]]:
    """Warm-up count and request specs of one point, the same in-process and in worker processes
    (the prompt seed and the stream make every point's prompts deterministic)."""
    n_warm = w.warmup_at(concurrency) if concurrency else (w.warmup_requests or 0)
    if specs is None:
        if concurrency:
            n = w.requests_at(concurrency)
        elif offsets is not None:
            n = len(offsets)
        else:
            raise ValueError("point_specs: give concurrency (closed loop) or offsets (open loop)")
        specs = build_specs(w, n_warm + n, stream=key * 100 + repeat, sizer=sizer, seed=seed)
    return n_warm, specs
