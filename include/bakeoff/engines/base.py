"""What a serving engine declares, once, in its own module (registered in ``registry.py``).

An engine is its boot facts, the quantization and KV-cache dtype flags it renders, the catalog recipe flags
its own target fields replace, its launch argv, the names it goes by (provenance), its server metric names
and its MLPerf framework family (the twin), so adding one is its module plus its catalog rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from bakeoff.plan.serving_options import KvOffload
from bakeoff.plan.target import Target

KEY_FILE = "/etc/bakeoff/api_key"  # the serving key on the node, root-only (user-data writes it)


@dataclass(frozen=True)
class Boot:
    """How the node's boot script starts one engine and hands it the serving key, declared once per
    engine so the boot script never compares engine names (printf is a builtin: no argv shows the key).

    fronted: no API-key check or TLS of its own, so it listens on loopback behind the node's front
    (front.py), which reads the key file itself; otherwise ``tls_flags`` name the flags that take the
    node's certificate and key files."""

    entrypoint: str
    fronted: bool = False
    tls_flags: tuple[str, str] | None = None
    key_line: str = "# the engine checks no key: the front reads /etc/bakeoff/api_key itself"
    key_args: tuple[str, ...] = ()  # docker run arguments that give it the file key_line writes
    tail_args: tuple[str, ...] = ()  # after its command: where it reads its key from
    # the argv word after which (and one positional: the model or module) the engine's own parser reads
    # its flags, as engine_flags checks them
    parser_word: str = "-m"

    def __post_init__(self) -> None:
        if not self.fronted and self.tls_flags is None:
            raise ValueError(f"{self.entrypoint}: an engine not behind the front serves TLS itself; name its tls_flags")


@dataclass(frozen=True)
class Routes:
    """Where readiness, token counting and the metrics scrape find a stack: the built-in engines' OpenAI
    routes, or what a custom stack declares (None: it has none)."""

    health: str = "/health"
    readiness: str = "/v1/models"
    tokenize: str | None = "/tokenize"
    metrics: str | None = "/metrics"


@dataclass(frozen=True)
class Names:
    """How a server says it is this engine (``serving.provenance``): a whole word in /version and, where
    ``in_model_cards``, in /v1/models' ``owned_by``; ``own_metrics``: its catalog ``metrics_prefix`` is
    its own, not another engine's names it exports."""

    said: re.Pattern[str]
    in_model_cards: bool = True
    own_metrics: bool = False


@dataclass(frozen=True)
class Counters:
    """Server counters (``bench.metrics.server_metrics``), each summed over its label sets and read as the
    delta over a point; ``source`` labels the figures they give."""

    source: str
    prefix_hits: str
    prefix_queries: str
    host_hits: str
    host_queries: str
    spec_drafts: str
    spec_draft_tokens: str
    spec_accepted: str

    @property
    def names(self) -> tuple[str, ...]:
        return (
            self.prefix_hits,
            self.prefix_queries,
            self.host_hits,
            self.host_queries,
            self.spec_drafts,
            self.spec_draft_tokens,
            self.spec_accepted,
        )


@dataclass(frozen=True)
class Gauges:
    """Server gauges describing a recent window, read as they stand after a point."""

    source: str
    hit_rate: str
    accept_length: str

    @property
    def names(self) -> tuple[str, ...]:
        return (self.hit_rate, self.accept_length)


@dataclass(frozen=True)
class Engine:
    """One serving engine. ``boot`` None: no cloud node runs it (the emulator). The methods render a
    validated target; the package's ``command``, ``environment`` and ``extra_files`` call them."""

    name: str
    boot: Boot | None = None
    # plan quantization -> flags; None = the checkpoint says (pre-quantized weights carry their format)
    quantization: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    kv_cache_dtype: Mapping[str, str] = field(default_factory=dict)  # plan KV dtype -> the engine's word
    # flags the target's own fields set: a catalog recipe repeating one is dropped (the report states what ran)
    set_by_target: frozenset[str] = frozenset()
    names: Names | None = None
    counters: Counters | None = None
    gauges: Gauges | None = None
    # substrings of a published MLPerf framework that mean this engine (twin.calibration); none: not fitted
    frameworks: tuple[str, ...] = ()
    # words (a server's, a published framework's) are matched to engines lowest first: one whose words may
    # quote another engine's name is tried before that one
    precedence: int = 1

    @property
    def deployable(self) -> bool:
        """Whether a cloud node runs it: its boot facts are known."""
        return self.boot is not None

    def boot_of(self, target: Target) -> Boot:
        """The boot facts for this target (a custom stack's come from its template)."""
        if self.boot is None:
            raise ValueError(f"targets.{target.name}.stack: {self.name} cannot be deployed on a cloud node")
        return self.boot

    def routes_of(self, target: Target) -> Routes:
        """Where readiness, token counting and the metrics scrape find it: the OpenAI routes."""
        return Routes()

    def argv(self, target: Target, port: int, host: str) -> list[str]:
        """The engine's own arguments after the image, before the catalog's recipe and the plan's."""
        raise NotImplementedError(self.name)

    def switches(self, target: Target, acceptance: float | None, kv: KvOffload | None) -> dict[str, str]:
        """Environment the target's options need (pinned acceptance length, KV-offload tiers)."""
        return {}

    def files(self, target: Target) -> dict[str, str]:
        """Files the engine reads, by their path on the node."""
        return {}
