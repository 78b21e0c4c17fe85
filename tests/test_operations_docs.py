"""docs/operations.md's configuration reference is generated from the settings model: a setting
added, renamed, re-defaulted or re-described without regenerating it fails here. And deploy/
alerts and charts only name metrics tickd exports."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import yaml

from tickd import docs
from tickd.scheduler.config import Settings
from tickd.scheduler.metrics import Metrics


def test_the_reference_in_docs_operations_md_is_in_step_with_the_settings() -> None:
    current = docs.OPERATIONS_MD.read_text(encoding="utf-8")
    assert current == docs.with_reference(current), "run: python -m tickd.docs"
    assert docs.main(["--check"]) == 0


def test_every_setting_is_listed_with_its_variable_and_a_description() -> None:
    table = docs.reference()
    described = docs.field_comments()
    for f in dataclasses.fields(Settings):
        assert f"| `{f.name}` |" in table
        assert described.get(f.name), f"{f.name} has no comment above it in scheduler/config.py"
    assert "`TICKD_STORE_URL`" in table and "`sqlite:///var/tickd.db`" in table


def test_a_changed_setting_is_caught() -> None:
    current = docs.OPERATIONS_MD.read_text(encoding="utf-8")
    stale = current.replace("| `workers` | `TICKD_WORKERS` | integer | `30` |", "| `workers` | x |")
    assert stale != current
    assert docs.with_reference(stale) != stale


DEPLOY = docs.OPERATIONS_MD.parents[1] / "deploy"


SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
}


def exported_metrics() -> set[str]:
    """Every series name /metrics can show, whether or not a label set has been used yet."""
    return {
        family.name + suffix
        for family in Metrics().registry.collect()
        for suffix in SUFFIXES[family.type]
    }


@pytest.mark.parametrize("name", ["alerts.yaml", "grafana-dashboard.json"])
def test_the_deploy_files_chart_and_alert_on_metrics_tickd_exports(name: str) -> None:
    text = (DEPLOY / name).read_text(encoding="utf-8")
    used = set(re.findall(r"\btickd_[a-z_]+", text))
    assert used, name
    assert used <= exported_metrics(), sorted(used - exported_metrics())


def test_the_alerting_rules_are_well_formed() -> None:
    rules = yaml.safe_load((DEPLOY / "alerts.yaml").read_text(encoding="utf-8"))
    for rule in rules["groups"][0]["rules"]:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert rule["alert"] and rule["expr"] and rule["labels"]["severity"]
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text(encoding="utf-8"))
    assert all(panel["targets"] for panel in dashboard["panels"])
