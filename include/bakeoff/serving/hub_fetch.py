"""The weights downloader the node runs: bakeoff's own, in the agent's digest-pinned image, never the plan's.

Why: the hub token must reach only code the installation trusts. The plan chooses the serving image,
so the download cannot run in it (its code would read the token, the node's metadata service and, on
OCI, the instance principal). This program is standard library only (nothing to install, so nothing to
swap on an index), travels inside the user-data, and the boot script checks its SHA-256 (``SHA256``)
before it runs. It lays the snapshot out as huggingface_hub's cache does (``models--org--name/refs/main``
-> ``snapshots/<revision>/``), which the engine then reads offline. The token goes only to the hub:
it is an unredirected header, so the CDN a file redirects to never sees it.
"""

from __future__ import annotations

import hashlib

SCRIPT = "/etc/bakeoff/hub_fetch.py"  # user-data writes PROGRAM there; the container reads it read-only
# argv: the repo, the cache's hub folder. Token from HF_TOKEN / HUGGING_FACE_HUB_TOKEN (the secrets env file).
SOURCE = """
import concurrent.futures as cf, json, os, re, sys, urllib.parse as up, urllib.request as ur
REPO, HUB = sys.argv[1], sys.argv[2]
TOK = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
def get(path):
    r = ur.Request("https://huggingface.co" + path)
    if TOK:
        r.add_unredirected_header("Authorization", "Bearer " + TOK)
    return ur.urlopen(r, timeout=300)
info = json.load(get("/api/models/" + REPO + "/revision/main"))
rev = str(info.get("sha"))
if not re.fullmatch("[0-9a-f]{40}", rev):
    sys.exit("bakeoff: the hub named no revision for " + REPO)
d = os.path.join(HUB, "models--" + REPO.replace("/", "--"))
snap = os.path.join(d, "snapshots", rev)
def one(name):
    parts = name.split("/")
    if name.startswith("/") or "\\\\" in name or any(p in ("", ".", "..") for p in parts):
        raise ValueError("refused file name " + repr(name[:80]))
    dest = os.path.join(snap, *parts)
    if os.path.exists(dest):
        return
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with get("/" + REPO + "/resolve/" + rev + "/" + up.quote(name)) as r, open(dest + ".part", "wb") as f:
        while b := r.read(1 << 24):
            f.write(b)
    os.replace(dest + ".part", dest)
with cf.ThreadPoolExecutor(8) as ex:
    list(ex.map(one, [str(s.get("rfilename")) for s in info.get("siblings") or []]))
os.makedirs(os.path.join(d, "refs"), exist_ok=True)
with open(os.path.join(d, "refs", "main"), "w") as f:
    f.write(rev)
"""


def program() -> str:
    """SOURCE with one space per indentation level: the same program in fewer user-data bytes."""
    lines = [ln for ln in SOURCE.strip().splitlines() if ln.strip()]
    return "\n".join(" " * ((len(ln) - len(ln.lstrip(" "))) // 4) + ln.lstrip(" ") for ln in lines) + "\n"


SHA256 = hashlib.sha256(program().encode()).hexdigest()
