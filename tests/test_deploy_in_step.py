"""deploy/ charts and alerts on what /metrics exports: every expression of the Grafana dashboard
and the Prometheus rules names only series a running tickd shows, groups and matches them only by
labels they carry, and every tickd metric family has a panel. docs/operations.md names only
metrics that exist, and every rule."""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import serving
from tests.conftest import EngineFactory, make_job
from tests.test_dead_letters import broken
from tests.test_engine import noop
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.maintenance.objectives import LagObjectives

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DASHBOARDS = sorted(DEPLOY.glob("*.json"))
RULES = DEPLOY / "alerts.yaml"
OPERATIONS_MD = ROOT / "docs" / "operations.md"

# Series Prometheus itself writes for every scrape target.
SCRAPE_SERIES = {"up"}

# The series names each family type shows in the text exposition.
SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "stateset": ("",),
    "unknown": ("",),
}

# Labels Prometheus itself gives every series of a target.
TARGET_LABELS = {"job", "instance"}

# PromQL words that look like metric names but are not.
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left"}
KEYWORDS |= {"group_right", "offset", "bool", "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    keywords, label names (in braces or label lists) or durations."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^{}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in re.finditer(r"(?<![\w$.:])([A-Za-z_:][\w:]*)(\s*\()?", expr):
        name, call = match.groups()
        if not call and name.lower() not in KEYWORDS:
            names.add(name)
    return names


def test_metric_names_reads_selectors_past_functions_labels_and_durations() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, handler) (rate(a_bucket{status=~"x|y",'
        'instance=~"$instance"}[$__rate_interval] offset 1h))) > 2 and on (job) up{job="t"} == 0'
        " unless sum(b) without (le) / ignoring(kind) group_left c"
    )
    assert metric_names(expr) == {"a_bucket", "up", "b", "c"}


def grouping_labels(expr: str) -> set[str]:
    """The labels an expression aggregates by or matches on (`by (...)`, `on (...)`)."""
    lists = re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr)
    return {label.strip() for found in lists for label in found.split(",") if label.strip()}


def test_grouping_labels_reads_by_and_on_lists() -> None:
    expr = "sum by (domain, le) (a) > on (domain) group_left max by(job) (b) and sum(c) without (x)"
    assert grouping_labels(expr) == {"domain", "le", "job"}


def dashboards() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in DASHBOARDS:
        yield path.name, json.loads(path.read_text(encoding="utf-8"))


def panel_expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, expression) for every target of every panel."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def variable_expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """($name, expression) for the template variables that query Prometheus."""
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query", "")
        if variable["type"] == "query":
            label_values = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            yield f"${variable['name']}", label_values.group(1) if label_values else query


def rule_expressions() -> Iterator[tuple[str, str]]:
    for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            yield rule["alert"], rule["expr"]


def every_expression() -> Iterator[tuple[str, str]]:
    for name, dashboard in dashboards():
        for where, expr in [*panel_expressions(dashboard), *variable_expressions(dashboard)]:
            yield f"{name}: {where}", expr
    for alert, expr in rule_expressions():
        yield f"{RULES.name}: {alert}", expr


def families(exposition: str) -> dict[str, set[str]]:
    """Each metric family of a /metrics text, with the series names it may show (a family
    with labels shows no series before its first use, only its HELP and TYPE)."""
    found = {f.name: f.type for f in text_string_to_metric_families(exposition)}
    return {
        name: {name + suffix for suffix in SERIES_SUFFIXES[kind]}
        for name, kind in found.items()
        if not (name.endswith("_created") and name.removesuffix("_created") in found)
    }


@pytest.fixture
async def exposition(make_engine: EngineFactory) -> str:
    """/metrics of an API over an engine on the embedded defaults."""
    async with serving(make_engine) as api, api.client.get("/metrics") as response:
        assert response.status == 200
        return await response.text()


@pytest.fixture
def exported(exposition: str) -> dict[str, set[str]]:
    return families(exposition)


@pytest.fixture
async def labelled(make_engine: EngineFactory) -> dict[str, set[str]]:
    """Each series name of /metrics with the labels its samples carry, after runs that touch the
    metrics by domain: one in a domain with a lag objective, one that ends as a dead letter."""
    h = make_engine({"noop": noop, "broken": broken})
    await h.add(make_job("pay", domain="payments"))
    await h.add(make_job("charge", "broken", domain="payments"))
    await h.engine.drain()
    await h.store.put_domain(DomainSettings(name="payments", lag_objective_seconds=2.5))
    await LagObjectives(h.store, h.engine.metrics).refresh()
    labels: dict[str, set[str]] = {}
    exposition = generate_latest(h.engine.metrics.registry).decode()
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_every_label_deploy_groups_or_matches_by_is_one_its_series_carry(
    labelled: dict[str, set[str]],
) -> None:
    """Only where every series an expression reads has samples here: a family nothing touched
    shows no labels."""
    for name in ("tickd_fire_lag_seconds_bucket", "tickd_domain_lag_objective_seconds"):
        assert "domain" in labelled.get(name, set()), name
    wrong = []
    for where, expr in every_expression():
        names = metric_names(expr)
        if not names or not names <= set(labelled):
            continue
        carried = set().union(*(labelled[name] for name in names)) | TARGET_LABELS
        wrong += [f"{where}: {label}" for label in sorted(grouping_labels(expr) - carried)]
    assert not wrong, wrong


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_metrics_says_which_version_runs_and_what_the_process_uses(exposition: str) -> None:
    build = re.search(r"^tickd_build_info\{(.*)\} 1\.0$", exposition, re.MULTILINE)
    assert build, "no tickd_build_info"
    assert f'version="{version("tickd")}"' in build.group(1)
    assert f'python_version="{platform.python_version()}"' in build.group(1)
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"):
        assert re.search(rf"^{name}\b", exposition, re.MULTILINE), name


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_every_expression_in_deploy_names_series_that_metrics_exports(
    exported: dict[str, set[str]],
) -> None:
    series = set().union(*exported.values()) | SCRAPE_SERIES
    unknown = [
        f"{where}: {name}"
        for where, expr in every_expression()
        for name in sorted(metric_names(expr) - series)
    ]
    assert not unknown, unknown


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_every_tickd_metric_family_has_a_panel_in_the_dashboard(
    exported: dict[str, set[str]],
) -> None:
    charted = {
        name
        for _, dashboard in dashboards()
        for _, expr in panel_expressions(dashboard)
        for name in metric_names(expr)
    }
    missing = [
        family
        for family, series in sorted(exported.items())
        if family.startswith("tickd_") and not series & charted
    ]
    assert not missing, f"no panel for {missing}"


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_docs_operations_md_names_only_metrics_that_exist(
    exported: dict[str, set[str]],
) -> None:
    known = set(exported).union(*exported.values())
    text = re.sub(r"\{[^}]*\}", "", OPERATIONS_MD.read_text("utf-8"))  # label names
    named = set(re.findall(r"\b(?:tickd|process|python)_[a-z_]*[a-z]", text))
    assert named, "docs/operations.md names no metric"
    assert named <= known, sorted(named - known)


def test_docs_operations_md_names_every_alerting_rule() -> None:
    text = OPERATIONS_MD.read_text("utf-8")
    missing = [alert for alert, _ in rule_expressions() if f"`{alert}`" not in text]
    assert not missing, missing


def test_the_alerting_rules_are_well_formed() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for rule in rules["groups"][0]["rules"]:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert rule["alert"] and rule["expr"] and rule["labels"]["severity"]
        assert rule["annotations"]["summary"]


def test_every_panel_has_a_query() -> None:
    for name, dashboard in dashboards():
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(ids) == len(set(ids)), f"{name}: panel ids repeat"
        assert all(panel["targets"] for panel in dashboard["panels"]), name
