"""Reading the files `tickd apply` takes: strictly, as written, every mistake named by file, line
and field, nothing guessed; no server needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tickd.cli.jobs_as_code import DefinitionError, load_definitions

PING = "    handler: ping\n    params: {url: 'https://example.com/y'}\n"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def refusal(*paths: Path) -> str:
    with pytest.raises(DefinitionError) as refused:
        load_definitions([str(p) for p in paths])
    return str(refused.value)


def test_a_yaml_key_given_twice_is_refused_naming_the_key_and_its_line(tmp_path: Path) -> None:
    jobs = write(
        tmp_path,
        "jobs.yaml",
        "jobs:\n  - name: twice\n" + PING + "    schedule: {kind: interval, every_seconds: 60}\n"
        "    enabled: true\n    enabled: false\n",
    )

    assert refusal(jobs) == f"{jobs}:7: duplicate key 'enabled' (first on line 6)"


def test_a_json_key_given_twice_is_refused_naming_the_key_and_its_line(tmp_path: Path) -> None:
    text = (
        '{"jobs": [{"name": "twice", "handler": "ping",\n'
        '  "schedule": {"kind": "interval", "every_seconds": 60},\n'
        '  "max_retries": 1,\n'
        '  "max_retries": 5}]}\n'
    )
    jobs = write(tmp_path, "jobs.json", text)

    assert refusal(jobs) == f"{jobs}:4: duplicate key 'max_retries' (first on line 3)"


def test_enabled_off_as_a_string_is_refused_not_read_as_false(tmp_path: Path) -> None:
    job = {
        "name": "quoted",
        "handler": "ping",
        "schedule": {"kind": "interval", "every_seconds": 60},
        "params": {"url": "https://example.com/q"},
        "enabled": "off",
    }
    as_json = write(tmp_path, "jobs.json", json.dumps({"jobs": [job]}, indent=1))
    as_yaml = write(
        tmp_path,
        "jobs.yaml",
        "jobs:\n  - name: bare\n" + PING + "    schedule: {kind: interval, every_seconds: 60}\n"
        "    enabled: off\n",
    )

    assert refusal(as_json) == (
        f"{as_json}:13: jobs[0] (quoted): enabled: Input should be a valid boolean"
    )
    # YAML 1.1 reads a bare `off` as false; tickd reads it as the string it is, and refuses it.
    assert refusal(as_yaml) == (
        f"{as_yaml}:6: jobs[0] (bare): enabled: Input should be a valid boolean"
    )


def test_a_number_given_as_a_string_is_refused_not_converted(tmp_path: Path) -> None:
    jobs = write(
        tmp_path,
        "jobs.yaml",
        "jobs:\n  - name: quoted-retries\n"
        + PING
        + "    schedule: {kind: interval, every_seconds: 60}\n"
        + "    max_retries: '2'\n",
    )

    assert "jobs[0] (quoted-retries): max_retries: Input should be a valid integer" in (
        refusal(jobs)
    )


def test_yaml_is_read_as_yaml_1_2_so_1_30_and_yes_and_0o_stay_what_they_say(
    tmp_path: Path,
) -> None:
    jobs = write(
        tmp_path,
        "jobs.yaml",
        "jobs:\n  - name: core-schema\n    handler: ping\n"
        "    schedule: {kind: interval, every_seconds: 60}\n"
        "    params: {at: 1:30, answer: yes, mode: 0o17, legacy: 017, ratio: 1e3, none: ~}\n",
    )

    [definition] = load_definitions([str(jobs)])

    assert definition.job["params"] == {
        "at": "1:30",
        "answer": "yes",
        "mode": 15,
        "legacy": 17,
        "ratio": 1000.0,
        "none": None,
    }


def test_a_yaml_timestamp_stays_a_string_and_is_checked_as_a_time(tmp_path: Path) -> None:
    jobs = write(
        tmp_path,
        "jobs.yaml",
        "jobs:\n  - name: once\n" + PING + "    schedule: {kind: once, at: 2030-01-01T10:00:00Z}\n",
    )

    [definition] = load_definitions([str(jobs)])

    assert definition.job["schedule"]["at"] == "2030-01-01T10:00:00Z"


LAUGH = '"lollollollollol"'
# Nine levels of nine aliases each: 729 bytes that expand to 9**9 strings.
BOMB = (
    "jobs:\n  - name: the-laughs\n    handler: ping\n"
    "    schedule: {kind: interval, every_seconds: 60}\n    params:\n"
    f"      a: &a [{', '.join([LAUGH] * 9)}]\n"
    + "".join(
        f"      {level}: {'' if level == 'j' else '&' + level + ' '}[{', '.join(['*' + below] * 9)}]\n"  # noqa: E501
        for below, level in zip("abcdefghi", "bcdefghij", strict=True)
    )
)


def test_a_yaml_alias_bomb_is_refused_at_its_first_anchor(tmp_path: Path) -> None:
    jobs = write(tmp_path, "jobs.yaml", BOMB)
    assert len(BOMB.encode()) == 729

    assert refusal(jobs) == (
        f"{jobs}:6: anchors and aliases (&a, *a) are not read: write each value out"
    )


def test_a_folder_is_read_whole_upper_case_suffixes_and_subfolders_included(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "jobs"
    for name, job in (("A.YAML", "upper"), ("team/b.yml", "nested"), ("c.Json", "mixed")):
        if name.lower().endswith(".json"):
            every = {"kind": "interval", "every_seconds": 60}
            body = {"name": job, "handler": "noop", "schedule": every}
            write(folder, name, json.dumps({"jobs": [body]}))
        else:
            write(
                folder,
                name,
                f"jobs:\n  - name: {job}\n    handler: noop\n"
                "    schedule: {kind: interval, every_seconds: 60}\n",
            )
    write(folder, "notes.txt", "not a job file")

    names = [d.name for d in load_definitions([str(folder)])]

    assert sorted(names) == ["mixed", "nested", "upper"]


def test_every_mistake_of_every_file_is_named_at_once(tmp_path: Path) -> None:
    first = write(
        tmp_path,
        "a.yaml",
        "jobs:\n  - name: one\n" + PING + "    schedule: {kind: interval, every_seconds: 60}\n"
        "    max_retries: -1\n"
        "  - name: two\n" + PING + "    schedule: {kind: interval, every_seconds: 60}\n"
        "    priority: urgent\n",
    )
    second = write(tmp_path, "b.json", '{"jobs": [}')

    lines = refusal(first, second).splitlines()

    assert len(lines) == 3
    assert lines[0].startswith(f"{first}:6: jobs[0] (one): max_retries: ")
    assert lines[1].startswith(f"{first}:11: jobs[1] (two): priority: ")
    assert lines[2].startswith(f"{second}:1: ")


def test_a_toml_or_json_syntax_error_and_nan_are_refused_naming_the_line(tmp_path: Path) -> None:
    toml = write(tmp_path, "jobs.toml", '[[jobs]]\nname = "x"\nhandler = \n')
    nan = write(tmp_path, "nan.json", '{"jobs": [{"name": "x", "jitter_seconds": NaN}]}')

    assert refusal(toml) == f"{toml}:3: not TOML: Invalid value"
    assert refusal(nan) == f"{nan}: NaN: not a number JSON has"
