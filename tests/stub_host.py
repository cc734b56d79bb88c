"""Run a node's boot script (or a piece of it) under real bash, with no way to reach a host command.

Why: a bash function stub covers only what bash itself calls; ``timeout 7200 docker run …`` has the
external ``timeout`` exec ``docker`` from ``PATH``, and on a machine with Docker that was the real
one. Here ``PATH`` is a single folder holding the test's stubs and wrappers for a short list of
coreutils, so a name outside them is not found anywhere; every command the script runs is recorded,
and one that is neither a stub nor a listed tool (bash's lookup, ``timeout``'s, or a host executable
named by an absolute path in the script) fails the run with its name.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

BASH = "/bin/bash"
# the real programs a boot script may run: text and file tools only, nothing that reaches a network,
# a container, a disk or the firewall (those are the test's stubs)
TOOLS = (
    "awk",
    "cat",
    "chmod",
    "cut",
    "date",
    "du",
    "find",
    "grep",
    "head",
    "install",
    "ls",
    "mkdir",
    "rm",
    "sed",
    "sort",
    "tail",
    "tee",
    "timeout",
    "tr",
    "uniq",
    "wc",
)
_HOST_DIRS = ("/bin/", "/sbin/", "/usr/", "/opt/", "/snap/")
_ABSOLUTE = re.compile(r"""(?:^|[\s;&|(`'"=])(/[\w.+-]+(?:/[\w.+-]+)+)""")


class UnstubbedCommand(AssertionError):
    """The script ran (or named by path) a program that is neither a stub nor one of ``TOOLS``."""


@dataclass
class StubHost:
    """A folder of stubs and tool wrappers; ``run`` executes a script with only that folder on PATH."""

    root: Path
    stubs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bin = self.root / "stub-bin"
        self.log = self.root / "stub-calls.log"
        self.bin.mkdir(parents=True, exist_ok=True)
        for name in TOOLS:
            real = shutil.which(name, path="/usr/bin:/bin")
            if real is None:
                raise RuntimeError(f"stub_host: {name} not found in /usr/bin or /bin")
            self._write(name, f'exec {shlex.quote(real)} "$@"' if name != "timeout" else self._timeout(real))
        for name, body in self.stubs.items():
            self.stub(name, body)

    def stub(self, name: str, body: str = "exit 0") -> None:
        """``name`` records its argv, then runs ``body`` (bash, ``$@`` its arguments)."""
        if not re.fullmatch(r"[\w.+-]+", name):
            raise ValueError(f"stub_host: bad stub name {name!r}")
        self.stubs[name] = body
        self._write(name, body)

    def _write(self, name: str, body: str) -> None:
        path = self.bin / name
        rec = f'printf "%s\\n" "{name} $*" >> {shlex.quote(str(self.log))}'
        path.write_text(f"#!{BASH}\n{rec}\n{body}\n")
        path.chmod(0o755)

    def _timeout(self, real: str) -> str:
        """``timeout [opts] DURATION CMD …``: CMD must be one of ours, else record it as unknown."""
        return f"""a=("$@"); i=0
while [[ "${{a[i]:-}}" == -* ]]; do
  case "${{a[i]}}" in -s|-k|--signal|--kill-after) i=$((i+2));; *) i=$((i+1));; esac
done
c="${{a[i+1]:-}}"
if [ -n "$c" ] && [ ! -x {shlex.quote(str(self.bin))}/"$c" ]; then
  printf "%s\\n" "?unknown $c" >> {shlex.quote(str(self.log))}; echo "timeout: $c: not stubbed" >&2; exit 127
fi
exec {shlex.quote(real)} "$@"
"""

    def run(
        self, script: str, *, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """Run ``script`` under bash; raises ``UnstubbedCommand`` if it reached for anything not ours."""
        named = sorted(
            p
            for p in set(_ABSOLUTE.findall(script))
            if p.startswith(_HOST_DIRS) and not p.startswith(str(self.root)) and _host_program(p)
        )
        if named:
            raise UnstubbedCommand(f"the script names host programs by path: {named}")
        log = shlex.quote(str(self.log))
        prelude = (
            f'command_not_found_handle() {{ printf "%s\\n" "?unknown $1" >> {log}; '
            'echo "$1: not stubbed" >&2; return 127; }\nexport -f command_not_found_handle\n'
        )
        out = subprocess.run(
            [BASH, "-c", prelude + script],
            env={"PATH": str(self.bin), "HOME": str(self.root), "LC_ALL": "C", **(env or {})},
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        unknown = sorted({c.split()[1] for c in self.all_calls() if c.startswith("?unknown ")})
        if unknown:
            raise UnstubbedCommand(f"the script ran commands that are not stubbed: {unknown}\n{out.stderr[-2000:]}")
        return out

    def all_calls(self) -> list[str]:
        """Every command run, tools and stubs, in order (``name arg …``)."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    @property
    def calls(self) -> list[str]:
        """The stubs' calls only (``name arg …``), in order."""
        return [c for c in self.all_calls() if c.split(" ", 1)[0] in self.stubs]


def _host_program(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def docker_argv(line: str, prelude: str = "") -> list[str]:
    """The words ``docker`` receives when bash runs ``line`` (after ``prelude``), docker a stub."""
    with tempfile.TemporaryDirectory(prefix="stub-host-") as tmp:
        host = StubHost(Path(tmp), {"docker": 'printf "%s\\n" "$@"'})
        out = host.run(prelude + "\n" + line)
        out.check_returncode()
        return out.stdout.splitlines()
