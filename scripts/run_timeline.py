"""Per-target timeline of a bake-off DAG run, and how much worker-slot time its waits held.

Input: the run's task instances as /api/v2 returns them, and one (start, end) per sensor poke. The
REST API cannot give the pokes: Airflow 3.3 has no public task-reschedule route, and a rescheduled
sensor's start_date, end_date and duration are overwritten by each poke, so only its last one
shows. Each poke's check records its own start and end in the results store, which is where the
pokes come from. A check's record leaves out what the task around it costs (starting the task,
parsing the DAG file, reporting back); that cost is measured on the last poke, whose task instance
Airflow does show (its runtime minus its check's), and added to every poke.

For each target (the mapped task instances labelled with it):
  step spans    start..end relative to the DAG run's start; a sensor's span runs from its first
                poke's start to its end (the time the target spent waiting on it)
  wall          first step start .. last step end
  wait          the sum of the sensors' spans
  held          worker-slot seconds: every other task's runtime plus each poke's runtime (its
                check's plus the task's own cost)
  waits held    the part of `held` spent in pokes, as a share of `wait` (the goal: <= 10 %)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

GOAL_PCT = 10.0  # share of the waiting time a worker slot may be held
FAIL_PCT = 25.0  # beyond this the run fails: the waits are not freeing their slots


def ts(value: str | float | None) -> float | None:
    """Epoch seconds from an ISO-8601 string (as the REST API writes them) or a number."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return datetime.fromisoformat(value).timestamp()


def step_name(task_id: str) -> str:
    """``target.wait_benchmark`` -> ``wait_benchmark`` (the task group; the map index is the target)."""
    return task_id.rsplit(".", 1)[-1]


def is_sensor(ti: Mapping) -> bool:
    return "sensor" in str(ti.get("operator") or ti.get("operator_name") or "").lower()


@dataclass
class Step:
    name: str
    start: float
    end: float
    sensor: bool
    held: float  # worker-slot seconds
    pokes: int = 0
    host: str = ""  # the worker that ran it (a sensor: its last poke)

    @property
    def span(self) -> float:
        return self.end - self.start


@dataclass
class TargetTimeline:
    target: str
    steps: list[Step] = field(default_factory=list)

    @property
    def start(self) -> float:
        return min(s.start for s in self.steps)

    @property
    def end(self) -> float:
        return max(s.end for s in self.steps)

    @property
    def wall(self) -> float:
        return self.end - self.start

    @property
    def wait(self) -> float:
        return sum(s.span for s in self.steps if s.sensor)

    @property
    def held(self) -> float:
        return sum(s.held for s in self.steps)

    @property
    def held_in_waits(self) -> float:
        return sum(s.held for s in self.steps if s.sensor)

    @property
    def waits_held_pct(self) -> float | None:
        return 100.0 * self.held_in_waits / self.wait if self.wait > 0 else None

    def window(self, *steps: str) -> tuple[float, float] | None:
        """start of the first of these steps .. end of the last (None if none ran)."""
        spans = [s for s in self.steps if s.name in steps]
        return (min(s.start for s in spans), max(s.end for s in spans)) if spans else None


Pokes = Mapping[tuple[str, str], list[tuple[float, float]]]


def _sensor_step(name: str, start: float, end: float, own: list[tuple[float, float]], host: str) -> Step:
    """A sensor from its task instance (the last poke: start..end) and its checks' records."""
    last = [(a, b) for a, b in own if start - 1 <= a and b <= end + 1]  # the last poke's check (1 s clock slack)
    overhead = max(0.0, (end - start) - (last[-1][1] - last[-1][0])) if last else 0.0
    held = sum(b - a for a, b in own) + overhead * len(own)
    return Step(name, min(start, own[0][0] - overhead), end, True, held, len(own), host)


def timelines(tis: Iterable[Mapping], pokes: Pokes) -> list[TargetTimeline]:
    """One timeline per target from the mapped task instances that ran; ``pokes`` maps
    (sensor step name, target) to its checks' (start, end), epoch seconds."""
    by_target: dict[str, TargetTimeline] = {}
    for ti in tis:
        if ti.get("map_index", -1) < 0:
            continue
        start, end = ts(ti.get("start_date")), ts(ti.get("end_date"))
        if start is None or end is None:
            continue
        name = step_name(ti["task_id"])
        target = ti.get("rendered_map_index") or str(ti["map_index"])
        own = sorted(pokes.get((name, target), []))
        sensor, host = is_sensor(ti) or bool(own), ti.get("hostname") or "-"
        if sensor and own:
            step = _sensor_step(name, start, end, own, host)
        else:  # a task's runtime; a sensor without records shows its last poke only
            step = Step(name, start, end, sensor, end - start, 1 if sensor else 0, host)
        by_target.setdefault(target, TargetTimeline(target)).steps.append(step)
    for t in by_target.values():
        t.steps.sort(key=lambda s: (s.start, s.end))
    return sorted(by_target.values(), key=lambda t: t.start)


def common_overlap(windows: Mapping[str, tuple[float, float] | None]) -> float:
    """Seconds during which every window is open at once (0 when they do not all overlap, or one is missing)."""
    if not windows or any(w is None for w in windows.values()):
        return 0.0
    spans = [w for w in windows.values() if w is not None]
    return max(0.0, min(end for _, end in spans) - max(start for start, _ in spans))


def waited(timeline: TargetTimeline) -> bool:
    """Whether a target waited at all: a sensor that had to look more than once. A sensor done at its
    first look holds its whole span by construction, so its share says nothing about freed slots."""
    return any(s.sensor and s.pokes > 1 for s in timeline.steps)


def verdict(pct: float | None, judged: bool = True) -> str:
    """The waits' share against the goal; only a share over FAIL_PCT fails the run."""
    if pct is None:
        return "n/a (no wait)"
    if not judged:
        return "not judged (no sensor looked twice)"
    if pct <= GOAL_PCT:
        return "PASS"
    return f"over the goal (passes up to {FAIL_PCT:g} %)" if pct <= FAIL_PCT else "FAIL"


def table(lines: list[TargetTimeline], t0: float) -> str:
    """The per-target step timeline and the slot-time summary, seconds relative to ``t0``."""
    out = []
    for t in lines:
        out.append(f"  {t.target}")
        for s in t.steps:
            kind = f"sensor, {s.pokes} poke(s)" if s.sensor else "task"
            out.append(
                f"    {s.name:<16} {s.start - t0:7.1f} .. {s.end - t0:7.1f}  {s.span:6.1f} s  "
                f"held {s.held:6.1f} s  {s.host:<10} ({kind})"
            )
    out.append("")
    out.append(
        f"  {'target':<16} {'wall s':>7} {'wait s':>7} {'held s':>7} {'held/wall':>9} "
        f"{'held in waits s':>15} {'waits held':>10}  goal <= {GOAL_PCT:g} %"
    )
    for t in lines:
        pct = t.waits_held_pct
        out.append(
            f"  {t.target:<16} {t.wall:7.1f} {t.wait:7.1f} {t.held:7.1f} {100 * t.held / t.wall:8.1f}% "
            f"{t.held_in_waits:15.1f} {'-' if pct is None else f'{pct:9.1f}%':>10}  {verdict(pct, waited(t))}"
        )
    return "\n".join(out)
