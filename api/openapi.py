"""/openapi.json (OpenAPI 3.1) and a small docs page, made from the route table and its models."""

from __future__ import annotations

import html
import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tickd.api.edge import PROBE_PATHS
from tickd.api.models import Problem
from tickd.api.routing import WRITES, Route, Routes

REF = "#/components/schemas/{model}"
PATH_PARAM = re.compile(r"{(\w+)}")
PROBLEMS = {
    "400": "Invalid request (query, JSON or cursor)",
    "401": "Missing or wrong token",
    "403": "Token scope too low, or a write from another origin's page (without tokens)",
    "404": "Not found",
    "409": "Conflict",
    "412": "If-Match does not match the current revision",
    "413": "Body over 1 MiB",
    "415": "A write whose Content-Type is not application/json",
    "421": "Host is not a loopback name or address (only when the API has no tokens)",
    "422": "Validation failed",
}


def openapi_document(routes: Routes, *, version: str) -> dict[str, Any]:
    models = _models(routes)
    key_map, schema = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    refs: dict[type[BaseModel], str] = {
        model: entry["$ref"]
        for (model, _), entry in key_map.items()
        if issubclass(model, BaseModel)
    }
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, refs)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tickd",
            "version": version,
            "description": "Jobs, executions and handlers of a tickd scheduler.",
        },
        "paths": paths,
        "components": {
            "schemas": schema.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _models(routes: Routes) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = [Problem]
    for route in routes:
        for model in (route.body, route.response):
            if model is not None and model not in found:
                found.append(model)
    return found


def _operation(route: Route[Any, Any], refs: dict[type[BaseModel], str]) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": route.summary,
        "operationId": _operation_id(route),
        "tags": [route.tag],
        "parameters": _path_parameters(route) + _query_parameters(route),
        "responses": _responses(route, refs),
    }
    if route.scope is not None:
        operation["security"] = [{"bearer": []}]
        operation["description"] = f"Needs a token with the `{route.scope}` scope (or higher)."
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": refs[route.body]}}},
        }
    return operation


def _operation_id(route: Route[Any, Any]) -> str:
    words = re.sub(r"[{}]", "", route.path).strip("/").replace("/", "_").replace("-", "_")
    return f"{route.method.lower()}_{words or 'root'}"


def _path_parameters(route: Route[Any, Any]) -> list[dict[str, Any]]:
    return [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in PATH_PARAM.findall(route.path)
    ]


def _query_parameters(route: Route[Any, Any]) -> list[dict[str, Any]]:
    if route.query is None:
        return []
    schema = route.query.model_json_schema(ref_template=REF)
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": {k: v for k, v in prop.items() if k != "title"},
            **({"description": prop["description"]} if "description" in prop else {}),
        }
        for name, prop in schema.get("properties", {}).items()
    ]


def _responses(route: Route[Any, Any], refs: dict[type[BaseModel], str]) -> dict[str, Any]:
    problem = {"application/problem+json": {"schema": {"$ref": refs[Problem]}}}
    responses: dict[str, Any] = {}
    for success in sorted({route.status, *route.also}):
        if route.raw:
            responses[str(success)] = {"description": route.summary}
        elif route.response is None:
            responses[str(success)] = {"description": "Done"}
        else:
            responses[str(success)] = {
                "description": route.summary,
                "content": {"application/json": {"schema": {"$ref": refs[route.response]}}},
            }
    for status, description in _problem_statuses(route):
        responses[status] = {"description": description, "content": problem}
    return responses


def _problem_statuses(route: Route[Any, Any]) -> list[tuple[str, str]]:
    if route.raw and route.scope is None:
        return []
    wanted = {"400", "401", "403"} if route.scope else {"400"}
    if route.path not in PROBE_PATHS:
        wanted.add("421")
    if route.method in WRITES:
        wanted |= {"403", "415"}
    if PATH_PARAM.search(route.path):
        wanted.add("404")
    if route.body is not None:
        wanted |= {"409", "413", "422"}
    if route.method in ("PUT", "PATCH", "POST") and PATH_PARAM.search(route.path):
        wanted |= {"409", "412", "422"}
    if route.method == "DELETE":
        wanted.add("412")
    return [(s, PROBLEMS[s]) for s in sorted(wanted)]


def docs_page(document: dict[str, Any]) -> str:
    """A readable list of the operations, with no script and nothing fetched from elsewhere."""
    rows = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            rows.append(
                f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code>"
                f"</td><td>{html.escape(operation['summary'])}</td></tr>"
            )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>tickd API</title>"
        "<style>body{font-family:sans-serif;margin:2em}td{padding:.2em 1em}</style></head>"
        "<body><h1>tickd API</h1><p>The full description is at "
        "<a href='/openapi.json'>/openapi.json</a> (OpenAPI 3.1).</p><table>"
        + "".join(rows)
        + "</table></body></html>"
    )
