"""The node agent: the bakeoff client shipped to a serving node, so the benchmark runs next to the
server (co-located: the network never pollutes TTFT) and the node's power samples and logs come back.

The boot script fetches the client bundle (a zip of this package, checked against its SHA-256),
starts ``python -m bakeoff agent`` on ``core.launch.AGENT_PORT``, firewalled to the plan's CIDR like the serving
port and authenticated with the run's per-target key.
"""

from typing import Any

# the agent's GPU library sampler (serving.gpu_counters) writes here, in its work dir (its log dir is read-only)
COUNTERS_CSV = "counters.csv"
# workload fields naming a file (dotted: inside the workload's sessions block): a job carries its text
FILE_FIELDS = ("source_path", "trace_path", "sessions.path", "sessions.fit_from")
# One limit for both ends: the agent refuses a larger job body, and the worker refuses, before any
# node is launched, a plan whose co-located job (workload files inlined) would be larger.
MAX_JOB_BYTES = 64 * 1024 * 1024
# Job ids and inlined file names: one plain path component (no '/', no leading dot, so never '..').
PLAIN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


def file_field(workload: dict[str, Any], field: str) -> Any:
    """The value of a (dotted) FILE_FIELDS entry in a workload mapping, or None."""
    value: Any = workload
    for part in field.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def with_file_field(workload: dict[str, Any], field: str, value: str) -> dict[str, Any]:
    """A copy of the workload mapping with the (dotted) field set to value."""
    head, _, rest = field.partition(".")
    out = dict(workload)
    out[head] = with_file_field(dict(out.get(head) or {}), rest, value) if rest else value
    return out
