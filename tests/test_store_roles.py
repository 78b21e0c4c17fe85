"""The store's contract stays small enough to hold in one's head: Store is the union of roles, one
for each kind of caller, none of them big, and every method of Store is declared in exactly one."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Protocol

import pytest

from tickd.scheduler.ports.backends import Store

MOST_METHODS_IN_A_ROLE = 15
ROLES = [base for base in Store.__bases__ if base is not Protocol]


def declared_methods(protocol: type) -> set[str]:
    """The public methods a class declares itself, not those it inherits."""
    return {
        name
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }


def store_methods() -> set[str]:
    """Every public method of Store, wherever in its bases it is declared."""
    return {
        name
        for name in dir(Store)
        if not name.startswith("_") and inspect.isfunction(getattr(Store, name))
    }


def test_store_is_made_of_roles() -> None:
    assert ROLES, "Store is one Protocol, not the union of roles"


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.__name__)
def test_a_role_is_a_protocol_of_at_most_fifteen_methods(role: type) -> None:
    assert getattr(role, "_is_protocol", False), f"{role.__name__} is not a Protocol"
    methods = declared_methods(role)
    assert len(methods) <= MOST_METHODS_IN_A_ROLE, f"{role.__name__}: {sorted(methods)}"


def test_store_declares_no_method_outside_its_roles() -> None:
    assert declared_methods(Store) == set()


def test_every_method_of_the_store_is_in_exactly_one_role() -> None:
    owners = Counter(name for role in ROLES for name in declared_methods(role))
    in_several = sorted(name for name, roles in owners.items() if roles > 1)
    assert in_several == []
    assert set(owners) == store_methods()
