"""The hub stand-in of the node rehearsal: a small checkpoint served in the Hugging Face hub's API shape
over TLS as ``huggingface.co``, so the boot script's weights step takes the hub path a first run takes
(bakeoff's own downloader, hub_fetch.py, in the agent image) and the harness can check what landed.

It answers the two requests hub_fetch makes: ``GET /api/models/<repo>/revision/main`` (the revision's
``sha`` and its ``siblings``) and ``GET /<repo>/resolve/<sha>/<file>``; it logs one line a request, with
whether an Authorization header came (it must come only to the hub, never to a redirect).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

NAME = "huggingface.co"
IP = "10.213.77.2"  # on the rehearsal's network, beside the registry on the gateway

SERVER = r'''#!/usr/bin/python3
"""STAND-IN huggingface.co (bakeoff node rehearsal): serves /srv/hub/<org>/<name>/<file> in the hub's shape."""
import http.server, json, os, ssl, sys, urllib.parse as up
ROOT = "/srv/hub"
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = up.unquote(up.urlsplit(self.path).path)
        auth = "token" if self.headers.get("Authorization") else "anonymous"
        print(f"hub-stand-in: GET {path} {auth}", flush=True)
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and parts[-2:] == ["revision", "main"]:
            repo = "/".join(parts[2:-2])
            meta = os.path.join(ROOT, repo, ".revision.json")
            return self.send(200, open(meta, "rb").read()) if os.path.isfile(meta) else self.send(404, b"{}")
        if len(parts) >= 5 and parts[2] == "resolve":
            f = os.path.join(ROOT, parts[0], parts[1], *parts[4:])
            if ".." not in parts and os.path.isfile(f):
                return self.send(200, open(f, "rb").read())
        self.send(404, b'{"error": "Entry not found"}')
    def send(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
'''


def checkpoint(repo: str) -> dict[str, bytes]:
    """A small stand-in checkpoint for ``repo``: what the weights step verifies (a tokenizer, the index and
    every shard it names), its bytes derived from the repo name so each repo's files differ."""
    seed = hashlib.sha256(repo.encode()).digest()
    shards = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    index = {"metadata": {"stand_in": True}, "weight_map": {f"layer.{i}": s for i, s in enumerate(shards)}}
    return {
        "config.json": json.dumps({"stand_in": True, "repo": repo}).encode(),
        "tokenizer.json": json.dumps({"stand_in": True}).encode(),
        "model.safetensors.index.json": json.dumps(index).encode(),
        **{s: seed * (64 + i) for i, s in enumerate(shards)},
    }


def revision(repo: str) -> str:
    return hashlib.sha1(repo.encode(), usedforsecurity=False).hexdigest()


def write_tree(root: Path, repos: set[str]) -> None:
    """The files the server serves, one folder per repo, with its revision's answer."""
    for repo in repos:
        d = root / repo
        d.mkdir(parents=True, exist_ok=True)
        files = checkpoint(repo)
        for name, body in files.items():
            (d / name).write_bytes(body)
        siblings = [{"rfilename": n} for n in sorted(files)]
        (d / ".revision.json").write_text(json.dumps({"id": repo, "sha": revision(repo), "siblings": siblings}))
    (root / "server.py").write_text(SERVER)


def digests(repo: str) -> dict[str, str]:
    """The SHA-256 of each file the hub serves for ``repo`` (what the node's snapshot must hold)."""
    return {n: hashlib.sha256(b).hexdigest() for n, b in checkpoint(repo).items()}
