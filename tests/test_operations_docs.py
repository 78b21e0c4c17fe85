"""docs/operations.md's configuration reference is generated from the settings model: a setting
added, renamed, re-defaulted or re-described without regenerating it fails here. The metrics it
names, and those of deploy/, are checked by tests/test_deploy_in_step.py."""

from __future__ import annotations

import dataclasses

from tickd import docs
from tickd.scheduler.config.settings import Settings


def test_the_reference_in_docs_operations_md_is_in_step_with_the_settings() -> None:
    current = docs.OPERATIONS_MD.read_text(encoding="utf-8")
    assert current == docs.with_reference(current), "run: python -m tickd.docs"
    assert docs.main(["--check"]) == 0


def test_every_setting_is_listed_with_its_variable_and_a_description() -> None:
    table = docs.reference()
    described = docs.field_comments()
    for f in dataclasses.fields(Settings):
        assert f"| `{f.name}` |" in table
        assert described.get(f.name), (
            f"{f.name} has no comment above it in scheduler/config/settings.py"
        )
    assert "`TICKD_STORE_URL`" in table and "`sqlite:///var/tickd.db`" in table


def test_a_changed_setting_is_caught() -> None:
    current = docs.OPERATIONS_MD.read_text(encoding="utf-8")
    stale = current.replace("| `workers` | `TICKD_WORKERS` | integer | `30` |", "| `workers` | x |")
    assert stale != current
    assert docs.with_reference(stale) != stale
