"""Every operation of the API's own /openapi.json has a method on both clients."""

from __future__ import annotations

import inspect

from tests.api.conftest import Api
from tickd.client import OPERATIONS, AsyncClient, Client


async def operation_ids(api: Api) -> set[str]:
    status, document, _ = await api.call("GET", "/openapi.json", token=None)
    assert status == 200, document
    return {op["operationId"] for path in document["paths"].values() for op in path.values()}


async def test_every_operation_of_the_document_has_a_client_method(api: Api) -> None:
    documented = await operation_ids(api)
    assert sorted(documented - OPERATIONS.keys()) == [], "operations no client method calls"
    assert sorted(OPERATIONS.keys() - documented) == [], "methods of operations gone from the API"


def test_both_clients_have_each_operations_method() -> None:
    for operation, name in OPERATIONS.items():
        blocking, awaited = getattr(Client, name, None), getattr(AsyncClient, name, None)
        assert callable(blocking) and not inspect.iscoroutinefunction(blocking), operation
        assert inspect.iscoroutinefunction(awaited), operation
        assert inspect.signature(blocking) == inspect.signature(awaited), operation
