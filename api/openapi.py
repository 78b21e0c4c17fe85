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
    """Each parameter of the path, a string, with the rule and the description its route's
    path model gives it."""
    declared = {} if route.path_model is None else route.path_model.model_json_schema()
    properties = declared.get("properties", {})
    parameters = []
    for name in PATH_PARAM.findall(route.path):
        prop = properties.get(name, {"type": "string"})
        schema = {k: v for k, v in prop.items() if k not in ("title", "description")}
        parameter = {"name": name, "in": "path", "required": True, "schema": schema}
        if "description" in prop:
            parameter["description"] = prop["description"]
        parameters.append(parameter)
    return parameters


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
    """A readable list of the operations, each linked to the schemas of what it takes and
    gives, then those schemas field by field; no script and nothing fetched from elsewhere."""
    rows = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            rows.append(
                f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code>"
                f"</td><td>{html.escape(operation['summary'])}</td>"
                f"<td>{_schema_link(_body_ref(operation))}</td>"
                f"<td>{_schema_link(_response_ref(operation))}</td></tr>"
            )
    schemas = document["components"]["schemas"]
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>tickd API</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:.2em 1em;text-align:left;"
        "vertical-align:top}section{margin-top:2em}</style></head>"
        "<body><h1>tickd API</h1><p>The full description is at "
        "<a href='/openapi.json'>/openapi.json</a> (OpenAPI 3.1).</p><table>"
        "<tr><th>method</th><th>path</th><th>what it does</th><th>takes</th><th>gives</th></tr>"
        + "".join(rows)
        + "</table><h2>Schemas</h2>"
        + "".join(_schema_section(name, schemas[name]) for name in sorted(schemas))
        + "</body></html>"
    )


def _body_ref(operation: dict[str, Any]) -> str | None:
    content = operation.get("requestBody", {}).get("content", {})
    ref: str | None = content.get("application/json", {}).get("schema", {}).get("$ref")
    return ref


def _response_ref(operation: dict[str, Any]) -> str | None:
    for status, response in sorted(operation["responses"].items()):
        if status.startswith("2"):
            content = response.get("content", {}).get("application/json", {})
            ref: str | None = content.get("schema", {}).get("$ref")
            if ref:
                return ref
    return None


def _schema_link(ref: str | None) -> str:
    if not ref:
        return ""
    name = html.escape(ref.rpartition("/")[2])
    return f"<a href='#{name}'>{name}</a>"


def _schema_section(name: str, schema: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    fields = "".join(
        f"<tr><td><code>{html.escape(field)}</code></td><td>{_type_of(prop)}</td>"
        f"<td>{'required' if field in required else ''}</td>"
        f"<td>{html.escape(str(prop.get('description', '')))}</td></tr>"
        for field, prop in schema.get("properties", {}).items()
    )
    description = html.escape(str(schema.get("description", "")))
    return (
        f"<section id='{html.escape(name)}'><h3>{html.escape(name)}</h3><p>{description}</p>"
        + (f"<table>{fields}</table>" if fields else "")
        + "</section>"
    )


def _type_of(prop: dict[str, Any]) -> str:
    """A field's type in words: a type name, a link to a schema, an array's items, or the
    choices of anyOf/oneOf."""
    if "$ref" in prop:
        return _schema_link(prop["$ref"])
    for choice in ("anyOf", "oneOf"):
        if choice in prop:
            return " or ".join(_type_of(option) for option in prop[choice])
    if "enum" in prop:
        return " | ".join(f"<code>{html.escape(repr(value))}</code>" for value in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"array of {_type_of(prop.get('items', {}))}"
    return html.escape(" or ".join(kind) if isinstance(kind, list) else str(kind))
