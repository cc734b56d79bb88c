"""The read-only calls a pre-flight makes on DigitalOcean and Vultr, answered in their published shapes.

DigitalOcean: ``GET /v2/account``, ``/v2/sizes``, ``/v2/regions``, ``/v2/images/{slug}`` and
``/v2/account/keys/{id}``; Vultr: ``GET /v2/account``, ``/v2/plans-metal`` (``plans_metal``: the
vendored definition's erratum), ``/v2/os``, ``/v2/regions`` and ``/v2/ssh-keys/{id}``; an unknown
image or key is a 404 in the cloud's shape. What each fake cloud offers lives here (``offer``), so a
test can take a size, a region, an image or a key away and see the pre-flight fail. Nothing here
creates anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from werkzeug.wrappers import Request, Response


def _default_offer() -> dict[str, Any]:
    """What the sandbox accounts are offered (the sandbox's own choice, shaped as the APIs answer)."""
    gpu = {"count": 8, "vram": {"amount": 192, "unit": "gib"}, "model": "amd_mi300x"}
    return {
        "do_sizes": {
            "gpu-mi300x8-1536gb": {"regions": ["atl1", "nyc2"], "price_hourly": 15.92, "gpu_info": gpu},
            "gpu-mi300x1-192gb": {
                "regions": ["atl1", "nyc2"],
                "price_hourly": 1.99,
                "gpu_info": {**gpu, "count": 1},
            },
            "gpu-mi355x8-2304gb-spot": {
                "regions": ["atl1"],
                "price_hourly": 0.0,
                "gpu_info": {"count": 8, "vram": {"amount": 288, "unit": "gib"}, "model": "amd_mi355x"},
            },
        },
        "do_images": {"gpu-amd-base": {"id": 240977387, "name": "AMD AI/ML Ready", "distribution": "Ubuntu"}},
        "do_droplet_limit": 25,
        "vultr_plans": {
            "vbm-256c-3072gb-8-mi355x-gpu": {"locations": ["ewr", "ord", "lax"], "monthly_cost": 15126},
            "vbm-256c-2048gb-8-mi300x-gpu": {"locations": ["ewr"], "monthly_cost": 21450},
        },
        "vultr_os": {2284: {"name": "Ubuntu 24.04 LTS x64", "arch": "x64", "family": "ubuntu"}},
        "do_regions": {"atl1": "Atlanta 1", "nyc2": "New York 2", "tor1": "Toronto 1"},
        "vultr_regions": {"ewr": ("New Jersey", "US"), "ord": ("Chicago", "US"), "lax": ("Los Angeles", "US")},
        # SSH keys on the accounts, by id (a plan's ssh_key_ids must name one)
        "do_ssh_keys": {"512189": "sandbox-key"},
        "vultr_ssh_keys": {"3b8066a7-b438-455a-9688-44afc9a3597f": "sandbox-key"},
    }


class RestCatalog:
    """Answers the read-only pre-flight paths under ``/do/v2`` and ``/vultr/v2``. The fake clouds'
    server routes here what ``serves`` claims, after the same authentication, faults and definition
    checks as every other request, and checks the answer too."""

    def __init__(self) -> None:
        self.offer = _default_offer()

    def _handler(self, req: Request) -> Callable[[Request], Response] | None:
        if req.method != "GET":
            return None
        path = req.path.rstrip("/")
        routes = {
            "/do/v2/account": self._do_account,
            "/do/v2/sizes": self._do_sizes,
            "/vultr/v2/account": self._vultr_account,
            "/vultr/v2/plans-metal": self._vultr_plans,
            "/vultr/v2/os": self._vultr_os,
            "/do/v2/regions": self._do_regions,
            "/vultr/v2/regions": self._vultr_regions,
        }
        handler = routes.get(path)
        last = path.rsplit("/", 1)[-1]
        by_prefix = {
            "/do/v2/images/": self._do_image,
            "/do/v2/account/keys/": self._do_ssh_key,
            "/vultr/v2/ssh-keys/": self._vultr_ssh_key,
        }
        for prefix, one in by_prefix.items():
            if handler is None and path.startswith(prefix):
                handler = lambda r, one=one: one(r, last)  # noqa: E731
        return handler

    def serves(self, req: Request) -> bool:
        return self._handler(req) is not None

    def answer(self, req: Request) -> Response:
        handler = self._handler(req)
        if handler is None:
            raise ValueError(f"{req.method} {req.path} is not a pre-flight read")
        return handler(req)

    # DigitalOcean --------------------------------------------------------------------------
    def _do_account(self, req: Request) -> Response:
        return _json(
            {
                "account": {
                    "droplet_limit": self.offer["do_droplet_limit"],
                    "floating_ip_limit": 3,
                    "email": "sandbox@example.com",
                    "uuid": "b6fr89dbf6d9156cace5f3c78dc9851d957381ef",
                    "email_verified": True,
                    "status": "active",
                    "status_message": "",
                }
            }
        )

    def _do_sizes(self, req: Request) -> Response:
        sizes = [
            {
                "slug": slug,
                "memory": 1966080,
                "vcpus": 160,
                "disk": 2046,
                "transfer": 60.0,
                "price_monthly": round(s["price_hourly"] * 672, 2),
                "price_hourly": s["price_hourly"],
                "regions": list(s["regions"]),
                "available": bool(s["regions"]),
                "description": "GPU Droplet (sandbox)",
                "gpu_info": s["gpu_info"],
            }
            for slug, s in self.offer["do_sizes"].items()
        ]
        return _json({"sizes": sizes, "links": {}, "meta": {"total": len(sizes)}})

    def _do_image(self, req: Request, slug: str) -> Response:
        image = self.offer["do_images"].get(slug)
        if image is None:
            return _json({"id": "not_found", "message": "The resource you were accessing could not be found."}, 404)
        return _json(
            {
                "image": {
                    **image,
                    "slug": slug,
                    "public": True,
                    # the definition's region enum for an image omits atl1 (a GPU region its own
                    # /v2/regions lists): the fake names only regions the enum holds
                    "regions": ["nyc2", "tor1"],
                    "created_at": "2026-10-01T00:00:00Z",
                    "type": "base",
                    "min_disk_size": 20,
                    "size_gigabytes": 8.5,
                    "description": "sandbox image",
                    "tags": [],
                    "status": "available",
                }
            }
        )

    def _do_regions(self, req: Request) -> Response:
        sizes = self.offer["do_sizes"]
        regions = [
            {
                "slug": slug,
                "name": name,
                "available": True,
                "features": ["backups", "ipv6", "metadata"],
                "sizes": [s for s, x in sizes.items() if slug in x["regions"]],
            }
            for slug, name in self.offer["do_regions"].items()
        ]
        return _json({"regions": regions, "links": {}, "meta": {"total": len(regions)}})

    def _do_ssh_key(self, req: Request, key_id: str) -> Response:
        name = self.offer["do_ssh_keys"].get(key_id)
        if name is None:
            return _json({"id": "not_found", "message": "The resource you were accessing could not be found."}, 404)
        key = {"id": int(key_id), "fingerprint": "3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa", "name": name}
        return _json({"ssh_key": {**key, "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIsandbox sandbox"}})

    # Vultr -----------------------------------------------------------------------------------
    def _vultr_account(self, req: Request) -> Response:
        return _json(
            {
                "account": {
                    "name": "sandbox",
                    "email": "sandbox@example.com",
                    "acls": ["manage_users", "subscriptions", "billing"],
                    "balance": 0,
                    "pending_charges": 0,
                    "last_payment_date": "2026-11-01T00:00:00+00:00",
                    "last_payment_amount": 0,
                }
            }
        )

    def _vultr_plans(self, req: Request) -> Response:
        plans = [
            {
                "id": pid,
                "cpu_count": 128,
                "cpu_model": "AMD EPYC",
                "cpu_threads": 256,
                "ram": 3145728,
                "disk": 3576,
                "disk_count": 8,
                "bandwidth": 10240,
                "monthly_cost": p["monthly_cost"],
                "type": "NVMe",
                "locations": list(p["locations"]),
            }
            for pid, p in self.offer["vultr_plans"].items()
        ]
        return _vultr_page("plans_metal", plans)

    def _vultr_os(self, req: Request) -> Response:
        return _vultr_page("os", [{"id": oid, **o} for oid, o in self.offer["vultr_os"].items()])

    def _vultr_regions(self, req: Request) -> Response:
        regions = [
            {"id": rid, "city": city, "country": country, "continent": "North America", "options": ["ddos_protection"]}
            for rid, (city, country) in self.offer["vultr_regions"].items()
        ]
        return _vultr_page("regions", regions)

    def _vultr_ssh_key(self, req: Request, key_id: str) -> Response:
        name = self.offer["vultr_ssh_keys"].get(key_id)
        if name is None:
            return _json({"error": "SSH key not found.", "status": 404}, 404)
        key = {"id": key_id, "date_created": "2026-10-10T01:56:20+00:00", "name": name}
        return _json({"ssh_key": {**key, "ssh_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIsandbox sandbox"}})


def _vultr_page(key: str, items: list[dict[str, Any]]) -> Response:
    return _json({key: items, "meta": {"total": len(items), "links": {"next": "", "prev": ""}}})


def _json(obj: Any, status: int = 200) -> Response:
    return Response(json.dumps(obj), status=status, mimetype="application/json")
