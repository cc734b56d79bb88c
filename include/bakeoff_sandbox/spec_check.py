"""Requests and answers of the fake clouds checked against the clouds' own published OpenAPI definitions.

The definitions are vendored in ``specs/`` (see each ``<cloud>.SOURCE``; ``make cloud-specs``
refreshes them). A request is held to its operation: the path and method must exist, every query
parameter must be one the operation defines (a parameter the spec does not name is refused, as a
strict API would), path and query values must fit their schemas (type, enum, minimum, maximum),
the JSON body must validate (required fields, types, enums, patterns, lengths, formats such as
``date-time`` and ``ipv4``) and hold no field the definition does not define nor one it marks
``readOnly``, and the rules the definition states only in prose (``spec_rules``) must hold. An answer the
fake sends is held tighter still: it must validate against the schema of its status, carry the
headers the spec declares, and hold no field the spec does not define, so a fake cannot invent a
field (Vultr's ``power_status``) that the code under test would then rely on.

OpenAPI 3.0 schemas become JSON Schema (``nullable``; ``readOnly`` fields are not required in a
request), validated with ``jsonschema``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from bakeoff_sandbox.spec_rules import rule_problems

SPECS = Path(__file__).with_name("specs")
# answers any operation may give though an operation lists none (Vultr's lists neither): a rate limit
# and the server's own failures
UNDOCUMENTED_OK = frozenset({429, 500, 502, 503, 504})
# the status each cloud refuses an invalid request with, whether an operation lists it or not
REFUSAL = {"digitalocean": 422, "vultr": 400}
FORMATS = FormatChecker()  # date-time (RFC 3339), ipv4, ipv6, uuid, ...: a declared format is checked


@dataclass
class Operation:
    template: str
    method: str
    spec: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)  # path values from the URL

    def parameters(self, where: str) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.spec.get("parameters") or [] if p.get("in") == where}


def to_json_schema(node: Any, *, request: bool = False) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: ``nullable`` becomes a null type; in a request,
    ``readOnly`` properties are neither required nor expected."""
    if isinstance(node, list):
        return [to_json_schema(v, request=request) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v, request=request) for k, v in node.items() if k not in ("nullable", "deprecated")}
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    if request and isinstance(node.get("properties"), dict):
        ro = {k for k, v in node["properties"].items() if isinstance(v, dict) and v.get("readOnly")}
        if ro and "required" in out:
            out["required"] = [r for r in out["required"] if r not in ro]
    return out


