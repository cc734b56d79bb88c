"""Resolve container image tags to digests through the registry's HTTP API (``bakeoff images pin``).

Why: a tag can be re-pushed with other code, so only digest-pinned images may receive serving
secrets (``installation.check_secret_images``), and every vendored recipe names a tag. This asks
the registry what a tag points at now (Docker Registry v2 / OCI distribution: ``HEAD
/v2/<name>/manifests/<tag>`` answers ``Docker-Content-Digest``, the digest ``docker buildx
imagetools inspect`` prints, a multi-platform index's when there is one) and writes the result in
the trusted-images Variable's format (a JSON list of ``name:tag@sha256:<hex>``). Anonymous pulls
only: a registry that answers 401 with a Bearer challenge is asked for an anonymous token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx

from bakeoff.plan import load_plan, recipes
from bakeoff.serving.userdata import image_for

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
DOCKER_HUB = "registry-1.docker.io"


class ImageError(ValueError):
    """An image that cannot be resolved: the message names the image and what the registry said."""


@dataclass(frozen=True)
class Ref:
    registry: str  # host[:port] of the registry API
    repository: str  # e.g. library/python, lmsysorg/sglang
    tag: str


def parse(image: str) -> Ref:
    """``[registry/]name[:tag]`` as docker reads it (docker.io and ``library/`` when no registry)."""
    name = image.strip()
    if not name or "@" in name or any(c.isspace() for c in name):
        raise ImageError(f"image {image!r}: expected [registry/]name[:tag] (no digest, no spaces)")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, name
    repo, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "latest")
    if registry in ("docker.io", "index.docker.io"):
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in repo:
        repo = f"library/{repo}"
    if not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", repo) or not re.fullmatch(r"[\w][\w.-]{0,127}", tag):
        raise ImageError(f"image {image!r}: {repo!r}:{tag!r} is not a valid repository name and tag")
    return Ref(registry, repo, tag)


def _challenge(header: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


def _token(client: httpx.Client, header: str, image: str) -> str:
    params = _challenge(header)
    realm = params.pop("realm", "")
    if not header.lower().startswith("bearer") or not realm.startswith(("https://", "http://")):
        raise ImageError(
            f"image {image}: the registry wants credentials ({header[:80]!r}); only anonymous pulls are resolved"
        )
    r = client.get(realm, params=params)
    if r.status_code != 200:
        raise ImageError(f"image {image}: the registry's token service answered {r.status_code}")
    body: dict[str, Any] = r.json()
    token = body.get("token") or body.get("access_token")
    if not isinstance(token, str) or not token:
        raise ImageError(f"image {image}: the registry's token service sent no token")
    return token


def resolve(image: str, client: httpx.Client, plain_http: frozenset[str] = frozenset()) -> str:
    """``image`` pinned: ``name:tag@sha256:<hex>``, the digest the registry gives for the tag now.
    An image already pinned by digest is returned as it is. ``plain_http``: registries (host:port)
    spoken to without TLS (a local registry, as docker allows for localhost)."""
    if "@sha256:" in image:
        return image.strip()
    ref = parse(image)
    scheme = "http" if ref.registry in plain_http else "https"
    url = f"{scheme}://{ref.registry}/v2/{ref.repository}/manifests/{ref.tag}"
    headers = {"Accept": MANIFEST_TYPES}
    r = client.head(url, headers=headers)
    if r.status_code == 401 and "www-authenticate" in r.headers:
        headers["Authorization"] = f"Bearer {_token(client, r.headers['www-authenticate'], image)}"
        r = client.head(url, headers=headers)
    if r.status_code == 404:
        raise ImageError(f"image {image}: no tag {ref.tag!r} in {ref.registry}/{ref.repository} (404)")
    if r.status_code != 200:
        raise ImageError(f"image {image}: HEAD {url} answered {r.status_code}")
    digest = r.headers.get("docker-content-digest", "").strip()
    if not DIGEST.match(digest):
        raise ImageError(
            f"image {image}: the registry sent no sha256 Docker-Content-Digest ({digest[:80]!r}); "
            "pin it with docker buildx imagetools inspect instead"
        )
    name = image.strip()
    return f"{name}@{digest}" if ":" in name.rsplit("/", 1)[-1] else f"{name}:{ref.tag}@{digest}"


def pin_all(images: list[str], plain_http: frozenset[str] = frozenset(), timeout_s: float = 20.0) -> list[str]:
    """Each image resolved (in order, duplicates once); the first failure raises ImageError."""
    with httpx.Client(timeout=timeout_s, follow_redirects=False) as client:
        return [resolve(i, client, plain_http) for i in dict.fromkeys(images)]


def recipe_images() -> list[str]:
    """Every image the vendored single-node recipes name."""

    return sorted({r.image for r in recipes.recipes().values()})


def plan_images(plan_ref: str) -> list[str]:
    """The image each of a plan's targets would run (its override, else its stack's)."""

    return sorted({image_for(t) for t in load_plan(plan_ref).targets})
