"""API tokens limited to domains, as configured: `domains` in an `[[api_tokens]]` table or
`name:scope@a+b:token` in TICKD_API_TOKENS; names checked by the domain rule, refused on an admin
token, and every refusal naming the field without showing the token."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickd.scheduler.config.settings import ConfigError, load_settings

GOOD = "Zq7Lx2Vm9Kt4Rw8Hn3Cj6Bp1Fs5Dy0Ga4E"
OTHER = "Pm4Ts9Wq2Xv7Kb3Nd8Lh1Rc6Jf5Gz0Ya2U"


def token_file(tmp_path: Path, scope: str, domains: str | None) -> Path:
    path = tmp_path / "tickd.toml"
    limited = "" if domains is None else f"domains = {domains}\n"
    path.write_text(f'[[api_tokens]]\nname = "ci"\nscope = "{scope}"\ntoken = "{GOOD}"\n{limited}')
    return path


def test_a_token_in_a_file_is_limited_to_the_domains_it_names(tmp_path: Path) -> None:
    settings = load_settings(token_file(tmp_path, "write", '["payments", "search"]'), environ={})
    [token] = settings.api_tokens
    assert token.domains == frozenset({"payments", "search"})
    assert GOOD not in repr(token)


def test_a_token_in_the_environment_is_limited_after_its_scope() -> None:
    raw = f"ci:write@payments+eu.search:{GOOD},ops:admin:{OTHER}"
    ci, ops = load_settings(environ={"TICKD_API_TOKENS": raw}).api_tokens
    assert (ci.name, ci.scope, ci.token) == ("ci", "write", GOOD)
    assert ci.domains == frozenset({"payments", "eu.search"})
    assert ops.domains is None, "a token without domains sees every one, as before"


def test_a_token_without_domains_is_unlimited(tmp_path: Path) -> None:
    [token] = load_settings(token_file(tmp_path, "read", None), environ={}).api_tokens
    assert token.domains is None


@pytest.mark.parametrize(
    ("domains", "reason"),
    [
        ('["Payments"]', "not a domain's name"),
        ('["pay ments"]', "not a domain's name"),
        ('["-payments"]', "not a domain's name"),
        ("[]", "at least one domain"),
        ('"payments"', "list of domain names"),
        ("[1]", "list of domain names"),
    ],
)
def test_a_bad_domains_field_is_refused_naming_it(
    tmp_path: Path, domains: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(token_file(tmp_path, "read", domains), environ={})
    assert refused.value.setting == "api_tokens.ci.domains"
    assert reason in str(refused.value)
    assert GOOD not in str(refused.value)


@pytest.mark.parametrize(
    "raw", [f"ci:read@Payments:{GOOD}", f"ci:read@:{GOOD}", f"ci:read@a++b:{GOOD}"]
)
def test_a_bad_domain_in_the_environment_is_refused_naming_the_field(raw: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={"TICKD_API_TOKENS": raw})
    assert refused.value.setting == "api_tokens.ci.domains"
    assert GOOD not in str(refused.value)


def test_an_admin_token_with_domains_is_refused(tmp_path: Path) -> None:
    for path, environ in [
        (token_file(tmp_path, "admin", '["payments"]'), {}),
        (None, {"TICKD_API_TOKENS": f"ci:admin@payments:{GOOD}"}),
    ]:
        with pytest.raises(ConfigError) as refused:
            load_settings(path, environ=environ)
        assert refused.value.setting == "api_tokens.ci.domains"
        assert "admin token sees every domain" in str(refused.value)
        assert GOOD not in str(refused.value)