class Spec:
    """One cloud's vendored definition, served under ``prefix`` by the fake (e.g. ``/do`` + ``/v2/...``)."""

    def __init__(self, cloud: str, prefix: str):
        self.cloud, self.prefix = cloud, prefix
        self.doc = json.loads((SPECS / f"{cloud}.json").read_text())
        self._routes = [
            (re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "(?P<p>[^/]+)", re.escape(t)) + "$"), t)
            for t in self.doc["paths"]
        ]

    def operation(self, method: str, path: str) -> Operation | None:
        rel = path[len(self.prefix) :] if path.startswith(self.prefix) else path
        for rx, template in self._routes:
            m = rx.match(rel)
            if m is None:
                continue
            item = self.doc["paths"][template]
            op = item.get(method.lower())
            if op is None:
                continue
            op = {**op, "parameters": [*(item.get("parameters") or []), *(op.get("parameters") or [])]}
            names = re.findall(r"\{([^}]+)\}", template)
            return Operation(template, method.upper(), op, dict(zip(names, m.groups(), strict=True)))
        return None

    # requests -------------------------------------------------------------------------------
    def check_request(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> list[str]:
        """Why the real API would refuse this request, by its definition (empty: it is valid)."""
        op = self.operation(method, path)
        if op is None:
            return [f"{method} {path}: no such operation in {self.cloud}'s API definition"]
        problems = []
        for name, value in op.params.items():
            problems += _param_problems(op.parameters("path").get(name), name, [value], "path")
        defined = op.parameters("query")
        for name, values in query.items():
            if name not in defined:
                problems.append(
                    f"query parameter {name!r} is not defined for {op.method} {op.template} "
                    f"(it takes: {', '.join(sorted(defined)) or 'none'})"
                )
                continue
            problems += _param_problems(defined[name], name, values, "query")
        problems += [
            f"query parameter {n!r} is required" for n, p in defined.items() if p.get("required") and n not in query
        ]
        rb = op.spec.get("requestBody")
        if rb:
            schema = (rb.get("content") or {}).get("application/json", {}).get("schema")
            if body is None:
                if rb.get("required"):
                    problems.append("a JSON body is required")
            elif schema is not None:
                problems += _schema_problems(_validator(json.dumps(schema), True), body, "body")
                problems += [f"body: field {p} is not in the definition" for p in unknown_fields(schema, body)]
                problems += [f"body: field {p} is readOnly" for p in read_only_fields(schema, body)]
        return problems + rule_problems(self.cloud, op.method, op.template, query, body)

    # answers --------------------------------------------------------------------------------
    def check_answer(self, method: str, path: str, status: int, headers: dict[str, str], body: Any) -> list[str]:
        """Where the fake's answer departs from the definition (empty: it is what the real API may send)."""
        op = self.operation(method, path)
        if op is None:
            return []  # a refused route: the request check already said why
        responses = op.spec.get("responses") or {}
        resp = responses.get(str(status)) or responses.get("default")
        if resp is None and (status in UNDOCUMENTED_OK or status == REFUSAL.get(self.cloud)):
            return []
        if resp is None:
            return [f"{op.method} {op.template}: status {status} is not a documented answer"]
        problems = []
        lower = {k.lower(): v for k, v in headers.items()}
        for name, h in (resp.get("headers") or {}).items():
            if name.lower() in ("content-type", "x-request-id", "content-disposition"):
                continue
            if name.lower() not in lower:
                problems.append(f"header {name} missing")
            elif (h.get("schema") or {}).get("type") == "integer" and not lower[name.lower()].lstrip("-").isdigit():
                problems.append(f"header {name} is not an integer: {lower[name.lower()]!r}")
        schema = (resp.get("content") or {}).get("application/json", {}).get("schema")
        if schema is not None and body is not None:
            problems += _schema_problems(_validator(json.dumps(schema), False), body, "answer")
            problems += [f"answer: field {p} is not in the definition" for p in unknown_fields(schema, body)]
        return problems


@cache
def _validator(schema_json: str, request: bool) -> Draft202012Validator:
    return Draft202012Validator(to_json_schema(json.loads(schema_json), request=request), format_checker=FORMATS)


def _schema_problems(v: Draft202012Validator, instance: Any, what: str) -> list[str]:
    out = []
    for e in sorted(v.iter_errors(instance), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in e.absolute_path) or what
        out.append(f"{where}: {e.message[:200]}")
    return out


def _param_problems(p: dict[str, Any] | None, name: str, values: list[str], where: str) -> list[str]:
    if p is None:
        return []
    schema = to_json_schema(p.get("schema") or {})
    out = []
    for raw in values:
        value: Any = raw
        if schema.get("type") == "integer":
            try:
                value = int(raw)
            except ValueError:
                out.append(f"{where} parameter {name!r}: {raw!r} is not an integer")
                continue
        out += _schema_problems(
            Draft202012Validator(schema, format_checker=FORMATS), value, f"{where} parameter {name!r}"
        )
    return [o if o.startswith(where) else f"{where} parameter {name!r}: {o}" for o in out]


def _branches(schema: Any) -> list[dict[str, Any]]:
    """The schema and every allOf/anyOf/oneOf branch below it, flattened."""
    if not isinstance(schema, dict):
        return []
    out = [schema]
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            out += _branches(sub)
    return out


def unknown_fields(schema: Any, instance: Any, where: str = "") -> list[str]:
    """Dotted paths of object fields in ``instance`` that no branch of ``schema`` defines (an
    object schema with no properties and no additionalProperties is left open)."""
    parts = _branches(schema)
    if isinstance(instance, list):
        items = [p["items"] for p in parts if "items" in p]
        return [u for i, v in enumerate(instance) for u in unknown_fields({"allOf": items}, v, f"{where}[{i}]")]
    if not isinstance(instance, dict):
        return []
    props: dict[str, list[Any]] = {}
    for p in parts:
        for k, v in (p.get("properties") or {}).items():
            props.setdefault(k, []).append(v)
    extra = [p["additionalProperties"] for p in parts if isinstance(p.get("additionalProperties"), dict)]
    if not props or extra or any(p.get("additionalProperties") is True for p in parts):
        return [u for k, v in instance.items() for u in unknown_fields({"allOf": extra}, v, f"{where}.{k}")]
    out = []
    for k, v in instance.items():
        if k not in props:
            out.append(f"{where}.{k}".lstrip("."))
        else:
            out += unknown_fields({"allOf": props[k]}, v, f"{where}.{k}")
    return out


def read_only_fields(schema: Any, instance: Any, where: str = "") -> list[str]:
    """Dotted paths of fields in ``instance`` that a branch of ``schema`` marks ``readOnly`` (the
    server sets them; a request that sends one is refused)."""
    parts = _branches(schema)
    if isinstance(instance, list):
        items = [p["items"] for p in parts if "items" in p]
        return [u for i, v in enumerate(instance) for u in read_only_fields({"allOf": items}, v, f"{where}[{i}]")]
    if not isinstance(instance, dict):
        return []
    out = []
    for k, v in instance.items():
        subs = [p["properties"][k] for p in parts if k in (p.get("properties") or {})]
        if any(b.get("readOnly") for s in subs for b in _branches(s)):
            out.append(f"{where}.{k}".lstrip("."))
        elif subs:
            out += read_only_fields({"allOf": subs}, v, f"{where}.{k}")
    return out
