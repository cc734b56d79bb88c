"""An engine's argv held to the flags its own parser accepts, at the release its image holds.

The accepted flags per release are vendored from each engine's source (``catalog.engine_flags``,
``scripts/vendor_engine_flags.py``), so a flag a recipe, the catalog or a plan's ``engine_args`` adds
that the engine's parser would refuse ("unrecognized arguments", the container exits at boot, after
the node has billed) is found before any run, named with the nearest flag the release does accept.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from bakeoff import catalog
from bakeoff.engines import BOOT

_NUMBER = re.compile(r"-\d")


@dataclass(frozen=True)
class Unknown:
    flag: str
    nearest: str | None


def release_for(image: str, engine: str) -> str | None:
    """The vendored release ``image`` is held to (None: an image no shipped recipe or the catalog names)."""
    held = catalog.engine_flags()["images"].get(image)
    return str(held["version"]) if held and held["engine"] == engine else None


def _options(argv: list[str], engine: str) -> list[str]:
    """The argv's words after the engine's parser word and its one positional (vLLM's ``serve MODEL``,
    ``-m MODULE``, ``trtllm-serve MODEL`` after the MPI launcher's own flags: ``engines.BOOT``)."""
    word = BOOT[engine].parser_word
    return argv[argv.index(word) + 2 :] if word in argv else argv


def flag_name(word: str, spelling: dict[str, bool]) -> str:
    """The flag a word names as the engine's parser reads it; ``spelling`` is the release's own (vLLM's
    parser takes ``--a_b`` for ``--a-b`` and ``--json-arg.key`` for a key of ``--json-arg``)."""
    name = word.split("=", 1)[0]
    if name.startswith("--") and spelling.get("dotted_keys"):
        name = "--" + name[2:].split(".", 1)[0]
    if name.startswith("--") and spelling.get("underscores_as_dashes"):
        name = "--" + name[2:].replace("_", "-")
    return name


def accepts(name: str, accepted: set[str], abbreviations: bool) -> bool:
    """As the parser decides: the flag itself, or (argparse's ``allow_abbrev``) the prefix of exactly
    one long flag; a prefix of several is refused there as ambiguous."""
    if name in accepted:
        return True
    return abbreviations and name.startswith("--") and len([f for f in accepted if f.startswith(name)]) == 1


def unknown_flags(argv: list[str], engine: str, release: str) -> list[Unknown]:
    """Every flag in ``argv`` the engine's ``release`` does not accept, with the nearest one it does."""
    facts = catalog.engine_flags()["engines"][engine][release]
    accepted = set(facts["flags"])
    out = []
    for word in _options(argv, engine):
        if not word.startswith("-") or _NUMBER.match(word):
            continue
        name = flag_name(word, facts)
        if not accepts(name, accepted, bool(facts["abbreviations"])):
            near = difflib.get_close_matches(name, sorted(accepted), n=1, cutoff=0.5)
            out.append(Unknown(name, near[0] if near else None))
    return out
